import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { createClient, createRouterTransport, type ServiceImpl, type Transport } from "@connectrpc/connect";
import { AttestationError, type Measurements, type Validator } from "../../src/attestation/attestation.ts";
import { TpmIssuer } from "../../src/attestation/tpm/issuer.ts";
import { TpmValidator } from "../../src/attestation/tpm/validator.ts";
import { API, InitResponseSchema } from "../../src/gen/init/init_pb.ts";
import { initCluster } from "../../src/init/client.ts";
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
  });
  assert.equal(decoder.decode(result.kubeconfig), FAKE_KUBECONFIG);
  assert.equal(result.clusterId.toHex(), CLUSTER_ID);

  const failed = fakeInitDependencies({ clusterFails: "kubeadm init: exit status 1" });
  await using tls2 = await overTls(failed);
  const error = await failure(
    initCluster(initParameters(), { transport: tls2.transport, validator: failed.validator }),
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
  const error = await failure(initCluster(initParameters(), { transport: world.transport, validator }));
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
    initCluster(initParameters(), { transport: swapping, validator: world.validator }),
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
    initCluster(initParameters(), { transport: tamper, validator: world.validator }),
  );
  assert.equal(error.reason, "open-failed");
});

Deno.test("a stream without a result is a protocol error; an aborted signal is canceled", async () => {
  const world = fakeInitDependencies();
  const silent = relay(world, { async *init() {} });
  assert.equal(
    (await failure(initCluster(initParameters(), { transport: silent, validator: world.validator }))).reason,
    "protocol",
  );
  const aborted = await failure(
    initCluster(initParameters(), {
      transport: world.transport,
      validator: world.validator,
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
        akTrust: { allowedKeyDigests: [issuer.keyDigest] },
      });
      const zero = new Uint8Array(32);

      await t.step("matching measurements: the kubeconfig opens", async () => {
        const world = fakeInitDependencies({ issuer });
        const measurements: Measurements = new Map([[15, { expected: zero, warnOnly: false }]]);
        const validator = new TpmValidator({ measurements, akTrust, logger: silentLogger });
        const result = await initCluster(initParameters({ attestationConfig: config }), {
          transport: world.transport,
          validator,
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
          }),
        );
        assert.equal(error.reason, "attestation-rejected");
        assert.match(error.message, /PCR\[4\] expected a{64}, got 0{64} \(enforced\)/);
        assert.match(error.message, /PCR\[9\] expected b{64}, got 0{64} \(enforced\)/);
        assert.deepEqual(world.calls, []);
      });
    } finally {
      await issuer.close();
    }
  } finally {
    await tpm.stop();
  }
});
