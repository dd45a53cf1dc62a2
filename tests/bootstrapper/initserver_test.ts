import assert from "node:assert/strict";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { generateKeyPair } from "../../src/atls/hpke.ts";
import { API, type InitResponse } from "../../src/gen/init/init_pb.ts";
import { initCluster, type InitParameters } from "../../src/init/client.ts";
import type { NodeExchangeError } from "../../src/init/node_exchange.ts";
import { initReportData, sealInitRequest } from "../../src/init/protocol.ts";
import {
  InitNodeError,
  SHOW_ATTESTATION_CONCURRENCY,
  SHOW_ATTESTATION_QUEUE,
} from "../../src/bootstrapper/initserver.ts";
import { DEFAULT_ATTESTATION_KEY_LIFETIME_MS } from "../../src/bootstrapper/attested_keys.ts";
import { parseOperatorAttestationConfig } from "../../src/attestation/config.ts";
import { DummyIssuer } from "../../src/attestation/dummy.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { evidenceFromAnswer, verifyNodeEvidence } from "../../src/verification/report.ts";
import {
  CLUSTER_ID,
  DISK_KEY,
  FAKE_KUBECONFIG,
  FAKE_NODE_LOGS,
  fakeInitDependencies,
  type InitFakeOverrides,
  initParameters,
  type InitWorld,
  MEASUREMENT_SALT,
  SECRETS,
} from "../support/init_fakes.ts";

const decoder = new TextDecoder();

/** Every message and log line the tests saw, scanned for secrets at the end. */
const seen: string[] = [];

async function run(
  world: InitWorld,
  parameters: InitParameters = initParameters(),
  onLog?: (c: Uint8Array) => void,
) {
  return await initCluster(parameters, {
    transport: world.transport,
    validator: world.validator,
    controlPlanes: world.controlPlanes,
    onLog,
  });
}

async function refused(world: InitWorld, parameters?: InitParameters, onLog?: (c: Uint8Array) => void) {
  const error = await run(world, parameters, onLog).then(
    () => assert.fail("init succeeded"),
    (e: NodeExchangeError) => e,
  );
  assert.equal(error.name, "NodeExchangeError");
  seen.push(error.message, error.serverMessage ?? "", decoder.decode(error.logs));
  return error;
}

function world(overrides: InitFakeOverrides = {}): InitWorld {
  const w = fakeInitDependencies(overrides);
  worlds.push(w);
  return w;
}
const worlds: InitWorld[] = [];

const successCalls = [
  `lock ${CLUSTER_ID}`,
  "onLocked",
  "disk uuid",
  `passphrase ${DISK_KEY} salt ${MEASUREMENT_SALT.toHex()}`,
  "initialize test-cluster",
  `node state ControlPlane ${MEASUREMENT_SALT.toHex()}`,
];

