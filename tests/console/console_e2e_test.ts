/**
 * The browser console in a real browser (Debian's chromium, headless,
 * through playwright-core) against a local cluster this test starts (1
 * control plane + 1 worker, each node in its own network namespace on its
 * own swtpm), and the built console (`dist/console`) as its own process:
 *
 * - the cluster view shows every node's phase;
 * - the inspector verifies, in the page, a node whose bootstrapper still
 *   serves its attestation (a control plane whose key the operator did not
 *   name for control planes: refused by the join service and retrying, its
 *   measurements genuine), every PCR matching;
 * - a node booted with another PCR 4 (retrying too) shows that PCR as a
 *   mismatch and "verification failed";
 * - for the same evidence, downloaded from the page, `deno task cli verify
 *   --evidence … --output json` prints the document the page shows;
 * - the join service dashboard's counters change when a node joins;
 * - a page from an origin the cluster does not allow is refused (CORS), and
 *   says so; an address where nothing listens is said in words;
 * - the page stays readable at phone width.
 *
 * Every step saves a screenshot under test-output/console/.
 */
import assert from "node:assert/strict";
import type { Browser, Page } from "playwright-core";
import { type LocalCluster, startLocalCluster } from "../../src/localcluster/cluster.ts";
import { REPO_ROOT } from "../../src/localcluster/node.ts";
import { freePort } from "../../src/net/free_port.ts";
import { runToExit, startService } from "../../src/os/service_process.ts";
import { CONSOLE_LISTENING } from "../../src/console/main.ts";
import { buildArtifacts, DIST, PINNED_DENO } from "../build/artifacts.ts";
import { launchChromium, screenshot } from "../support/browser.ts";

/** How long the page may take for one thing (a TPM quote, a refresh, a join). */
const PAGE_TIMEOUT_MS = 30_000;

