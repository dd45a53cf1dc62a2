import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  createRouterTransport,
  type ServiceImpl,
  type Transport,
} from "@connectrpc/connect";
import {
  type AkTrust,
  AttestationError,
  MAX_EVIDENCE_DOCUMENT_BYTES,
  type Measurements,
  type Validator,
} from "../../src/attestation/attestation.ts";
import { TpmIssuer } from "../../src/attestation/tpm/issuer.ts";
import { TpmValidator } from "../../src/attestation/tpm/validator.ts";
import { CONTROL_PLANE_ANY_KEY_WARNING } from "../../src/attestation/watcher.ts";
import { createWarningLogger } from "../../src/cli/warning_logger.ts";
import { API, type InitResponse, InitResponseSchema } from "../../src/gen/init/init_pb.ts";
import { initCluster, LOG_BLOCK_BYTES, LogBuffer, MAX_KEPT_LOG_BYTES } from "../../src/init/client.ts";
import type { NodeExchangeError } from "../../src/init/node_exchange.ts";
import { silentLogger } from "../../src/log/logger.ts";
import {
  CLUSTER_ID,
  FAKE_KUBECONFIG,
  fakeInitDependencies,
  initParameters,
  type InitWorld,
} from "../support/init_fakes.ts";
import { serveOverTls } from "../support/tls_rpc.ts";
import { startSwtpm } from "../../src/localcluster/swtpm.ts";

const decoder = new TextDecoder();
/** Control planes under `controlPlaneAnyKey`: for the tests about other checks. */
const ANY_KEY: AkTrust = { kind: "any" };

async function failure(call: Promise<unknown>): Promise<NodeExchangeError> {
  return await call.then(() => assert.fail("init succeeded"), (error: NodeExchangeError) => error);
}

/** Serves `world`'s handler over TLS on loopback. */
function overTls(world: InitWorld) {
  return serveOverTls((router) => router.service(API, world.server.handlers()));
}

/** A transport to `world` through a relay that forwards every call except `overrides`. */
function relay(world: InitWorld, overrides: Partial<ServiceImpl<typeof API>>): Transport {
  const upstream = createClient(API, world.transport);
  return createRouterTransport((router) =>
    router.service(API, {
      getAttestation: (request) => upstream.getAttestation(request),
      init: (request) => upstream.init(request),
      ...overrides,
    })
  );
}

Deno.test("init over TLS (serveRpc, gRPC): success, then a refusal with logs", async () => {
  const world = fakeInitDependencies();
  await using tls = await overTls(world);
  const result = await initCluster(initParameters(), {
    transport: tls.transport,
    validator: world.validator,
    controlPlanes: world.controlPlanes,
  });
  assert.equal(decoder.decode(result.kubeconfig), FAKE_KUBECONFIG);
  assert.equal(result.clusterId.toHex(), CLUSTER_ID);

  const failed = fakeInitDependencies({ clusterFails: "kubeadm init: exit status 1" });
  await using tls2 = await overTls(failed);
  const error = await failure(
    initCluster(initParameters(), {
      transport: tls2.transport,
      validator: failed.validator,
      controlPlanes: failed.controlPlanes,
    }),
  );
  assert.equal(error.reason, "refused");
  assert.match(error.serverMessage!, /initializing cluster: kubeadm init: exit status 1/);
  assert.ok(error.logs.length > 0);
});

Deno.test("the client names every measurement mismatch when the evidence is rejected", async () => {
  const world = fakeInitDependencies();
  const validator: Validator = {
    variant: "dummy",
    validate: () =>
      Promise.reject(
        new AttestationError("measurement-mismatch", "PCRs differ", [
          { index: 4, expected: "aa".repeat(32), actual: "00".repeat(32), enforced: true },
          { index: 9, expected: "bb".repeat(32), actual: null, enforced: false },
        ]),
      ),
  };
  const error = await failure(
    initCluster(initParameters(), { transport: world.transport, validator, controlPlanes: ANY_KEY }),
  );
  assert.equal(error.reason, "attestation-rejected");
  assert.equal(error.attestationReason, "measurement-mismatch");
  assert.equal(error.mismatches.length, 2);
  assert.match(error.message, /PCR\[4\] expected a{64}, got 0{64} \(enforced\)/);
  assert.match(error.message, /PCR\[9\] expected b{64}, got nothing \(warn-only\)/);
  assert.deepEqual(world.calls, []);
});

