/**
 * `cli init`, `cli recover --node` and `cli verify` against nodes over real
 * TLS (`serveRpc`, the CLI's own connection): a node whose attestation key is
 * no control plane's is sent nothing; warn-only mismatches are named one
 * line each; a kubeconfig that arrived is kept when the stream fails after
 * it; the node's text reaches the error line escaped; and what a node sends
 * is bounded (its logs, each message).
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, createClient, type ServiceImpl } from "@connectrpc/connect";
import { parseAttestationConfigFile } from "../../src/cli/attestation_config_file.ts";
import { trusts } from "../../src/attestation/attestation.ts";
import { TpmIssuer } from "../../src/attestation/tpm/issuer.ts";
import { CliError } from "../../src/cli/errors.ts";
import { type InitCommand, runInit } from "../../src/cli/init.ts";
import { runRecoverNode } from "../../src/cli/recover.ts";
import { verifyNode } from "../../src/cli/verify.ts";
import { createWarningLogger } from "../../src/cli/warning_logger.ts";
import { API, GetAttestationResponseSchema, InitResponseSchema } from "../../src/gen/init/init_pb.ts";
import { API as RecoverAPI } from "../../src/gen/recoverproto/recover_pb.ts";
import { MAX_KEPT_LOG_BYTES } from "../../src/init/client.ts";
import { NODE_READ_MAX_BYTES } from "../../src/init/protocol.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { startSwtpm } from "../../src/localcluster/swtpm.ts";
import { serveRpc } from "../../src/rpc/server.ts";
import { createSelfSignedCertificate } from "../../src/x509/selfsigned.ts";
import {
  DUMMY_ATTESTATION_CONFIG,
  FAKE_KUBECONFIG,
  fakeInitDependencies,
  INIT_SECRET,
  type InitWorld,
} from "../support/init_fakes.ts";
import { fakeRecoveryNode, RECOVERY_MASTER } from "../support/recovery_fakes.ts";

const TLS = createSelfSignedCertificate({ commonName: "node", dnsNames: ["localhost"] });

/** A node's server on loopback over TLS, as the CLI dials one; dispose to stop it. */
async function serveNode(routes: (router: ConnectRouter) => void) {
  const server = await serveRpc({ hostname: "127.0.0.1", port: 0, tls: TLS, routes });
  return {
    node: `127.0.0.1:${server.address.port}`,
    [Symbol.asyncDispose]: () => server.shutdown(100),
  };
}

/** The init server of `world`, its `init` and `getAttestation` replaced by `overrides` where given. */
function initRoutes(world: InitWorld, overrides: Partial<ServiceImpl<typeof API>> = {}) {
  return (router: ConnectRouter) => router.service(API, { ...world.server.handlers(), ...overrides });
}

/** A temporary directory with the attestation config `config`, the init secret and the master secret. */
async function operatorFiles(config: string) {
  const dir = await Deno.makeTempDir({ prefix: "cli-node-answers-" });
  await Deno.writeTextFile(`${dir}/attestation-config.json`, config);
  await Deno.writeTextFile(`${dir}/init-secret`, INIT_SECRET);
  await Deno.writeTextFile(
    `${dir}/master-secret.json`,
    JSON.stringify({ key: RECOVERY_MASTER.key.toBase64(), salt: RECOVERY_MASTER.salt.toBase64() }),
  );
  return {
    dir,
    attestationConfig: `${dir}/attestation-config.json`,
    masterSecret: `${dir}/master-secret.json`,
    [Symbol.asyncDispose]: () => Deno.remove(dir, { recursive: true }),
  };
}

/** `cli init` of `node` with the files in `files`; resolves with what it printed and warned, or its error. */
async function cliInit(
  node: string,
  files: Awaited<ReturnType<typeof operatorFiles>>,
  overrides: Partial<InitCommand> = {},
) {
  const command: InitCommand = {
    node,
    attestationConfig: files.attestationConfig,
    masterSecret: files.masterSecret,
    initSecretFile: `${files.dir}/init-secret`,
    kubernetesVersion: "v1.30.2",
    clusterName: "test",
    kubeconfigOut: `${files.dir}/admin.conf`,
    logsOut: `${files.dir}/init.log`,
    timeoutMs: 10_000,
    initTimeoutMs: 60_000,
    ...overrides,
  };
  const printed: string[] = [];
  const warned: string[] = [];
  const error = await runInit(command, {
    progress: { phase() {}, done() {} },
    logger: createWarningLogger((line) => warned.push(line)),
    print: (line) => printed.push(line),
  }).then(() => undefined, (e) => e);
  assert.ok(error === undefined || error instanceof CliError, String(error));
  return { command, printed, warned, error: error as CliError | undefined };
}

