/**
 * The console's page (built, served by the console server) in Debian's
 * chromium, headless, when the operator starts something while the page
 * still waits for an earlier answer. The nodes and the join service are fake
 * browser ports (`serveBrowserRpc` with handlers that answer when the test
 * lets them), so the test decides which answer comes first:
 *
 * - two nodes verified one after the other from the cluster view, the first
 *   slow and genuine, the second quick and tampered: the page shows the
 *   second node's failed verdict, naming it, and keeps showing it after the
 *   first node answers; the first call is cancelled, and the downloads hold
 *   the second node's evidence;
 * - the dashboard's "live" switched off and on while a refresh waits for its
 *   answer: still one refresh at a time, every 2 s, and off stops them.
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import type { Page } from "playwright-core";
import { generateKeyPair } from "../../src/atls/hpke.ts";
import { buildConsole } from "../../src/console/build.ts";
import { type ConsoleServer, serveConsole } from "../../src/console/server.ts";
import { API as InitAPI, GetAttestationResponseSchema } from "../../src/gen/init/init_pb.ts";
import { API as JoinAPI, GetStatusResponseSchema } from "../../src/gen/join/join_pb.ts";
import { initReportData } from "../../src/init/protocol.ts";
import type { ClusterStatus } from "../../src/localcluster/status.ts";
import { serveBrowserRpc } from "../../src/rpc/browser_server.ts";
import { launchChromium, screenshot } from "../support/browser.ts";
import { SoftwareTpmIssuer } from "../support/software_tpm.ts";

/** How long the page may take for one thing here (fake services answer at once when let). */
const PAGE_TIMEOUT_MS = 10_000;
/**
 * How long the page gets to act on something before the test concludes it
 * did not (verifying a software quote or sending a request takes
 * milliseconds).
 */
const SETTLE_MS = 1_500;
/** The dashboard's time between refreshes while live (the page's REFRESH_INTERVAL_MS, which needs the DOM). */
const REFRESH_INTERVAL_MS = 2_000;

const GENUINE_PCRS = new Map(Array.from({ length: 16 }, (_, i) => [i, new Uint8Array(32).fill(0x10 + i)]));
const TAMPERED_PCRS = new Map([...GENUINE_PCRS, [4, new Uint8Array(32).fill(0xee)]]);