Deno.test("the client rejects evidence of another variant and evidence for another key", async () => {
  const world = fakeInitDependencies();
  const variant = await failure(
    initCluster(initParameters(), {
      transport: world.transport,
      validator: { variant: "qemu-vtpm", validate: () => assert.fail("not reached") },
      controlPlanes: ANY_KEY,
    }),
  );
  assert.equal(variant.attestationReason, "variant-mismatch");

  // A relay replaces the node's public key with its own: the report data no longer matches.
  const swapping = relay(world, {
    getAttestation: async (request) => {
      const answer = await createClient(API, world.transport).getAttestation(request);
      return { ...answer, publicKey: new Uint8Array(32).fill(9) };
    },
  });
  const swapped = await failure(
    initCluster(initParameters(), {
      transport: swapping,
      validator: world.validator,
      controlPlanes: world.controlPlanes,
    }),
  );
  assert.equal(swapped.attestationReason, "report-data-mismatch");
});

Deno.test("a tampered success does not open: open-failed", async () => {
  const world = fakeInitDependencies();
  const tamper = relay(world, {
    async *init(request) {
      for await (const message of createClient(API, world.transport).init(request)) {
        if (message.kind.case === "initSuccess" && message.kind.value.sealed) {
          const sealed = message.kind.value.sealed;
          const ciphertext = new Uint8Array(sealed.ciphertext);
          ciphertext[0] ^= 1;
          yield create(InitResponseSchema, {
            kind: { case: "initSuccess", value: { sealed: { ...sealed, ciphertext } } },
          });
        } else yield message;
      }
    },
  });
  const error = await failure(
    initCluster(initParameters(), {
      transport: tamper,
      validator: world.validator,
      controlPlanes: world.controlPlanes,
    }),
  );
  assert.equal(error.reason, "open-failed");
});

Deno.test("a stream without a result is a protocol error; an aborted signal is canceled", async () => {
  const world = fakeInitDependencies();
  const silent = relay(world, { async *init() {} });
  assert.equal(
    (await failure(
      initCluster(initParameters(), {
        transport: silent,
        validator: world.validator,
        controlPlanes: world.controlPlanes,
      }),
    )).reason,
    "protocol",
  );
  const aborted = await failure(
    initCluster(initParameters(), {
      transport: world.transport,
      validator: world.validator,
      controlPlanes: world.controlPlanes,
      signal: AbortSignal.abort(),
    }),
  );
  assert.equal(aborted.reason, "canceled");
});