/** `cli recover --node` of `nodes`; resolves with its warnings and error. */
async function cliRecover(nodes: string[], files: Awaited<ReturnType<typeof operatorFiles>>) {
  const warned: string[] = [];
  const printed: string[] = [];
  const error = await runRecoverNode(
    {
      nodes,
      masterSecret: files.masterSecret,
      attestationConfig: files.attestationConfig,
      timeoutMs: 10_000,
    },
    { logger: createWarningLogger((line) => warned.push(line)), print: (line) => printed.push(line) },
  ).then(() => undefined, (e) => e);
  assert.ok(error === undefined || error instanceof CliError, String(error));
  return { printed, warned, error: error as CliError | undefined };
}

/** Whether the file at `path` exists. */
function exists(path: string): Promise<boolean> {
  return Deno.stat(path).then(() => true, () => false);
}

Deno.test("cli init and recover against a swtpm node: control-plane keys only, warn-only mismatches named", async (t) => {
  const tpm = await startSwtpm();
  const issuer = await TpmIssuer.create({ tcti: tpm.tcti, logger: silentLogger, eventLogPath: null });
  try {
    const otherKey = "cd".repeat(32);
    const config = (measurements: Record<string, unknown>, controlPlaneKeyDigests: string[]) =>
      JSON.stringify({
        variant: "qemu-vtpm",
        measurements,
        akTrust: { allowedKeyDigests: [issuer.keyDigest, otherKey], controlPlaneKeyDigests },
      });
    const enforced = { "15": { expected: "00".repeat(32), warnOnly: false } };
    // The join service refuses this key the control-plane role (JoinService.authorize's rule).
    const workerOnly = config(enforced, [otherKey]);
    assert.equal(
      trusts(parseAttestationConfigFile(workerOnly, "x").config.controlPlanes, issuer.keyDigest),
      false,
    );
    const noControlPlane = new RegExp(
      `the node's attestation was rejected \\(control-plane-not-allowed\\): its attestation key ${issuer.keyDigest} is trusted but not a control plane's \\(akTrust\\.controlPlaneKeyDigests\\); only a control plane receives the master secret\\. Nothing was sent\\. If the node is to be a control plane, name its attestation key in akTrust\\.controlPlaneKeyDigests of .*attestation-config\\.json$`,
    );

    await t.step("init: a trusted key that is no control plane's gets nothing", async () => {
      await using files = await operatorFiles(workerOnly);
      const world = fakeInitDependencies({ issuer });
      await using server = await serveNode(initRoutes(world));
      const { error, command } = await cliInit(server.node, files);
      assert.equal(error?.reason, "attestation");
      assert.match(error!.message, noControlPlane);
      assert.deepEqual(world.calls, []);
      assert.equal(await exists(command.kubeconfigOut), false);
    });

    await t.step("recover: a trusted key that is no control plane's gets no master secret", async () => {
      await using files = await operatorFiles(workerOnly);
      using recovery = await fakeRecoveryNode(issuer);
      await using server = await serveNode((router) => router.service(RecoverAPI, recovery.handlers));
      const { error } = await cliRecover([server.node], files);
      assert.equal(error?.reason, "attestation");
      assert.match(error!.message, new RegExp(`^node ${server.node}: `));
      assert.match(error!.message, noControlPlane);
      assert.deepEqual(recovery.received, []);
    });

    const warnOnly = config({
      "4": { expected: "aa".repeat(32), warnOnly: true },
      "9": { expected: "bb".repeat(32), warnOnly: true },
      ...enforced,
    }, [issuer.keyDigest]);
    const mismatchLines = (node: string) => [
      `warning: node ${node}: its attestation passed with a warn-only mismatch: PCR[4] expected ${
        "aa".repeat(32)
      }, got ${"00".repeat(32)} (warn-only)`,
      `warning: node ${node}: its attestation passed with a warn-only mismatch: PCR[9] expected ${
        "bb".repeat(32)
      }, got ${"00".repeat(32)} (warn-only)`,
    ];

    await t.step("init: each warn-only mismatch is named, as a rejection names it", async () => {
      await using files = await operatorFiles(warnOnly);
      const world = fakeInitDependencies({ issuer });
      await using server = await serveNode(initRoutes(world));
      const { error, warned, printed } = await cliInit(server.node, files);
      assert.equal(error, undefined);
      assert.ok(printed.includes("cluster initialized"));
      for (const line of mismatchLines(server.node)) assert.ok(warned.includes(line), warned.join("\n"));
    });

    await t.step("recover: each warn-only mismatch is named", async () => {
      await using files = await operatorFiles(warnOnly);
      using recovery = await fakeRecoveryNode(issuer);
      await using server = await serveNode((router) => router.service(RecoverAPI, recovery.handlers));
      const { error, warned } = await cliRecover([server.node], files);
      assert.equal(error, undefined);
      assert.equal(recovery.received.length, 1);
      for (const line of mismatchLines(server.node)) assert.ok(warned.includes(line), warned.join("\n"));
    });
  } finally {
    await issuer.close();
    await tpm.stop();
  }
});