Deno.test("browser console: inspector, dashboard and cluster view against a local cluster", async (t) => {
  const timings: string[] = [];
  const timed = async <T>(what: string, run: () => Promise<T>): Promise<T> => {
    const start = performance.now();
    try {
      return await run();
    } finally {
      timings.push(`${what}: ${((performance.now() - start) / 1000).toFixed(1)} s`);
    }
  };
  const stateDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "console-e2e-" }));
  const work = await Deno.makeTempDir({ prefix: "console-e2e-files-" });
  const consolePort = freePort();
  const origin = `http://127.0.0.1:${consolePort}`;
  const stack = new AsyncDisposableStack();
  let failed = false;
  const step = async (name: string, fn: () => Promise<void>) => {
    if (!await t.step(name, fn)) failed = true;
  };
  try {
    const cluster = await timed("local cluster up (1+1, netns)", () =>
      startLocalCluster({
        stateDir,
        controlPlanes: 1,
        workers: 1,
        network: "netns",
        corsAllowOrigins: [origin],
      }));
    stack.defer(() => cluster.close());
    const consoleServer = await timed("console server (built: the artifact and its page)", async () => {
      await buildArtifacts("console");
      return await startService(
        `${DIST}console`,
        ["--port", String(consolePort), "--local-cluster", stateDir],
        { readyMatch: CONSOLE_LISTENING, env: { DENO: PINNED_DENO }, cwd: "/", timeoutMs: 60_000 },
      );
    });
    stack.defer(() => consoleServer.stop().then(() => {}));
    const browser = await timed("chromium launch", () => launchChromium());
    stack.defer(() => browser.close());
    const page = await newPage(browser, { width: 1280, height: 800 });

    await step("the cluster view shows every node and its phase", async () => {
      await page.goto(`${origin}/`);
      await waitForText(page, '[data-testid=nodes-table] tr[data-node="control-plane-0"]', "joined");
      await waitForText(page, '[data-testid=nodes-table] tr[data-node="worker-0"]', "joined");
      assert.equal(await page.getAttribute('nav a[data-view="cluster"]', "aria-current"), "page");
      await waitForText(page, "[data-testid=config-line]", "the local cluster's attestation config");
      await screenshot(page, "01-cluster-view");
    });

    // A genuine node that keeps retrying: its key is trusted, but not for the control-plane role.
    const waiting = await cluster.addNode({
      role: "ControlPlane",
      name: "control-plane-unlisted",
      controlPlaneKey: false,
    });
    await cluster.waitForPhase(waiting.name, ["refused"]);
    const waitingEndpoint = waiting.status.attestationEndpoint!;

    await step("the inspector verifies a node in the browser: verified, every PCR matching", async () => {
      await timed("inspect a genuine node", () => inspectByKeyboard(page, waitingEndpoint));
      const verdict = await page.textContent("[data-testid=verdict]");
      assert.equal(verdict, `Verified ${waitingEndpoint}: attestation OK`);
      const rows = await pcrRows(page);
      assert.deepEqual(rows.map((row) => row.pcr), ["4", "9", "15"]);
      for (const row of rows) {
        assert.equal(row.match, "ok", `PCR ${row.pcr}`);
        assert.equal(row.actual, row.expected, `PCR ${row.pcr}`);
        assert.equal(row.policy, "enforced");
        assert.equal(row.mismatch, false);
      }
      await screenshot(page, "02-inspector-verified");
    });

    await step("the page's result equals `cli verify --output json` for the same evidence", async () => {
      await sameVerdictAsCli(page, cluster, work, "genuine", 0);
    });

    const tampered = await cluster.addNode({ role: "Worker", name: "worker-tampered", tamperPcr4: true });
    await cluster.waitForPhase(tampered.name, ["refused"]);

    await step(
      "a tampered node, opened from the cluster view: PCR 4 mismatching, verification failed",
      async () => {
        await page.goto(`${origin}/#cluster`);
        const row = `[data-testid=nodes-table] tr[data-node="${tampered.name}"]`;
        // Its phase flips between refused (by the join service) and waiting (for the unlisted control
        // plane, which runs none); its bootstrapper serves its attestation throughout.
        await page.locator(`${row} button`, { hasText: "Verify attestation" }).waitFor({
          timeout: PAGE_TIMEOUT_MS,
        });
        await timed("inspect the tampered node", async () => {
          await page.click(`${row} button:has-text("Verify attestation")`);
          await waitForResult(page);
        });
        assert.equal(
          await page.textContent("[data-testid=verdict]"),
          `Verification failed for ${tampered.status.attestationEndpoint}: attestation FAILED (measurement-mismatch)`,
        );
        assert.equal(
          await page.textContent("[data-testid=verdict-mismatches]"),
          "mismatching: PCR[4] (enforced)",
        );
        const rows = await pcrRows(page);
        const pcr4 = rows.find((r) => r.pcr === "4")!;
        assert.equal(pcr4.match, "MISMATCH");
        assert.equal(pcr4.mismatch, true, "the PCR 4 row is highlighted");
        assert.notEqual(pcr4.actual, pcr4.expected);
        for (const other of rows.filter((r) => r.pcr !== "4")) {
          assert.equal(other.match, "ok", `PCR ${other.pcr}`);
          assert.equal(other.mismatch, false);
        }
        await screenshot(page, "03-inspector-tampered");
      },
    );

    await step("…and `cli verify --evidence` reaches the same verdict for that evidence", async () => {
      await sameVerdictAsCli(page, cluster, work, "tampered", 1);
    });

    await step("at phone width the result stays readable: no sideways scrolling", async () => {
      await atPhoneWidth(page, "04-inspector-tampered-phone");
    });

    await step("the join service dashboard: its counters change after a node joins", async () => {
      await page.goto(`${origin}/#cluster`);
      const row = '[data-testid=nodes-table] tr[data-node="control-plane-0"]';
      await waitForText(page, row, "joined");
      await page.click(`${row} button:has-text("Join service")`);
      await page.waitForSelector("[data-testid=dashboard-body]", {
        state: "visible",
        timeout: PAGE_TIMEOUT_MS,
      });
      const before = Number(await page.textContent("[data-testid=tickets-issued]"));
      assert.equal(before, 1, "worker-0 got its ticket; control-plane-0 was initialized, not joined");
      assert.equal(await page.textContent("[data-testid=status-variant]"), "qemu-vtpm");
      await waitForText(page, "[data-testid=refusals-table]", "measurement-mismatch");
      await waitForText(page, "[data-testid=refusals-table]", "control-plane-not-allowed");
      await screenshot(page, "05-dashboard-before-join");

      const joining = await cluster.addNode({ role: "Worker", name: "worker-late" });
      await timed("a node joins and the dashboard shows it", async () => {
        await cluster.waitForPhase(joining.name, ["joined"]);
        await page.locator(`[data-testid=tickets-issued]:text-is("${before + 1}")`).waitFor({
          timeout: PAGE_TIMEOUT_MS,
        });
      });
      await waitForText(page, "[data-testid=decisions-table]", "worker-late");
      await screenshot(page, "06-dashboard-after-join");
      await atPhoneWidth(page, "07-dashboard-phone");
      await page.click('nav a[data-view="cluster"]');
      await waitForText(page, '[data-testid=nodes-table] tr[data-node="worker-late"]', "joined");
      await atPhoneWidth(page, "08-cluster-view-phone");
    });

    await step("a page from an origin the cluster does not allow is refused, and says so", async () => {
      // The same console under another name is another origin, one the nodes were not told to allow.
      const other = await newPage(browser, { width: 1280, height: 800 });
      try {
        await other.goto(`http://localhost:${consolePort}/#inspector`);
        await waitForText(other, "[data-testid=config-line]", "local cluster");
        await inspectByKeyboard(other, waitingEndpoint, { expectError: /^CORS refused: / });
        const status = await other.textContent("[data-testid=inspect-status]") ?? "";
        assert.match(status, /--cors-allow-origin http:\/\/localhost:/);
        assert.ok(await other.isHidden("[data-testid=inspect-result]"), "no result is shown");
        await screenshot(other, "09-cors-refused");
      } finally {
        await other.close();
      }
      // What the browser was told: the preflight gets no permission, and a call gets 403.
      const url = `http://${waitingEndpoint}/init.API/GetAttestation`;
      const preflight = await fetch(url, {
        method: "OPTIONS",
        headers: { origin: "http://localhost:1", "access-control-request-method": "POST" },
      });
      await preflight.body?.cancel();
      assert.equal(preflight.status, 403);
      assert.equal(preflight.headers.get("access-control-allow-origin"), null);
      const allowed = await fetch(url, {
        method: "OPTIONS",
        headers: { origin, "access-control-request-method": "POST" },
      });
      await allowed.body?.cancel();
      assert.equal(allowed.status, 204);
      assert.equal(allowed.headers.get("access-control-allow-origin"), origin);
    });

    await step("an address where nothing listens is said in words, not a blank page", async () => {
      const nothingThere = `${cluster.node("control-plane-0").network.address}:9999`;
      await inspectByKeyboard(page, nothingThere, { expectError: /^Cannot reach the node/ });
      const status = await page.textContent("[data-testid=inspect-status]") ?? "";
      assert.match(status, /^Cannot reach the node at http:\/\/[\d.]+:9999: nothing answers there/);
      await screenshot(page, "10-unreachable");
    });
  } catch (error) {
    failed = true;
    throw error;
  } finally {
    await stack.disposeAsync();
    await Deno.remove(work, { recursive: true }).catch(() => {});
    // A failed run keeps the cluster's logs.
    if (!failed) await Deno.remove(stateDir, { recursive: true }).catch(() => {});
    else console.log(`the cluster's state and logs: ${stateDir}`);
    console.log(`timings:\n  ${timings.join("\n  ")}`);
  }
});