Deno.test("init with qemu-vtpm evidence from swtpm", async (t) => {
  const tpm = await startSwtpm();
  try {
    const issuer = await TpmIssuer.create({ tcti: tpm.tcti, logger: silentLogger, eventLogPath: null });
    try {
      const akTrust = { kind: "allow-list" as const, keyDigests: new Set([issuer.keyDigest]) };
      const config = JSON.stringify({
        variant: "qemu-vtpm",
        measurements: { "15": { expected: "00".repeat(32), warnOnly: false } },
        akTrust: { allowedKeyDigests: [issuer.keyDigest], controlPlaneKeyDigests: [issuer.keyDigest] },
      });
      const zero = new Uint8Array(32);

      await t.step("matching measurements: the kubeconfig opens", async () => {
        const world = fakeInitDependencies({ issuer });
        const measurements: Measurements = new Map([[15, { expected: zero, warnOnly: false }]]);
        const validator = new TpmValidator({ measurements, akTrust, logger: silentLogger });
        const result = await initCluster(initParameters({ attestationConfig: config }), {
          transport: world.transport,
          validator,
          controlPlanes: akTrust,
        });
        assert.equal(decoder.decode(result.kubeconfig), FAKE_KUBECONFIG);
      });

      await t.step("mismatching measurements: every mismatch named, nothing sent", async () => {
        const world = fakeInitDependencies({ issuer });
        const measurements: Measurements = new Map([
          [4, { expected: new Uint8Array(32).fill(0xaa), warnOnly: false }],
          [9, { expected: new Uint8Array(32).fill(0xbb), warnOnly: false }],
        ]);
        const validator = new TpmValidator({ measurements, akTrust, logger: silentLogger });
        const error = await failure(
          initCluster(initParameters({ attestationConfig: config }), {
            transport: world.transport,
            validator,
            controlPlanes: akTrust,
          }),
        );
        assert.equal(error.reason, "attestation-rejected");
        assert.match(error.message, /PCR\[4\] expected a{64}, got 0{64} \(enforced\)/);
        assert.match(error.message, /PCR\[9\] expected b{64}, got 0{64} \(enforced\)/);
        assert.deepEqual(world.calls, []);
      });

      await t.step("warn-only mismatches: the init goes through and returns each of them", async () => {
        const world = fakeInitDependencies({ issuer });
        const measurements: Measurements = new Map([
          [4, { expected: new Uint8Array(32).fill(0xaa), warnOnly: true }],
          [9, { expected: new Uint8Array(32).fill(0xbb), warnOnly: true }],
          [15, { expected: zero, warnOnly: false }],
        ]);
        const validator = new TpmValidator({ measurements, akTrust, logger: silentLogger });
        const result = await initCluster(initParameters({ attestationConfig: config }), {
          transport: world.transport,
          validator,
          controlPlanes: akTrust,
        });
        assert.deepEqual(result.warnings, [
          { index: 4, expected: "aa".repeat(32), actual: "00".repeat(32), enforced: false },
          { index: 9, expected: "bb".repeat(32), actual: "00".repeat(32), enforced: false },
        ]);
      });
    } finally {
      await issuer.close();
    }
  } finally {
    await tpm.stop();
  }
});

Deno.test("once init_success opened, the kubeconfig is the result: what fails or follows is a warning", async (t) => {
  const rows: { name: string; after: () => AsyncGenerator<InitResponse>; warning: RegExp }[] = [
    {
      name: "the stream is reset before its trailers",
      // deno-lint-ignore require-yield
      after: async function* () {
        throw new ConnectError("stream reset\x1b[2K", Code.Unavailable);
      },
      warning:
        /^the node's Init stream failed after init_success; the kubeconfig had arrived: stream reset\\u001b\[2K$/,
    },
    {
      name: "the node's stream ends in an error status",
      // deno-lint-ignore require-yield
      after: async function* () {
        throw new ConnectError("premature close", Code.Internal);
      },
      warning:
        /^the node's Init stream failed after init_success; the kubeconfig had arrived: premature close$/,
    },
    {
      name: "a message after the success",
      after: async function* () {
        yield create(InitResponseSchema, { kind: { case: "initFailure", value: { error: "too late" } } });
      },
      warning: /^the node sent more after init_success; ignored, the kubeconfig had arrived$/,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const world = fakeInitDependencies();
      const upstream = createClient(API, world.transport);
      const transport = relay(world, {
        async *init(request) {
          yield* upstream.init(request);
          yield* row.after();
        },
      });
      const warned: string[] = [];
      const result = await initCluster(initParameters(), {
        transport,
        validator: world.validator,
        controlPlanes: world.controlPlanes,
        logger: createWarningLogger((line) => warned.push(line.replace(/^warning: /, ""))),
      });
      assert.equal(decoder.decode(result.kubeconfig), FAKE_KUBECONFIG);
      assert.equal(result.clusterId.toHex(), CLUSTER_ID);
      // Besides the dummy config's INSECURE controlPlaneAnyKey warning, one line.
      const trailing = warned.filter((line) => line !== CONTROL_PLANE_ANY_KEY_WARNING);
      assert.equal(trailing.length, 1, warned.join("\n"));
      assert.match(trailing[0], row.warning);
    });
  }
});