Deno.test("cli init keeps the kubeconfig when the Init stream fails after init_success", async () => {
  await using files = await operatorFiles(DUMMY_ATTESTATION_CONFIG);
  const world = fakeInitDependencies();
  const upstream = createClient(API, world.transport);
  await using server = await serveNode(initRoutes(world, {
    async *init(request) {
      yield* upstream.init(request); // the node's genuine, sealed init_success
      throw new ConnectError("stream reset", Code.Unavailable); // then no trailers
    },
  }));
  const { error, command, printed, warned } = await cliInit(server.node, files);
  assert.equal(error, undefined);
  assert.equal(await Deno.readTextFile(command.kubeconfigOut), FAKE_KUBECONFIG);
  assert.ok(printed.includes("cluster initialized"), printed.join("\n"));
  assert.ok(
    warned.includes(
      "warning: the node's Init stream failed after init_success; the kubeconfig had arrived: stream reset",
    ),
    warned.join("\n"),
  );
});

Deno.test("cli init keeps the kubeconfig when the node holds the stream open after init_success until --init-timeout", async () => {
  await using files = await operatorFiles(DUMMY_ATTESTATION_CONFIG);
  const world = fakeInitDependencies();
  const upstream = createClient(API, world.transport);
  await using server = await serveNode(initRoutes(world, {
    async *init(request, context) {
      yield* upstream.init(request); // the node's genuine, sealed init_success
      // Then nothing, until the client gives up.
      await new Promise((resolve) => context.signal.addEventListener("abort", resolve, { once: true }));
    },
  }));
  const { error, command, printed } = await cliInit(server.node, files, { initTimeoutMs: 1_000 });
  assert.equal(error, undefined, error?.message);
  assert.equal(await Deno.readTextFile(command.kubeconfigOut), FAKE_KUBECONFIG);
  assert.ok(printed.includes("cluster initialized"), printed.join("\n"));
});