/**
 * Shows `page` at a phone's width (390 × 844), saves the screenshot `name`,
 * checks nothing makes the page scroll sideways, and goes back to 1280 × 800.
 */
async function atPhoneWidth(page: Page, name: string): Promise<void> {
  await page.setViewportSize({ width: 390, height: 844 });
  try {
    await screenshot(page, name);
    const overflow = await page.locator("html").evaluate((html) => html.scrollWidth - html.clientWidth);
    assert.ok(overflow <= 0, `the page is ${overflow} px wider than the phone's screen (see ${name}.png)`);
  } finally {
    await page.setViewportSize({ width: 1280, height: 800 });
  }
}

async function newPage(browser: Browser, viewport: { width: number; height: number }): Promise<Page> {
  const context = await browser.newContext({ viewport, acceptDownloads: true });
  const page = await context.newPage();
  page.on("pageerror", (error) => console.error(`page error: ${error.message}`));
  return page;
}

/**
 * Types `address` into the inspector and presses Enter (no mouse); waits for
 * the result, or with `expectError` for the status line to say that.
 */
async function inspectByKeyboard(
  page: Page,
  address: string,
  options: { expectError?: RegExp } = {},
): Promise<void> {
  if (!page.url().endsWith("#inspector")) await page.click('nav a[data-view="inspector"]');
  await page.focus("#inspect-node");
  await page.fill("#inspect-node", "");
  await page.keyboard.type(address);
  await page.keyboard.press("Enter");
  if (options.expectError) {
    await page.locator("[data-testid=inspect-status].error", { hasText: options.expectError }).waitFor({
      timeout: PAGE_TIMEOUT_MS,
    });
  } else {
    await waitForResult(page);
  }
}