Deno.test("the node's own text reaches an error with its control characters escaped", async (t) => {
  // Erases the line, moves up, forges a verdict; C1's one-byte CSI and DEL too.
  const forged = "\x1b[2K\r\x1b[1Acluster initialized\ncluster ID: 2e2f\x9b8m\x7f";
  const escaped = "\\u001b[2K\\u000d\\u001b[1Acluster initialized\\u000acluster ID: 2e2f\\u009b8m\\u007f";
  const rows: {
    name: string;
    overrides: (world: InitWorld) => Partial<ServiceImpl<typeof API>>;
    reason: NodeExchangeError["reason"];
  }[] = [
    {
      name: "init_failure's text",
      overrides: () => ({
        async *init() {
          yield create(InitResponseSchema, { kind: { case: "initFailure", value: { error: forged } } });
        },
      }),
      reason: "refused",
    },
    {
      name: "a refusal's status message",
      overrides: () => ({
        getAttestation: () => {
          throw new ConnectError(forged, Code.FailedPrecondition);
        },
      }),
      reason: "refused",
    },
    {
      name: "an unavailable node's status message",
      overrides: () => ({
        getAttestation: () => {
          throw new ConnectError(forged, Code.Unavailable);
        },
      }),
      reason: "unavailable",
    },
    {
      name: "the variant its evidence names",
      overrides: (world) => ({
        getAttestation: async (request) => {
          const answer = await createClient(API, world.transport).getAttestation(request);
          return { ...answer, evidence: { ...answer.evidence!, variant: forged } };
        },
      }),
      reason: "attestation-rejected",
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const world = fakeInitDependencies();
      const error = await failure(
        initCluster(initParameters(), {
          transport: relay(world, row.overrides(world)),
          validator: world.validator,
          controlPlanes: world.controlPlanes,
        }),
      );
      assert.equal(error.reason, row.reason);
      for (const text of [error.message, error.serverMessage ?? ""]) {
        // deno-lint-ignore no-control-regex
        assert.doesNotMatch(text, /[\u0000-\u001f\u007f-\u009f]/);
      }
      assert.ok(
        error.message.includes(row.reason === "attestation-rejected" ? "\\u001b[2K" : escaped),
        error.message,
      );
      assert.deepEqual(world.calls, []);
    });
  }
});

Deno.test("evidence over the 64 KiB any variant's may have is refused before it is validated", async (t) => {
  for (const size of [MAX_EVIDENCE_DOCUMENT_BYTES + 1, MAX_EVIDENCE_DOCUMENT_BYTES]) {
    await t.step(`${size} bytes`, async () => {
      const world = fakeInitDependencies();
      const validated: number[] = [];
      const transport = relay(world, {
        getAttestation: async (request) => {
          const answer = await createClient(API, world.transport).getAttestation(request);
          return {
            publicKey: answer.publicKey,
            evidence: { variant: "dummy", document: new Uint8Array(size) },
          };
        },
      });
      const error = await failure(initCluster(initParameters(), {
        transport,
        validator: {
          variant: "dummy",
          validate: (document) => {
            validated.push(document.length);
            return Promise.reject(new AttestationError("malformed", "not dummy evidence"));
          },
        },
        controlPlanes: ANY_KEY,
      }));
      if (size > MAX_EVIDENCE_DOCUMENT_BYTES) {
        assert.equal(error.reason, "protocol");
        assert.equal(
          error.message,
          "the node's evidence document is 65537 bytes, more than the 65536 any variant's may have",
        );
        assert.deepEqual(validated, []);
      } else {
        assert.equal(error.reason, "attestation-rejected");
        assert.deepEqual(validated, [size]);
      }
    });
  }
});