Deno.test("the node's own text reaches the CLI's error line with its control characters escaped", async (t) => {
  // The reviewer's forgery: erase the line, move up, print a recovery that never happened.
  const forged =
    "\x1b[2K\r\x1b[1A\x1b[2K\rrecovered node 10.0.0.5:9999: its state disk 0123abcd-0000-4000-8000-00000000cafe opens with the cluster's key\ncluster ID: 2e2fba922b510757\x9b8m";
  const escaped = forged.replace(
    // deno-lint-ignore no-control-regex
    /[\u0000-\u001f\u007f-\u009f]/g,
    (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
  const refusing = (code: Code) => (router: ConnectRouter) =>
    router.service(RecoverAPI, {
      getAttestation: () => {
        throw new ConnectError(forged, code);
      },
      recover: () => {
        throw new ConnectError("not reached", Code.Internal);
      },
    });
  const rows: {
    name: string;
    run: (files: Awaited<ReturnType<typeof operatorFiles>>) => Promise<CliError>;
  }[] = [
    {
      name: "cli recover: a refusal",
      run: async (files) => {
        await using server = await serveNode(refusing(Code.FailedPrecondition));
        return (await cliRecover([server.node], files)).error!;
      },
    },
    {
      name: "cli recover: an unavailable node's status",
      run: async (files) => {
        await using server = await serveNode(refusing(Code.Unavailable));
        return (await cliRecover([server.node], files)).error!;
      },
    },
    {
      name: "cli init: init_failure's text",
      run: async (files) => {
        const world = fakeInitDependencies();
        await using server = await serveNode(initRoutes(world, {
          async *init() {
            yield create(InitResponseSchema, { kind: { case: "initFailure", value: { error: forged } } });
          },
        }));
        return (await cliInit(server.node, files)).error!;
      },
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      await using files = await operatorFiles(DUMMY_ATTESTATION_CONFIG);
      const error = await row.run(files);
      assert.ok(error instanceof CliError, String(error));
      // deno-lint-ignore no-control-regex
      assert.doesNotMatch(`cli: ${error.message}`, /[\u0000-\u001f\u007f-\u009f]/);
      assert.ok(error.message.includes(escaped), error.message);
    });
  }
});

Deno.test("cli init keeps a bounded tail of a node's logs and reads no message over NODE_READ_MAX_BYTES", async (t) => {
  await t.step(
    "a node streaming 17 MiB of logs without a result: the last 16 MiB go to --logs-out",
    async () => {
      await using files = await operatorFiles(DUMMY_ATTESTATION_CONFIG);
      const world = fakeInitDependencies();
      const chunk = 64 * 1024;
      const chunks = 17 * 16;
      await using server = await serveNode(initRoutes(world, {
        async *init() {
          for (let i = 0; i < chunks; i++) {
            yield create(InitResponseSchema, {
              kind: { case: "log", value: { log: new Uint8Array(chunk).fill(i % 251) } },
            });
          }
        },
      }));
      const { error, command } = await cliInit(server.node, files);
      assert.equal(error?.reason, "protocol");
      assert.match(
        error!.message,
        /^the node ended the Init stream without a result; the node's logs are in /,
      );
      const logs = await Deno.readFile(command.logsOut);
      assert.equal(logs.length, MAX_KEPT_LOG_BYTES);
      assert.equal(logs[0], (chunks - MAX_KEPT_LOG_BYTES / chunk) % 251);
      assert.equal(logs.at(-1), (chunks - 1) % 251);
    },
  );

  await t.step("GetAttestation over the limit: a protocol error, for init and verify", async () => {
    await using files = await operatorFiles(DUMMY_ATTESTATION_CONFIG);
    const world = fakeInitDependencies();
    await using server = await serveNode(initRoutes(world, {
      getAttestation: () =>
        create(GetAttestationResponseSchema, {
          publicKey: new Uint8Array(32).fill(1),
          // The message is its document and a few bytes of framing: just over the limit.
          evidence: { variant: "dummy", document: new Uint8Array(NODE_READ_MAX_BYTES).fill(0x41) },
        }),
    }));
    const { error } = await cliInit(server.node, files);
    assert.equal(error?.reason, "protocol");
    assert.equal(
      error!.message,
      `GetAttestation: the node sent a message larger than the ${NODE_READ_MAX_BYTES} bytes a client reads`,
    );
    const verified = await verifyNode(
      server.node,
      parseAttestationConfigFile(DUMMY_ATTESTATION_CONFIG, "x"),
      {
        logger: silentLogger,
      },
    ).then(() => assert.fail("verified"), (e) => e);
    assert.ok(verified instanceof CliError);
    assert.equal(verified.reason, "protocol");
    assert.equal(
      verified.message,
      `node ${server.node} sent a message larger than the ${NODE_READ_MAX_BYTES} bytes the CLI reads`,
    );
  });

  await t.step("an Init message just under the limit is read, one just over it is not", async () => {
    await using files = await operatorFiles(DUMMY_ATTESTATION_CONFIG);
    const world = fakeInitDependencies();
    await using server = await serveNode(initRoutes(world, {
      async *init() {
        const log = (size: number) =>
          create(InitResponseSchema, {
            kind: { case: "log", value: { log: new Uint8Array(size).fill(0x61) } },
          });
        yield log(NODE_READ_MAX_BYTES - 16);
        yield log(NODE_READ_MAX_BYTES);
      },
    }));
    const { error, command } = await cliInit(server.node, files);
    assert.equal(error?.reason, "protocol");
    assert.match(
      error!.message,
      new RegExp(
        `^Init: the node sent a message larger than the ${NODE_READ_MAX_BYTES} bytes a client reads; the node's logs are in `,
      ),
    );
    assert.equal((await Deno.stat(command.logsOut)).size, NODE_READ_MAX_BYTES - 16);
  });
});

Deno.test("cli init refuses an init_success the protocol does not allow, and writes no kubeconfig", async (t) => {
  const rows: {
    name: string;
    world: () => InitWorld;
    overrides?: (world: InitWorld) => Partial<ServiceImpl<typeof API>>;
    message: RegExp;
  }[] = [
    {
      name: "a sealed success holding an empty kubeconfig",
      world: () =>
        fakeInitDependencies({
          cluster: {
            describeNode: () => Promise.resolve({ nodeName: "control-plane-0", nodeIp: "10.0.0.2" }),
            checkComponents: () => {},
            initialize: () => Promise.resolve({ kubeconfig: new Uint8Array(0) }),
          },
        }),
      message: /^the node sent an empty kubeconfig$/,
    },
    {
      name: "the node's genuine, sealed success after its init_failure",
      world: () => fakeInitDependencies(),
      overrides: (world) => ({
        async *init(request) {
          yield create(InitResponseSchema, {
            kind: { case: "initFailure", value: { error: "kubeadm failed" } },
          });
          yield* createClient(API, world.transport).init(request);
        },
      }),
      message: /^the node sent init_success after init_failure$/,
    },
    {
      name: "a success that is not sealed",
      world: () => fakeInitDependencies(),
      overrides: () => ({
        async *init() {
          yield create(InitResponseSchema, { kind: { case: "initSuccess", value: {} } });
        },
      }),
      message: /^the node's init_success is not sealed$/,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      await using files = await operatorFiles(DUMMY_ATTESTATION_CONFIG);
      const world = row.world();
      await using server = await serveNode(initRoutes(world, row.overrides?.(world)));
      const { error, command, printed } = await cliInit(server.node, files);
      assert.equal(error?.reason, "protocol", error?.message);
      assert.match(error!.message, row.message);
      assert.equal(await exists(command.kubeconfigOut), false);
      assert.ok(!printed.includes("cluster initialized"), printed.join("\n"));
    });
  }
});

