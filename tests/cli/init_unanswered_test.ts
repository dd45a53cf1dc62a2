/**
 * `cli init` against an init server (the real one, over real TLS, on fakes
 * of the node) that takes the Init and never answers: the operator is told
 * that the Init reached the node and what that means.
 */
import assert from "node:assert/strict";
import { CliError } from "../../src/cli/errors.ts";
import { type InitCommand, runInit } from "../../src/cli/init.ts";
import { API } from "../../src/gen/init/init_pb.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { serveRpc } from "../../src/rpc/server.ts";
import { createSelfSignedCertificate } from "../../src/x509/selfsigned.ts";
import { DUMMY_ATTESTATION_CONFIG, fakeInitDependencies, INIT_SECRET } from "../support/init_fakes.ts";

/** Runs `cli init` against a node whose kubeadm never ends; `interrupt` stands for Ctrl-C once the Init is sent. */
async function unansweredInit(options: { initTimeoutMs: number; interrupt?: boolean }): Promise<CliError> {
  const dir = await Deno.makeTempDir({ prefix: "cli-init-unanswered-" });
  // kubeadm never ends until the node stops (which cancels it).
  const world = fakeInitDependencies({ clusterNeverEnds: true });
  const server = await serveRpc({
    hostname: "127.0.0.1",
    port: 0,
    tls: createSelfSignedCertificate({ commonName: "node", dnsNames: ["localhost"] }),
    routes: (router) => router.service(API, world.server.handlers()),
  });
  try {
    await Deno.writeTextFile(`${dir}/attestation-config.json`, DUMMY_ATTESTATION_CONFIG);
    await Deno.writeTextFile(`${dir}/init-secret`, INIT_SECRET);
    const command: InitCommand = {
      node: `127.0.0.1:${server.address.port}`,
      attestationConfig: `${dir}/attestation-config.json`,
      masterSecret: `${dir}/master-secret.json`,
      initSecretFile: `${dir}/init-secret`,
      kubernetesVersion: "v1.30.2",
      clusterName: "test",
      kubeconfigOut: `${dir}/admin.conf`,
      logsOut: `${dir}/init.log`,
      timeoutMs: 10_000,
      initTimeoutMs: options.initTimeoutMs,
    };
    const ctrlC = new AbortController();
    const progress = {
      phase: (phase: string) => {
        if (options.interrupt && /the node initializes/.test(phase)) setTimeout(() => ctrlC.abort(), 100);
      },
      done: () => {},
    };
    const signal = options.interrupt ? ctrlC.signal : undefined;
    const error = await runInit(command, { progress, logger: silentLogger, print: () => {}, signal }).then(
      () => assert.fail("init succeeded"),
      (e) => e,
    );
    assert.ok(error instanceof CliError, String(error));
    await assert.rejects(Deno.stat(command.kubeconfigOut), Deno.errors.NotFound);
    return error;
  } finally {
    world.server.close();
    await server.shutdown(100);
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("cli init: an Init that reached the node and got no answer says what that means", async (t) => {
  await t.step("--init-timeout passed", async () => {
    const error = await unansweredInit({ initTimeoutMs: 300 });
    assert.match(
      error.message,
      /^the node did not finish the init within --init-timeout 0.3 s\. The Init reached/,
    );
    assert.match(
      error.message,
      /goes on initializing by itself \(for at most 25 minutes\), .* cannot be fetched again$/,
    );
  });
  await t.step("interrupted (Ctrl-C) while the node works", async () => {
    const error = await unansweredInit({ initTimeoutMs: 60_000, interrupt: true });
    assert.equal(error.reason, "canceled");
    assert.match(error.message, /^init canceled\. The Init reached the node/);
  });
});