Deno.test("LogBuffer keeps the first or the last MAX_KEPT_LOG_BYTES of a node's logs, whatever it sends", async (t) => {
  await t.step("17 MiB in the node's 64 KiB chunks: the tail or the head, 16 MiB", () => {
    // Chunk i filled with i % 251.
    const list = Array.from({ length: 17 * 16 }, (_, i) => new Uint8Array(LOG_BLOCK_BYTES).fill(i % 251));
    const tail = new LogBuffer("tail");
    const head = new LogBuffer("head");
    for (const chunk of list) {
      tail.add(chunk);
      head.add(chunk);
    }
    const keptTail = tail.kept();
    const keptHead = head.kept();
    assert.equal(keptTail.length, MAX_KEPT_LOG_BYTES);
    assert.equal(keptHead.length, MAX_KEPT_LOG_BYTES);
    // Chunk by chunk: the tail is chunks 16..271, the head chunks 0..255.
    for (let i = 0; i < 256; i++) {
      assert.equal(keptTail[i * LOG_BLOCK_BYTES], (i + 16) % 251);
      assert.equal(keptTail[(i + 1) * LOG_BLOCK_BYTES - 1], (i + 16) % 251);
      assert.equal(keptHead[i * LOG_BLOCK_BYTES], i % 251);
    }
  });

  await t.step("chunks of odd sizes, one larger than the bound: exactly the bytes at either end", () => {
    const sizes = [1, 7, 1000, 3, 2500, 1, 999, 4096, 5];
    let offset = 0;
    const list = sizes.map((size) => {
      const chunk = new Uint8Array(size).map((_, i) => (offset + i) % 253);
      offset += size;
      return chunk;
    });
    const all = new Uint8Array(list.flatMap((chunk) => [...chunk]));
    for (const limit of [1, 100, 2048, 4097, all.length, all.length + 10]) {
      const tail = new LogBuffer("tail", limit);
      const head = new LogBuffer("head", limit);
      for (const chunk of list) {
        tail.add(chunk);
        head.add(chunk);
      }
      assert.deepEqual(tail.kept(), all.slice(Math.max(0, all.length - limit)), `tail, limit ${limit}`);
      assert.deepEqual(head.kept(), all.slice(0, limit), `head, limit ${limit}`);
    }
  });

  await t.step("a million one-byte chunks: the bound, not one array per chunk", () => {
    const tail = new LogBuffer("tail", 1000);
    const byte = new Uint8Array(1);
    for (let i = 0; i < 1_000_000; i++) {
      byte[0] = i % 256;
      tail.add(byte);
    }
    const kept = tail.kept();
    assert.equal(kept.length, 1000);
    assert.equal(kept[999], 999_999 % 256);
    assert.equal(kept[0], 999_000 % 256);
  });
});

Deno.test("an init_success the protocol does not allow is a protocol error, not a result", async (t) => {
  const emptyKubeconfig = (): Partial<InitWorld["deps"]> => ({
    cluster: {
      describeNode: () => Promise.resolve({ nodeName: "control-plane-0", nodeIp: "10.0.0.2" }),
      checkComponents: () => {},
      // The node's kubeadm wrote nothing, and the node seals that as its success.
      initialize: () => Promise.resolve({ kubeconfig: new Uint8Array(0) }),
    },
  });
  const rows: {
    name: string;
    deps?: () => Partial<InitWorld["deps"]>;
    overrides?: (world: InitWorld) => Partial<ServiceImpl<typeof API>>;
    message: string;
  }[] = [
    {
      name: "a sealed success holding an empty kubeconfig",
      deps: emptyKubeconfig,
      message: "the node sent an empty kubeconfig",
    },
    {
      name: "the node's genuine, sealed success after its init_failure",
      overrides: (world) => ({
        async *init(request) {
          yield create(InitResponseSchema, {
            kind: { case: "initFailure", value: { error: "kubeadm failed" } },
          });
          yield* createClient(API, world.transport).init(request);
        },
      }),
      message: "the node sent init_success after init_failure",
    },
    {
      name: "a success that is not sealed",
      overrides: () => ({
        async *init() {
          yield create(InitResponseSchema, { kind: { case: "initSuccess", value: {} } });
        },
      }),
      message: "the node's init_success is not sealed",
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const world = fakeInitDependencies(row.deps?.() ?? {});
      const error = await failure(
        initCluster(initParameters(), {
          transport: row.overrides ? relay(world, row.overrides(world)) : world.transport,
          validator: world.validator,
          controlPlanes: world.controlPlanes,
        }),
      );
      assert.equal(error.reason, "protocol", error.message);
      assert.equal(error.message, row.message);
    });
  }
});