Deno.test("cli recover --node of several nodes: canceled (Ctrl-C) during the first, it asks no other", async () => {
  await using files = await operatorFiles(DUMMY_ATTESTATION_CONFIG);
  const asked: string[] = [];
  const hanging = (name: string) => (router: ConnectRouter) =>
    router.service(RecoverAPI, {
      getAttestation: (_request, context) => {
        asked.push(name);
        return new Promise((_resolve, reject) =>
          context.signal.addEventListener("abort", () => reject(context.signal.reason))
        );
      },
      recover: () => Promise.reject(new ConnectError("not reached", Code.Internal)),
    });
  await using first = await serveNode(hanging("first"));
  await using second = await serveNode(hanging("second"));
  const ctrlC = new AbortController();
  const recovering = runRecoverNode(
    {
      nodes: [first.node, second.node],
      masterSecret: files.masterSecret,
      attestationConfig: files.attestationConfig,
      timeoutMs: 10_000,
    },
    { logger: createWarningLogger(() => {}), print: () => {}, signal: ctrlC.signal },
  ).then(() => undefined, (e) => e);
  while (asked.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
  ctrlC.abort();
  const error = await recovering;
  assert.ok(error instanceof CliError, String(error));
  assert.equal(error.reason, "canceled");
  assert.equal(error.message, `the call to node ${first.node} was canceled`);
  assert.deepEqual(asked, ["first"], "the second node is not asked after the cancel");
});