Deno.test("init server", async (t) => {
  await t.step("success: the kubeconfig arrives sealed and opens; effects in reference order", async () => {
    const w = world();
    const result = await run(w);
    assert.equal(decoder.decode(result.kubeconfig), FAKE_KUBECONFIG);
    assert.equal(result.clusterId.toHex(), CLUSTER_ID);
    assert.equal(result.ownerId.length, 0);
    assert.deepEqual(w.calls, successCalls);
    const params = w.initialized[0];
    assert.equal(
      params.masterSecret.key.toHex(),
      "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
    );
    assert.equal(params.measurementSalt.toHex(), MEASUREMENT_SALT.toHex());
    assert.equal(params.components.length, 1);
    assert.deepEqual(await w.server.outcome, { ok: true, clusterId: result.clusterId });
    assert.equal(w.server.phase, "initialized");
    const again = await refused(w);
    assert.equal(again.code, Code.FailedPrecondition);
    assert.match(again.message, /already initialized/);
  });

  await t.step("an empty cluster name becomes constellation", async () => {
    const w = world();
    await run(w, initParameters({ clusterName: "" }));
    assert.equal(w.initialized[0].clusterName, "constellation");
  });

  await t.step("wrong init secret: refused, no lock, no logs, and the server keeps serving", async () => {
    const w = world();
    const error = await refused(w, initParameters({ initSecret: new TextEncoder().encode("wrong") }));
    assert.equal(error.reason, "refused");
    assert.equal(error.code, Code.PermissionDenied);
    assert.equal(error.serverMessage, "invalid init secret");
    assert.equal(error.logs.length, 0);
    assert.deepEqual(w.calls, []);
    assert.equal(w.server.phase, "idle");
    await run(w);
    assert.deepEqual(w.calls, successCalls);
  });

  await t.step(
    "a second Init while one runs: FailedPrecondition with logs; the first completes",
    async () => {
      const gate = Promise.withResolvers<void>();
      const w = world({ clusterGate: gate.promise });
      const first = run(w);
      while (!w.calls.includes("initialize test-cluster")) await new Promise((r) => setTimeout(r, 1));
      const second = await refused(w);
      assert.equal(second.code, Code.FailedPrecondition);
      assert.match(second.serverMessage!, /already running/);
      assert.equal(decoder.decode(second.logs), FAKE_NODE_LOGS);
      gate.resolve();
      assert.equal(decoder.decode((await first).kubeconfig), FAKE_KUBECONFIG);
      assert.equal(w.calls.filter((c) => c.startsWith("lock")).length, 1);
    },
  );

  await t.step(
    "Init after a join took the lock: FailedPrecondition naming the join, every time",
    async () => {
      const w = world({ lockTakenByJoin: true });
      for (let attempt = 0; attempt < 2; attempt++) {
        const error = await refused(w);
        assert.equal(error.code, Code.FailedPrecondition);
        assert.match(error.serverMessage!, /node is already being activated: .*join took the node lock/);
        assert.equal(decoder.decode(error.logs), FAKE_NODE_LOGS);
      }
      // The lock was asked once; the second Init was refused from the remembered state.
      assert.deepEqual(w.calls, [`lock ${CLUSTER_ID}`]);
      assert.equal(w.server.phase, "taken");
    },
  );

  await t.step(
    "kubeadm failure: the error then the logs, on every attempt; terminal for this boot; node state removed",
    async () => {
      const w = world({ clusterFails: "kubeadm init: exit status 1: preflight failed" });
      const first = await refused(w);
      assert.equal(first.code, Code.Internal);
      assert.equal(
        first.serverMessage,
        "initializing cluster: kubeadm init: exit status 1: preflight failed",
      );
      assert.equal(decoder.decode(first.logs), FAKE_NODE_LOGS);
      assert.deepEqual(await w.server.outcome, {
        ok: false,
        error: "initializing cluster: kubeadm init: exit status 1: preflight failed",
      });
      const second = await refused(w);
      assert.equal(second.code, Code.FailedPrecondition);
      assert.match(
        second.serverMessage!,
        /earlier Init failed after this node was locked \(initializing cluster: kubeadm/,
      );
      assert.equal(decoder.decode(second.logs), FAKE_NODE_LOGS);
      assert.equal(w.calls.filter((c) => c.startsWith("lock")).length, 1);
      // A restarted bootstrapper must not take the bound node for a set-up one.
      assert.deepEqual(w.calls.slice(-2), ["initialize test-cluster", "node state removed"]);
    },
  );

  await t.step("a lock failure is terminal: the join client is stopped and the outcome settles", async () => {
    const w = world({
      lock: {
        // The real lock calls onTaken when it flips, before the marking that then fails.
        tryLock: (_clusterId, options) => {
          options?.onTaken?.();
          return Promise.reject(new Error("tpm2_pcrevent: exit status 1"));
        },
        holder: "none",
      },
    });
    const error = await refused(w);
    assert.equal(error.code, Code.Internal);
    assert.equal(error.serverMessage, "locking node: tpm2_pcrevent: exit status 1");
    assert.equal(w.server.phase, "failed");
    // The bootstrapper learns that this side took the lock (a half-marked node joins nothing either).
    assert.deepEqual(w.calls, ["onLocked", "node state removed"]);
    assert.deepEqual(await w.server.outcome, {
      ok: false,
      error: "locking node: tpm2_pcrevent: exit status 1",
    });
    assert.equal((await refused(w)).code, Code.FailedPrecondition);
    assert.deepEqual(w.calls, ["onLocked", "node state removed"]);
  });

  await t.step(
    "the work past the lock has a deadline: DeadlineExceeded, terminal, the initializer cancelled",
    async () => {
      const w = world({ options: { initTimeoutMs: 30 }, clusterNeverEnds: true });
      const error = await refused(w);
      assert.equal(error.code, Code.DeadlineExceeded);
      assert.equal(error.serverMessage, "initializing the node: no answer within 30 ms");
      assert.deepEqual(await w.server.outcome, {
        ok: false,
        error: "initializing the node: no answer within 30 ms",
      });
      assert.deepEqual(w.calls.slice(-3), [
        "initialize test-cluster",
        "initialize cancelled",
        "node state removed",
      ]);
      assert.equal((await refused(w)).code, Code.FailedPrecondition);
    },
  );

  await t.step(
    "a step that ignores the deadline: its late node state is removed after it, never before",
    async () => {
      const w = world({
        options: { initTimeoutMs: 20 },
        cluster: {
          describeNode: () => Promise.resolve({ nodeName: "control-plane-0", nodeIp: "10.0.0.2" }),
          checkComponents: () => {},
          initialize: () =>
            new Promise((resolve) => setTimeout(() => resolve({ kubeconfig: new Uint8Array([1]) }), 60)),
        },
      });
      assert.equal((await refused(w)).code, Code.DeadlineExceeded);
      assert.deepEqual(w.calls.slice(-2), [
        `node state ControlPlane ${MEASUREMENT_SALT.toHex()}`,
        "node state removed",
      ]);
    },
  );

  await t.step("log chunking: the logs arrive in chunks of the configured size", async () => {
    const logs = "x".repeat(25);
    const w = world({ clusterFails: "boom", nodeLogs: logs, options: { logChunkBytes: 10 } });
    const chunks: number[] = [];
    const error = await refused(w, undefined, (c) => chunks.push(c.length));
    assert.deepEqual(chunks, [10, 10, 5]);
    assert.equal(decoder.decode(error.logs), logs);
  });

  await t.step("a failing log source still ends with the error and one note", async () => {
    const w = world({
      clusterFails: "boom",
      logs: { collect: () => Promise.reject(new Error("journalctl: not found")) },
    });
    const error = await refused(w);
    assert.match(decoder.decode(error.logs), /logs are unavailable: journalctl: not found/);
  });

  await t.step("unknown or unsupported KMS scheme: refused before the lock, URI not echoed", async () => {
    for (
      const [uri, message] of [
        ["kms://aws?key=AAAA&salt=BBBB", /kms_uri: KMS type aws is not supported/],
        ["kms://vault?key=AAAA", /kms_uri: unknown KMS type: vault/],
        ["vault://cluster-kms?key=AAAA", /kms_uri: invalid KMS URI: invalid scheme: vault/],
      ] as const
    ) {
      const w = world();
      const error = await refused(w, initParameters({ kmsUri: uri }));
      assert.equal(error.code, Code.InvalidArgument);
      assert.match(error.serverMessage!, message);
      assert.ok(!error.message.includes("AAAA"));
      assert.deepEqual(w.calls, []);
      assert.equal(w.server.phase, "idle");
    }
  });

  await t.step(
    "a master secret or salt shorter than the key service accepts: refused before the lock, not echoed",
    async () => {
      const key16 = new Uint8Array(16).fill(7).toBase64({ alphabet: "base64url" });
      const salt32 = new Uint8Array(32).fill(8).toBase64({ alphabet: "base64url" });
      for (
        const [uri, message] of [
          [
            `kms://cluster-kms?key=AQ==&salt=${salt32}`,
            /^kms_uri: the master secret is 1 bytes, want at least 16$/,
          ],
          [`kms://cluster-kms?key=${key16}&salt=Ag==`, /^kms_uri: the salt is 1 bytes, want at least 32$/],
        ] as const
      ) {
        const w = world();
        const error = await refused(w, initParameters({ kmsUri: uri }));
        assert.equal(error.code, Code.InvalidArgument);
        assert.match(error.serverMessage!, message);
        assert.deepEqual(w.calls, [], "no lock, no disk, no kubeadm");
        assert.equal(w.server.phase, "idle");
      }
      // The shortest the key service accepts is enough.
      const w = world();
      const result = await run(
        w,
        initParameters({ kmsUri: `kms://cluster-kms?key=${key16}&salt=${salt32}` }),
      );
      assert.equal(decoder.decode(result.kubeconfig), FAKE_KUBECONFIG);
    },
  );

  await t.step("components this node could not install: refused before the lock", async () => {
    const w = world({
      componentsRefused: "install path under the node's root /x is longer than Linux allows",
    });
    const error = await refused(w);
    assert.equal(error.code, Code.InvalidArgument);
    assert.equal(
      error.serverMessage,
      "kubernetes_components: install path under the node's root /x is longer than Linux allows",
    );
    assert.deepEqual(w.calls, [], "no lock, no disk, no kubeadm");
    assert.equal(w.server.phase, "idle");
  });

  await t.step("this node's metadata unreadable or its name unusable: refused before the lock", async (t) => {
    const rows = [
      {
        name: "metadata API unavailable: Unavailable, retry later",
        error: new InitNodeError("metadata", "retrieving own instance metadata: GET /self: 503"),
        code: Code.Unavailable,
      },
      {
        name: "a name Kubernetes cannot take: FailedPrecondition",
        error: new InitNodeError("node-name", 'generating node name: "Bad Name!" is not compliant'),
        code: Code.FailedPrecondition,
      },
    ];
    for (const row of rows) {
      await t.step(row.name, async () => {
        const w = world({ nodeFails: row.error });
        const error = await refused(w);
        assert.equal(error.code, row.code);
        assert.equal(error.serverMessage, row.error.message);
        assert.deepEqual(w.calls, [], "no lock, no disk, no kubeadm");
        assert.equal(w.server.phase, "idle", "a later Init may still run");
      });
    }
  });

  await t.step(
    "an Init reaching the lock once the server began stopping: refused, nothing locked",
    async () => {
      const w = world();
      w.server.stopAccepting();
      const error = await refused(w);
      assert.equal(error.code, Code.Unavailable);
      assert.match(error.serverMessage!, /stopping; retry once it is back/);
      assert.deepEqual(w.calls, [], "no lock, no disk, no kubeadm");
      assert.equal(w.server.phase, "idle");
    },
  );

  await t.step(
    "an Init reaching the lock once a join took it and the server began stopping: told the node is joining",
    async () => {
      const w = world({ lockTakenByJoin: true });
      w.server.stopAccepting();
      const error = await refused(w);
      assert.equal(error.code, Code.FailedPrecondition);
      assert.match(error.serverMessage!, /joining an existing cluster/);
      assert.equal(w.server.phase, "taken");
    },
  );

  await t.step(
    "a Kubernetes version, cluster name, service CIDR or certificate SAN kubeadm would refuse: refused before the lock",
    async () => {
      for (
        const [parameters, message] of [
          [
            { kubernetesVersion: "1.30; rm -rf /" },
            /^kubernetes_version must be an exact version such as v1.30.2/,
          ],
          [{ kubernetesVersion: "stable-1" }, /^kubernetes_version must be an exact version/],
          [{ clusterName: "Bad Name!" }, /^cluster_name must be a DNS label .*got "Bad Name!"$/],
          [
            { serviceCidr: "10.96.0.0" },
            /^service_cidr must be a CIDR such as 10.96.0.0\/12.*got "10.96.0.0"$/,
          ],
          [
            { serviceCidr: "10.96.0.0/12,10.0.0.0/16" },
            /^service_cidr must hold at most one CIDR of each IP family/,
          ],
          [{ serviceCidr: "10.0.0.0/8" }, /^service_cidr is too large: a prefix of at least \/12 is needed/],
          [{ serviceCidr: "fd00::/64" }, /^service_cidr is too large: a prefix of at least \/108 is needed/],
          [{ serviceCidr: "10.96.0.0/29" }, /^service_cidr is too small: it must hold at least 10 addresses/],
          [
            { apiserverCertSans: ["api.example.com", "Bad_Name"] },
            /^apiserver_cert_sans must hold .*got "Bad_Name"$/,
          ],
          [{ apiserverCertSans: ["a..b"] }, /^apiserver_cert_sans must hold/],
        ] satisfies [Partial<InitParameters>, RegExp][]
      ) {
        const w = world();
        const error = await refused(w, initParameters(parameters));
        assert.equal(error.code, Code.InvalidArgument);
        assert.match(error.serverMessage!, message);
        assert.deepEqual(w.calls, [], "no lock, no disk, no kubeadm");
      }
      for (const kubernetesVersion of ["1.30.2", "v1.31.0-rc.1"]) {
        const w = world();
        await run(w, initParameters({ kubernetesVersion }));
        assert.equal(w.initialized[0].kubernetesVersion, kubernetesVersion);
      }
      const accepted = {
        serviceCidr: "10.96.0.0/12,fd00:10:96::/108",
        apiserverCertSans: ["api.example.com", "*.example.com", "203.0.113.7", "2001:db8::1"],
      };
      const w = world();
      await run(w, initParameters(accepted));
      assert.equal(w.initialized[0].serviceCidr, accepted.serviceCidr);
      assert.deepEqual(w.initialized[0].apiServerCertSans, accepted.apiserverCertSans);
    },
  );

  await t.step("bad measurement salt length: refused before the lock", async () => {
    const w = world();
    const error = await refused(w, initParameters({ measurementSalt: new Uint8Array(16) }));
    assert.equal(error.code, Code.InvalidArgument);
    assert.equal(error.serverMessage, "measurement_salt must be 32 bytes, got 16");
    assert.deepEqual(w.calls, []);
    await run(w);
  });

  await t.step("attestation config of another variant: refused before the lock", async () => {
    const w = world();
    const config = JSON.stringify({
      variant: "qemu-vtpm",
      measurements: { "4": { expected: "00".repeat(32), warnOnly: false } },
      akTrust: { trustAnyKey: true },
    });
    const error = await refused(w, initParameters({ attestationConfig: config }));
    assert.equal(error.code, Code.InvalidArgument);
    assert.match(error.serverMessage!, /attestation_config/);
    assert.deepEqual(w.calls, []);
  });

  const client = (w: InitWorld) => createClient(API, w.transport);
  async function attested(w: InitWorld) {
    const nonce = crypto.getRandomValues(new Uint8Array(32));
    const response = await client(w).getAttestation({ nonce });
    const reportData = await initReportData(nonce, response.publicKey);
    const clientKeys = await generateKeyPair();
    return { nonce, publicKey: response.publicKey, reportData, clientKeys };
  }
  /** Asserts that the stream fails with `code`; with `failureFirst`, after one init_failure message. */
  async function rejects(
    call: AsyncIterable<InitResponse>,
    code: Code,
    pattern: RegExp,
    failureFirst = false,
  ) {
    try {
      for await (const message of call) {
        assert.ok(failureFirst && message.kind.case === "initFailure", "the stream yielded a message");
        failureFirst = false;
      }
      assert.fail("the stream ended without an error");
    } catch (error) {
      assert.ok(error instanceof ConnectError, String(error));
      assert.equal(error.code, code, error.rawMessage);
      assert.match(error.rawMessage, pattern);
      seen.push(error.rawMessage);
    }
  }

  await t.step("wrongly sealed request: open-failed; unsealed: request-unsealed; no logs", async () => {
    const w = world();
    const a = await attested(w);
    const other = await generateKeyPair();
    const toOther = await sealInitRequest(
      { ...initParameters(), clientPublicKey: a.clientKeys.publicKey } as never,
      { publicKey: other.publicKey, reportData: a.reportData },
    );
    await rejects(
      client(w).init({ sealed: toOther, attestationNonce: a.nonce }),
      Code.InvalidArgument,
      /open/,
    );

    const b = await attested(w);
    await rejects(
      client(w).init({ ...initParameters(), attestationNonce: b.nonce }),
      Code.InvalidArgument,
      /must be sealed/,
    );
    const sealed = await sealInitRequest(
      { ...initParameters(), clientPublicKey: b.clientKeys.publicKey } as never,
      b,
    );
    await rejects(
      client(w).init({ sealed, attestationNonce: b.nonce, kmsUri: "kms://cluster-kms" }),
      Code.InvalidArgument,
      /plaintext fields on the wire/,
    );
    assert.deepEqual(w.calls, []);
  });

  await t.step("unknown, reused and expired nonces", async () => {
    const w = world();
    const a = await attested(w);
    const sealed = await sealInitRequest(
      {
        ...initParameters({ initSecret: new Uint8Array([1]) }),
        clientPublicKey: a.clientKeys.publicKey,
      } as never,
      a,
    );
    const request = { sealed, attestationNonce: a.nonce };
    // First use: opened, then refused for the secret.
    await rejects(client(w).init(request), Code.PermissionDenied, /invalid init secret/, true);
    // Reused: the key is gone.
    await rejects(client(w).init(request), Code.PermissionDenied, /no attestation key for this nonce/);
    // Never issued.
    await rejects(
      client(w).init({ sealed, attestationNonce: new Uint8Array(32).fill(7) }),
      Code.PermissionDenied,
      /no attestation key/,
    );
    // Expired.
    const b = await attested(w);
    const late = await sealInitRequest(
      { ...initParameters(), clientPublicKey: b.clientKeys.publicKey } as never,
      b,
    );
    w.clock.advance(DEFAULT_ATTESTATION_KEY_LIFETIME_MS);
    await rejects(
      client(w).init({ sealed: late, attestationNonce: b.nonce }),
      Code.PermissionDenied,
      /expired/,
    );
    // Malformed nonce.
    await rejects(
      client(w).init({ sealed: late, attestationNonce: new Uint8Array(8) }),
      Code.InvalidArgument,
      /32 bytes/,
    );
    assert.deepEqual(w.calls, []);
  });

  await t.step("GetAttestation: malformed nonce, a nonce twice, a full key map", async () => {
    const w = world({ options: { maxAttestationKeys: 2 } });
    const expectCode = async (call: Promise<unknown>, code: Code) => {
      const error = await call.then(() => assert.fail("succeeded"), (e) => e);
      assert.ok(error instanceof ConnectError);
      assert.equal(error.code, code, error.rawMessage);
    };
    await expectCode(client(w).getAttestation({ nonce: new Uint8Array(31) }), Code.InvalidArgument);
    const nonce = new Uint8Array(32).fill(1);
    await client(w).getAttestation({ nonce });
    await expectCode(client(w).getAttestation({ nonce }), Code.InvalidArgument);
    await client(w).getAttestation({ nonce: new Uint8Array(32).fill(2) });
    await expectCode(client(w).getAttestation({ nonce: new Uint8Array(32).fill(3) }), Code.ResourceExhausted);
    // Expired keys make room.
    w.clock.advance(DEFAULT_ATTESTATION_KEY_LIFETIME_MS);
    await client(w).getAttestation({ nonce: new Uint8Array(32).fill(3) });
  });

  await t.step(
    "the browser port's GetAttestation: the same evidence, no key held, busy past its queue",
    async () => {
      let release = () => {};
      const gate = new Promise<void>((resolve) => release = resolve);
      let gated = false;
      const dummy = new DummyIssuer(silentLogger);
      const w = world({
        options: { maxAttestationKeys: 1 },
        issuer: {
          variant: dummy.variant,
          issue: async (data) => {
            if (gated) await gate;
            return await dummy.issue(data);
          },
        },
      });
      const browser = createClient(
        API,
        createRouterTransport((router) =>
          router.rpc(API.method.getAttestation, w.server.browserHandlers().getAttestation)
        ),
      );
      const nonce = crypto.getRandomValues(new Uint8Array(32));
      const shown = await browser.getAttestation({ nonce });
      const config = parseOperatorAttestationConfig('{"variant":"dummy"}');
      const result = await verifyNodeEvidence(evidenceFromAnswer("node", nonce, shown), config, {
        logger: silentLogger,
      });
      assert.equal(result.passed, true, "the evidence is bound to the nonce and the shown key");

      // Shown keys are not held: more than the map holds, and the init server's own key still fits.
      for (let i = 0; i < 3; i++) {
        await browser.getAttestation({
          nonce: crypto.getRandomValues(new Uint8Array(32)),
        });
      }
      const held = await attested(w);
      // No Init can follow a shown key: its nonce names no held key.
      const sealed = await sealInitRequest(
        { ...initParameters(), clientPublicKey: held.clientKeys.publicKey } as never,
        { publicKey: shown.publicKey, reportData: await initReportData(nonce, shown.publicKey) },
      );
      await rejects(client(w).init({ sealed, attestationNonce: nonce }), Code.PermissionDenied, /nonce/);
      assert.deepEqual(w.calls, []);

      // One quote at a time and a few waiting; the rest are told the node is busy.
      gated = true;
      const waiting = Array.from(
        { length: SHOW_ATTESTATION_CONCURRENCY + SHOW_ATTESTATION_QUEUE },
        () => browser.getAttestation({ nonce: crypto.getRandomValues(new Uint8Array(32)) }),
      );
      const busy = await browser.getAttestation({ nonce: crypto.getRandomValues(new Uint8Array(32)) }).then(
        () => assert.fail("succeeded"),
        (error) => error,
      );
      assert.ok(busy instanceof ConnectError);
      assert.equal(busy.code, Code.ResourceExhausted);
      assert.match(busy.rawMessage, /busy producing attestation evidence; retry later/);
      release();
      await Promise.all(waiting);
    },
  );

  await t.step("an issuer failure: Unavailable, and the client says unavailable", async () => {
    const w = world({ issuer: { variant: "dummy", issue: () => Promise.reject(new Error("TPM gone")) } });
    const error = await run(w).then(() => assert.fail("succeeded"), (e: NodeExchangeError) => e);
    assert.equal(error.reason, "unavailable");
  });

  await t.step("no secret in any error message or log line", () => {
    const lines = [...seen, ...worlds.flatMap((w) => w.logLines)];
    assert.ok(lines.length > 20);
    for (const line of lines) {
      for (const secret of SECRETS) assert.ok(!line.includes(secret), `a line holds a secret: ${line}`);
    }
  });
});