Deno.test("inspector: a slow earlier inspection never shows over the node verified last", async () => {
  await using stack = new AsyncDisposableStack();
  const dir = await Deno.makeTempDir({ prefix: "console-overlap-" });
  stack.defer(() => Deno.remove(dir, { recursive: true }));
  const genuine = await SoftwareTpmIssuer.create({ pcrs: GENUINE_PCRS });
  const tampered = await SoftwareTpmIssuer.create({ pcrs: TAMPERED_PCRS });
  const stateDir = `${dir}/cluster`;
  await Deno.mkdir(stateDir);
  await Deno.writeTextFile(
    `${stateDir}/attestation-config.json`,
    JSON.stringify({
      variant: genuine.variant,
      measurements: Object.fromEntries(
        [...GENUINE_PCRS].map(([index, value]) => [index, { expected: value.toHex(), warnOnly: false }]),
      ),
      akTrust: { allowedKeyDigests: [genuine.keyDigest, tampered.keyDigest] },
    }),
  );
  const consoleServer = await startConsole(stack, dir, stateDir);
  const origin = `http://127.0.0.1:${consoleServer.port}`;

  // The genuine node answers only when the test lets it (a busy TPM); the tampered one at once.
  const slowCalled = Promise.withResolvers<void>();
  const letSlowAnswer = Promise.withResolvers<void>();
  const slowAnswered = Promise.withResolvers<{ cancelled: boolean }>();
  const slow = await attestingNode(stack, genuine, origin, async (signal) => {
    slowCalled.resolve();
    await letSlowAnswer.promise;
    slowAnswered.resolve({ cancelled: signal.aborted });
  });
  stack.defer(() => letSlowAnswer.resolve()); // lets its server shut down when the test fails early
  const quick = await attestingNode(stack, tampered, origin, () => Promise.resolve());
  const slowAddress = `127.0.0.1:${slow.address.port}`;
  const quickAddress = `127.0.0.1:${quick.address.port}`;
  await writeClusterStatus(stateDir, [["worker-slow", slowAddress], ["worker-tampered", quickAddress]]);

  const browser = await launchChromium();
  stack.defer(() => browser.close());
  const context = await browser.newContext({ acceptDownloads: true });
  const page = await context.newPage();
  page.on("pageerror", (error) => console.error(`page error: ${error.message}`));
  await page.goto(`${origin}/#cluster`);

  await verifyFromClusterView(page, "worker-slow");
  await slowCalled.promise;
  // While the page still waits for the genuine node, the operator verifies the tampered one.
  await page.click('nav a[data-view="cluster"]');
  await verifyFromClusterView(page, "worker-tampered");
  const failedVerdict = `Verification failed for ${quickAddress}: attestation FAILED (measurement-mismatch)`;
  await page.locator("[data-testid=verdict]", { hasText: failedVerdict }).waitFor({
    timeout: PAGE_TIMEOUT_MS,
  });

  letSlowAnswer.resolve();
  const { cancelled } = await slowAnswered.promise;
  await page.waitForTimeout(SETTLE_MS);
  await screenshot(page, "overlap-inspections");
  assert.equal(await page.textContent("[data-testid=verdict]"), failedVerdict);
  assert.match(
    await page.textContent("[data-testid=inspect-status]") ?? "",
    new RegExp(`^Verification failed for ${RegExp.escape(quickAddress)} against `),
  );
  assert.equal(
    await page.textContent("[data-testid=verdict-mismatches]"),
    "mismatching: PCR[4] (enforced)",
  );
  assert.equal(await page.inputValue("#inspect-node"), quickAddress);
  assert.ok(await page.isEnabled("#inspect-button"), "the Verify button is back");
  assert.ok(cancelled, "the page cancelled its call to the slow node when it asked the next one");
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.click("[data-testid=download-evidence]"),
  ]);
  assert.match(
    download.suggestedFilename(),
    new RegExp(`^evidence-${RegExp.escape(quickAddress.replace(":", "_"))}-`),
    "the downloaded evidence is the tampered node's",
  );
});

Deno.test("dashboard: live switched off and on during a refresh keeps one refresh loop", async () => {
  await using stack = new AsyncDisposableStack();
  const dir = await Deno.makeTempDir({ prefix: "console-overlap-" });
  stack.defer(() => Deno.remove(dir, { recursive: true }));
  const consoleServer = await startConsole(stack, dir);
  const origin = `http://127.0.0.1:${consoleServer.port}`;

  // Each GetStatus waits until the test lets it answer; the service notes when calls start and end.
  const calls: { start: number; end?: number }[] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  let called = Promise.withResolvers<void>();
  let letAnswer = Promise.withResolvers<void>();
  const joinService = await serveBrowserRpc({
    hostname: "127.0.0.1",
    port: 0,
    allowedOrigins: [origin],
    routes: (router) =>
      router.rpc(JoinAPI.method.getStatus, async () => {
        const call: { start: number; end?: number } = { start: performance.now() };
        calls.push(call);
        mostInFlight = Math.max(mostInFlight, ++inFlight);
        called.resolve();
        await letAnswer.promise;
        inFlight--;
        call.end = performance.now();
        return create(GetStatusResponseSchema, { attestationVariant: "qemu-vtpm" });
      }),
  });
  stack.defer(() => joinService.shutdown(100));
  stack.defer(() => letAnswer.resolve());
  /** Waits for the next call, then lets it answer after `whileWaiting` (and time for the page to call again). */
  const nextCall = async (whileWaiting: () => Promise<void>) => {
    await called.promise;
    called = Promise.withResolvers();
    await whileWaiting();
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    const answer = letAnswer;
    letAnswer = Promise.withResolvers();
    answer.resolve();
  };

  const browser = await launchChromium();
  stack.defer(() => browser.close());
  const page = await browser.newPage();
  page.on("pageerror", (error) => console.error(`page error: ${error.message}`));
  await page.goto(`${origin}/#dashboard`);
  await page.fill("#dashboard-endpoint", `127.0.0.1:${joinService.address.port}`);
  await page.press("#dashboard-endpoint", "Enter");
  const toggle = async () => {
    await page.uncheck("#dashboard-live");
    await page.check("#dashboard-live");
  };
  for (let round = 0; round < 2; round++) await nextCall(toggle);
  await nextCall(() => page.uncheck("#dashboard-live"));
  await page.waitForTimeout(REFRESH_INTERVAL_MS + SETTLE_MS);
  await page.locator("[data-testid=dashboard-body]").waitFor({ timeout: PAGE_TIMEOUT_MS });

  assert.equal(mostInFlight, 1, "one refresh at a time: switching live on during one started no other");
  assert.equal(calls.length, 3, "each refresh followed the last one; off stopped them");
  for (const [i, call] of calls.entries()) {
    if (i === 0) continue;
    const gap = call.start - calls[i - 1].end!;
    // A refresh starts REFRESH_INTERVAL_MS after the page got the last answer; a second loop would start one
    // sooner. The margin covers timers firing early by a little, never by half.
    assert.ok(
      gap >= REFRESH_INTERVAL_MS / 2,
      `call ${i + 1} started ${gap.toFixed(0)} ms after call ${i} ended`,
    );
  }
});