/** Waits until the inspector shows a result (the button is enabled again and the result visible). */
async function waitForResult(page: Page): Promise<void> {
  await page.locator("#inspect-button:enabled").waitFor({ timeout: PAGE_TIMEOUT_MS });
  await page.locator("[data-testid=inspect-result]").waitFor({ state: "visible", timeout: PAGE_TIMEOUT_MS });
}

/** Waits until the element at `selector` (shown or not) contains `text`. */
async function waitForText(page: Page, selector: string, text: string): Promise<void> {
  await page.locator(selector, { hasText: text }).first().waitFor({
    state: "attached",
    timeout: PAGE_TIMEOUT_MS,
  });
}

interface ShownRow {
  pcr: string;
  policy: string;
  match: string;
  expected: string;
  actual: string;
  mismatch: boolean;
}

/** The PCR table as shown. */
function pcrRows(page: Page): Promise<ShownRow[]> {
  return page.$$eval("[data-testid=pcr-table] tbody tr", (rows) =>
    rows.map((row) => {
      const cells = [...row.querySelectorAll("td")].map((td) => td.textContent ?? "");
      return {
        pcr: cells[0],
        policy: cells[1],
        match: cells[2],
        expected: cells[3],
        actual: cells[4],
        mismatch: row.classList.contains("mismatch"),
      };
    }));
}

/**
 * Downloads the evidence the page just verified, runs `deno task cli verify
 * --evidence` on it with the cluster's attestation config, and checks the
 * CLI's JSON and exit status against the page's result.
 */
async function sameVerdictAsCli(
  page: Page,
  cluster: LocalCluster,
  dir: string,
  name: string,
  wantStatus: number,
): Promise<void> {
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.click("[data-testid=download-evidence]"),
  ]);
  const file = `${dir}/${name}-${download.suggestedFilename()}`;
  await download.saveAs(file);
  const pageResult = JSON.parse(await page.textContent("[data-testid=result-json]") ?? "");
  const cli = await runToExit(
    "deno",
    [
      "task",
      "cli",
      "verify",
      "--evidence",
      file,
      "--attestation-config",
      cluster.paths.attestationConfig,
      "--output",
      "json",
    ],
    { cwd: REPO_ROOT, timeoutMs: 60_000 },
  );
  assert.equal(cli.code, wantStatus, cli.stderrLines.join("\n"));
  const cliResult = JSON.parse(cli.stdoutLines.join("\n"));
  assert.deepEqual(cliResult, pageResult);
  assert.equal(cliResult.passed, wantStatus === 0);
}