/** Builds the console and serves it on loopback (pointed at the local cluster in `stateDir`, if given). */
async function startConsole(
  stack: AsyncDisposableStack,
  dir: string,
  stateDir?: string,
): Promise<ConsoleServer> {
  await buildConsole(`${dir}/web`);
  const server = await serveConsole({
    dir: `${dir}/web`,
    hostname: "127.0.0.1",
    port: 0,
    localCluster: stateDir,
  });
  stack.defer(() => server.close());
  return server;
}

/**
 * A node's browser port: `GetAttestation` answered with `issuer`'s evidence
 * for the page's nonce, after `before` (given the call's signal) resolves.
 */
async function attestingNode(
  stack: AsyncDisposableStack,
  issuer: SoftwareTpmIssuer,
  origin: string,
  before: (signal: AbortSignal) => Promise<void>,
) {
  const node = await serveBrowserRpc({
    hostname: "127.0.0.1",
    port: 0,
    allowedOrigins: [origin],
    routes: (router) =>
      router.rpc(InitAPI.method.getAttestation, async (request, context) => {
        await before(context.signal);
        const keyPair = await generateKeyPair();
        const document = await issuer.issue(await initReportData(request.nonce, keyPair.publicKey));
        return create(GetAttestationResponseSchema, {
          publicKey: keyPair.publicKey,
          evidence: { variant: issuer.variant, document },
        });
      }),
  });
  stack.defer(() => node.shutdown(100));
  return node;
}

/** A running local cluster's status file listing `nodes` (name, browser port), each refused and retrying. */
async function writeClusterStatus(
  stateDir: string,
  nodes: [name: string, endpoint: string][],
): Promise<void> {
  const status: ClusterStatus = {
    state: "running",
    stateDir,
    supervisorPid: 4242,
    network: { kind: "loopback", hostAddress: "127.0.0.1", bridge: "", namespaces: [], owner: "" },
    startedAt: new Date().toISOString(),
    kubeconfig: `${stateDir}/admin.conf`,
    logs: `${stateDir}/logs`,
    nodes: nodes.map(([name, endpoint], i) => ({
      name,
      role: "Worker",
      index: i + 1,
      address: "127.0.0.1",
      phase: "refused",
      attestationEndpoint: endpoint,
      log: `${stateDir}/logs/${name}.log`,
    })),
    processes: [],
  };
  await Deno.writeTextFile(`${stateDir}/cluster.json`, JSON.stringify(status));
}

/** Presses the cluster view's "Verify attestation" for the node `name`. */
async function verifyFromClusterView(page: Page, name: string): Promise<void> {
  const button = page.locator(`[data-testid=nodes-table] tr[data-node="${name}"] button`, {
    hasText: "Verify attestation",
  });
  await button.waitFor({ timeout: PAGE_TIMEOUT_MS });
  await button.click();
}
