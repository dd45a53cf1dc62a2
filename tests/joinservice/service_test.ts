/**
 * The join service's handler through the interfaces it declares: one table
 * of named cases (what is changed, the code and reason the node gets, the
 * writes the API server sees), then the properties no single row shows:
 * audit entries, budgets under a flood of garbage, the verifier pool, logs.
 */
import { NONCE_LENGTH } from "../../src/atls/nonce.ts";
import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import {
  type IssueJoinTicketRequest,
  IssueJoinTicketResponseSchema,
  IssueRejoinTicketRequestSchema,
} from "../../src/gen/join/join_pb.ts";
import { PoolFullError, WorkPool } from "../../src/limits/pool.ts";
import { PeerRateLimiter, TokenBucket } from "../../src/limits/ratelimiter.ts";
import { JoinService } from "../../src/joinservice/service.ts";
import {
  type AuditEntry,
  RecentDecisions,
  type RequestRole,
  type TicketMethod,
} from "../../src/joinservice/audit.ts";
import { CONTROL_PLANE_ANY_KEY_WARNING } from "../../src/attestation/watcher.ts";
import { expectConnectError } from "../support/connect_error.ts";
import {
  CONTROL_PLANE_KEY,
  DISK_UUID,
  failing,
  FAKE_ENDPOINT,
  FAKE_PEER,
  fakeContext,
  fakeDependencies,
  fakeJoinRequest,
  fakeKey,
  type FakeOverrides,
  type FakeWorld,
  unsealFake,
  WORKER_KEY,
} from "../support/join_fakes.ts";

/** One case of a join ticket. */
interface JoinCase {
  name: string;
  /** Changes to the fake dependencies. */
  override: FakeOverrides;
  /** The request; default a worker's ({@linkcode fakeJoinRequest}). */
  request?: Parameters<typeof fakeJoinRequest>[0];
  /** The code the node gets; undefined for a ticket. */
  wantCode?: Code;
  /** The audit entry's reason; undefined for a ticket. */
  wantReason?: string;
  /** The API server writes, in order. */
  wantWrites: string[];
}

const controlPlane = { nodeName: "control-plane-1", isControlPlane: true };
const hostKey = new TextEncoder().encode("ssh-ed25519 AAAA");

const joinCases: JoinCase[] = [
  {
    name: "a worker gets its ticket: token, then its JoiningNode",
    override: {},
    wantWrites: ["create token tok001", "record worker-1 (worker)"],
  },
  {
    name: "a control plane with a key the operator named gets its ticket",
    override: { keyDigest: CONTROL_PLANE_KEY },
    request: controlPlane,
    wantWrites: ["create token tok001", "record control-plane-1 (control-plane)"],
  },
  {
    name: "a worker key asking for control-plane files is refused, nothing created",
    override: { keyDigest: WORKER_KEY },
    request: controlPlane,
    wantCode: Code.PermissionDenied,
    wantReason: "control-plane-not-allowed",
    wantWrites: [],
  },
  {
    name: "without control-plane keys in the config, no key joins as a control plane",
    override: {
      keyDigest: CONTROL_PLANE_KEY,
      config: { controlPlanes: { kind: "allow-list", keyDigests: new Set() } },
    },
    request: controlPlane,
    wantCode: Code.PermissionDenied,
    wantReason: "control-plane-not-allowed",
    wantWrites: [],
  },
  {
    name: "evidence without a key (dummy) cannot match a control-plane list",
    override: { keyDigest: undefined, config: { variant: "dummy" } },
    request: controlPlane,
    wantCode: Code.PermissionDenied,
    wantReason: "control-plane-not-allowed",
    wantWrites: [],
  },
  {
    name: "controlPlaneAnyKey (an explicit, insecure choice) lets any key join as a control plane",
    override: { keyDigest: WORKER_KEY, config: { akTrust: { kind: "any" }, controlPlanes: { kind: "any" } } },
    request: controlPlane,
    wantWrites: ["create token tok001", "record control-plane-1 (control-plane)"],
  },
  {
    name: "a malformed disk UUID is refused before attestation",
    override: {},
    request: { diskUuid: "measurementSecret" },
    wantCode: Code.InvalidArgument,
    wantReason: "malformed-request",
    wantWrites: [],
  },
  {
    name: "an empty CSR is refused before attestation",
    override: {},
    request: { certificateRequest: new Uint8Array() },
    wantCode: Code.InvalidArgument,
    wantReason: "malformed-request",
    wantWrites: [],
  },
  {
    name: "a CSR over 16 KiB is refused before attestation",
    override: {},
    request: { certificateRequest: new Uint8Array(16 * 1024 + 1) },
    wantCode: Code.InvalidArgument,
    wantReason: "malformed-request",
    wantWrites: [],
  },
  {
    name: "a request without attestation is refused",
    override: {},
    request: { attestation: undefined },
    wantCode: Code.InvalidArgument,
    wantReason: "evidence-missing",
    wantWrites: [],
  },
  ...["*", "*.cluster.local", "node-?", "!node-1", "node-1,node-2", ""].map((principal) => ({
    name: `the SSH principal ${JSON.stringify(principal)} is refused`,
    override: {},
    request: { hostPublicKey: hostKey, hostCertificatePrincipals: ["worker-1", principal] },
    wantCode: Code.InvalidArgument,
    wantReason: "malformed-request",
    wantWrites: [],
  })),
  {
    name: "a host key without principals is refused",
    override: {},
    request: { hostPublicKey: hostKey, hostCertificatePrincipals: [] },
    wantCode: Code.InvalidArgument,
    wantReason: "malformed-request",
    wantWrites: [],
  },
  {
    name: "a nonce with a bad MAC is refused",
    override: { precheckFails: "nonce-bad-mac" },
    wantCode: Code.PermissionDenied,
    wantReason: "nonce-bad-mac",
    wantWrites: [],
  },
  {
    name: "measurements that differ are refused",
    override: { verifyFails: "measurement-mismatch" },
    wantCode: Code.PermissionDenied,
    wantReason: "measurement-mismatch",
    wantWrites: [],
  },
  {
    name: "a peer over its rate is refused",
    override: { peerLimiter: { take: () => false } },
    wantCode: Code.ResourceExhausted,
    wantReason: "rate-limit-peer",
    wantWrites: [],
  },
  {
    name: "an attested node over the shared ticket budget is refused",
    override: { ticketBudget: { take: () => false } },
    wantCode: Code.ResourceExhausted,
    wantReason: "rate-limit-global",
    wantWrites: [],
  },
  {
    name: "a full verifier pool is refused",
    override: { verifierPool: { run: () => Promise.reject(new PoolFullError()) } },
    wantCode: Code.ResourceExhausted,
    wantReason: "verifier-pool-full",
    wantWrites: [],
  },
  {
    name: "a CSR the signer refuses stops the ticket before any write",
    override: { kubeletSigner: { sign: failing("csr-rejected") } },
    wantCode: Code.InvalidArgument,
    wantReason: "csr-rejected",
    wantWrites: [],
  },
  {
    name: "a worker may not take the control-plane JoiningNode's name",
    override: {},
    request: { nodeName: "control-plane" },
    wantCode: Code.InvalidArgument,
    wantReason: "reserved-node-name",
    wantWrites: [],
  },
  {
    name: "an SSH host key the CA refuses stops the ticket before any write",
    override: { ssh: { certify: failing("ssh-host-key-rejected") } },
    request: { hostPublicKey: hostKey, hostCertificatePrincipals: ["worker-1"] },
    wantCode: Code.InvalidArgument,
    wantReason: "ssh-host-key-rejected",
    wantWrites: [],
  },
  {
    name: "the key service down: Unavailable before any write",
    override: { keys: { getDataKey: failing("key-service-unavailable") } },
    wantCode: Code.Unavailable,
    wantReason: "key-service-unavailable",
    wantWrites: [],
  },
  {
    name: "failure order: of two failing reads, the earlier one in the ticket's order is reported",
    override: {
      components: { current: failing("api-server-unavailable") },
      keys: { getDataKey: failing("key-service-unavailable") },
    },
    wantCode: Code.Unavailable,
    wantReason: "key-service-unavailable",
    wantWrites: [],
  },
  {
    name: "the API server down for the components: Unavailable before any write",
    override: { components: { current: failing("api-server-unavailable") } },
    wantCode: Code.Unavailable,
    wantReason: "api-server-unavailable",
    wantWrites: [],
  },
  {
    name: "the JoiningNode refused: the token created before it is deleted",
    override: { joiningNodes: { record: failing("api-server-refused"), release: failing("internal") } },
    wantCode: Code.Internal,
    wantReason: "api-server-refused",
    wantWrites: ["create token tok001", "delete token tok001"],
  },
  {
    name: "another control plane joining: Unavailable, the token deleted",
    override: {
      keyDigest: CONTROL_PLANE_KEY,
      joiningNodes: { record: failing("control-plane-busy"), release: failing("internal") },
    },
    request: controlPlane,
    wantCode: Code.Unavailable,
    wantReason: "control-plane-busy",
    wantWrites: ["create token tok001", "delete token tok001"],
  },
  {
    name: "sealing fails: the token is deleted after the record (a worker's record is left to the source)",
    override: { sealFails: true },
    wantCode: Code.InvalidArgument,
    wantReason: "seal-failed",
    wantWrites: [
      "create token tok001",
      "record worker-1 (worker)",
      "delete token tok001",
      "release worker-1 (no uid)",
    ],
  },
  {
    name: "a control plane's sealing fails: the token is deleted and its record released",
    override: { keyDigest: CONTROL_PLANE_KEY, sealFails: true },
    request: controlPlane,
    wantCode: Code.InvalidArgument,
    wantReason: "seal-failed",
    wantWrites: [
      "create token tok001",
      "record control-plane-1 (control-plane)",
      "delete token tok001",
      "release control-plane-1 (uid-control-plane-1)",
    ],
  },
  {
    name: "a bug in a dependency is internal, and nothing is written",
    override: { discoveryHash: { current: () => Promise.reject(new TypeError("x is undefined")) } },
    wantCode: Code.Internal,
    wantReason: "internal",
    wantWrites: [],
  },
];

/** Sends a join request through the handler of `world`; resolves to the ticket or the ConnectError. */
async function join(world: FakeWorld, request: IssueJoinTicketRequest, peer = FAKE_PEER) {
  const service = new JoinService(world.deps).handlers();
  return await Promise.resolve(service.issueJoinTicket(request, fakeContext({ peer }))).then(
    (response) => ({ ticket: unsealFake(create(IssueJoinTicketResponseSchema, response)) }),
    (error: unknown) => ({ error }),
  );
}

Deno.test("join tickets: each case gets its code, reason and writes", async (t) => {
  for (const row of joinCases) {
    await t.step(row.name, async () => {
      const world = fakeDependencies(row.override);
      const result = await join(world, fakeJoinRequest(row.request));
      const [entry] = world.audit;
      if (row.wantCode === undefined) {
        assert.ok("ticket" in result, `want a ticket, got ${"error" in result ? result.error : ""}`);
        assert.equal(entry.outcome, "issued");
      } else {
        assert.ok("error" in result, "want a rejection, got a ticket");
        assert.ok(result.error instanceof ConnectError, String(result.error));
        assert.equal(Code[result.error.code], Code[row.wantCode], result.error.rawMessage);
        assert.equal(entry.outcome, "rejected");
        assert.equal(entry.reason, row.wantReason);
        assert.equal(entry.code, Code[row.wantCode]);
      }
      assert.deepEqual(world.writes, row.wantWrites);
      assert.equal(world.audit.length, 1, "one audit entry per decision");
    });
  }
});

Deno.test("a node gone before its answer: no ticket is sent, and its token is deleted again", async () => {
  const gone = new AbortController();
  const world = fakeDependencies();
  const record = world.deps.joiningNodes.record;
  // The node disconnects while its JoiningNode is written; the write itself completes.
  world.deps.joiningNodes.record = async (node, options) => {
    const recorded = await record(node, options);
    gone.abort();
    return recorded;
  };
  const service = new JoinService(world.deps).handlers();
  const error = await Promise.resolve(
    service.issueJoinTicket(fakeJoinRequest(), fakeContext({ signal: gone.signal })),
  ).then(() => undefined, (e: unknown) => e);
  assert.ok(error instanceof ConnectError, `want a rejection, got ${error}`);
  assert.equal(Code[error.code], "Canceled");
  assert.deepEqual(world.writes, [
    "create token tok001",
    "record worker-1 (worker)",
    "delete token tok001",
    "release worker-1 (no uid)",
  ]);
  assert.equal(world.audit[0].reason, "canceled");
});

Deno.test("a ticket holds every field from its sources", async () => {
  const world = fakeDependencies({ keyDigest: CONTROL_PLANE_KEY });
  const result = await join(
    world,
    fakeJoinRequest({
      ...controlPlane,
      hostPublicKey: hostKey,
      hostCertificatePrincipals: ["cp-1", "10.0.0.2"],
    }),
  );
  assert.ok("ticket" in result);
  const { ticket } = result;
  assert.deepEqual(ticket.stateDiskKey, fakeKey(DISK_UUID));
  assert.deepEqual(ticket.measurementSecret, fakeKey("measurementSecret"));
  assert.deepEqual(ticket.measurementSalt, world.deps.measurementSalt);
  assert.equal(new TextDecoder().decode(ticket.kubeletCert), "CERTIFICATE for control-plane-1");
  assert.equal(ticket.apiServerEndpoint, FAKE_ENDPOINT);
  assert.equal(ticket.token, "tok001.0123456789abcdef");
  assert.equal(ticket.discoveryTokenCaCertHash, `sha256:${"cc".repeat(32)}`);
  assert.deepEqual(ticket.controlPlaneFiles.map((f) => f.name), ["ca.key"]);
  assert.equal(ticket.kubernetesComponents.length, 1);
  assert.equal(new TextDecoder().decode(ticket.hostCertificate), "host certificate for cp-1,10.0.0.2");
  assert.deepEqual(world.writes, ["create token tok001", "record control-plane-1 (control-plane)"]);

  const worker = await join(fakeDependencies(), fakeJoinRequest());
  assert.ok("ticket" in worker);
  assert.equal(worker.ticket.controlPlaneFiles.length, 0, "a worker gets no control-plane files");
  assert.equal(worker.ticket.hostCertificate.length, 0);
});

Deno.test("rejoin tickets: the two keys and nothing else", async (t) => {
  const rejoin = async (world: FakeWorld, diskUuid = DISK_UUID) => {
    const service = new JoinService(world.deps).handlers();
    const request = create(IssueRejoinTicketRequestSchema, {
      diskUuid,
      attestation: {
        nonce: new Uint8Array(NONCE_LENGTH),
        publicKey: new Uint8Array(32),
        evidence: { variant: "qemu-vtpm" },
      },
    });
    return await Promise.resolve(service.issueRejoinTicket(request, fakeContext()));
  };
  await t.step("issued: both keys, no API server write", async () => {
    const world = fakeDependencies();
    const response = await rejoin(world, DISK_UUID.toUpperCase());
    assert.ok(response.sealed);
    assert.deepEqual(world.writes, []);
    assert.equal(world.audit[0].role, "rejoin");
    assert.equal(world.audit[0].outcome, "issued");
  });
  const cases: [string, FakeOverrides, string, Code, string][] = [
    ["malformed disk UUID", {}, "../x", Code.InvalidArgument, "malformed-request"],
    ["bad nonce MAC", { precheckFails: "nonce-bad-mac" }, DISK_UUID, Code.PermissionDenied, "nonce-bad-mac"],
    [
      "key service down",
      { keys: { getDataKey: failing("key-service-unavailable") } },
      DISK_UUID,
      Code.Unavailable,
      "key-service-unavailable",
    ],
    [
      "ticket budget spent",
      { ticketBudget: { take: () => false } },
      DISK_UUID,
      Code.ResourceExhausted,
      "rate-limit-global",
    ],
  ];
  for (const [name, override, diskUuid, code, reason] of cases) {
    await t.step(name, async () => {
      const world = fakeDependencies(override);
      await expectConnectError(rejoin(world, diskUuid), code);
      assert.equal(world.audit[0].reason, reason);
      assert.deepEqual(world.writes, []);
    });
  }
});

Deno.test("both ticket methods are rate-limited per peer: over its rate, a peer is refused before any work", async (t) => {
  const rows: { name: string; method: TicketMethod; role: RequestRole }[] = [
    { name: "a join ticket", method: "IssueJoinTicket", role: "worker" },
    { name: "a rejoin ticket", method: "IssueRejoinTicket", role: "rejoin" },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const peersAsked: string[] = [];
      const keysAsked: string[] = [];
      const world = fakeDependencies({
        peerLimiter: {
          take: (peer) => {
            peersAsked.push(peer);
            return false;
          },
        },
        keys: {
          getDataKey: (id) => {
            keysAsked.push(id);
            return Promise.resolve(fakeKey(id));
          },
        },
      });
      const service = new JoinService(world.deps).handlers();
      const call = row.method === "IssueJoinTicket"
        ? service.issueJoinTicket(fakeJoinRequest(), fakeContext())
        : service.issueRejoinTicket(
          create(IssueRejoinTicketRequestSchema, {
            diskUuid: DISK_UUID,
            attestation: fakeJoinRequest().attestation,
          }),
          fakeContext(),
        );
      await expectConnectError(Promise.resolve(call), Code.ResourceExhausted);
      assert.deepEqual(peersAsked, [FAKE_PEER]);
      assert.equal(world.audit.length, 1);
      assert.equal(world.audit[0].method, row.method);
      assert.equal(world.audit[0].role, row.role);
      assert.equal(world.audit[0].reason, "rate-limit-peer");
      assert.deepEqual(world.exchangeCalls, { precheck: 0, verify: 0 }, "no attestation was checked");
      assert.deepEqual(keysAsked, [], "the key service was not asked");
      assert.deepEqual(world.writes, []);
    });
  }
});

Deno.test("audit: the entry names the peer, the config, the node's key and what it reported", async () => {
  const world = fakeDependencies({ keyDigest: CONTROL_PLANE_KEY });
  await join(world, fakeJoinRequest(controlPlane), "2001:db8::7");
  const rejected = fakeDependencies({ verifyFails: "measurement-mismatch" });
  await join(rejected, fakeJoinRequest({ diskUuid: DISK_UUID.toUpperCase() }));

  const [issued] = world.audit;
  assert.deepEqual({ ...issued, reportedMeasurementsDigest: undefined }, {
    method: "IssueJoinTicket",
    peer: "2001:db8::7",
    variant: "qemu-vtpm",
    measurementsDigest: "ab".repeat(32),
    diskUuid: DISK_UUID,
    role: "control-plane",
    keyDigest: CONTROL_PLANE_KEY,
    reportedMeasurementsDigest: undefined,
    nodeName: "control-plane-1",
    outcome: "issued",
  });
  assert.match(issued.reportedMeasurementsDigest ?? "", /^[0-9a-f]{64}$/);

  const [refused] = rejected.audit;
  assert.equal(refused.reason, "measurement-mismatch");
  assert.equal(refused.keyDigest, WORKER_KEY, "a refused node's key is named too");
  assert.equal(refused.code, "PermissionDenied");
  assert.equal(refused.diskUuid, DISK_UUID.toUpperCase());
  assert.equal(refused.nodeName, undefined, "no node name before the CSR is accepted");
  assert.ok(!String(refused.error).includes(WORKER_KEY), "the node is not told its key digest");
  assert.equal(
    rejected.registry.render().match(
      /decisions\{method="IssueJoinTicket",outcome="rejected",reason="measurement-mismatch"\} 1/,
    )
      ?.length,
    1,
  );
});

Deno.test("garbage does not spend the ticket budget: attested nodes still get their tickets", async () => {
  const world = fakeDependencies();
  world.deps.ticketBudget = new TokenBucket({ rate: { perSecond: 0.001, burst: 2 }, clock: world.clock });
  const service = new JoinService(world.deps).handlers();
  const call = (request: IssueJoinTicketRequest) =>
    Promise.resolve(service.issueJoinTicket(request, fakeContext()));

  // A flood of requests failing cheap checks: malformed ones, and (while the exchange refuses their nonces)
  // ones with bad nonce MACs.
  const honest = world.deps.exchange;
  const badNonces = fakeDependencies({ precheckFails: "nonce-bad-mac" }).deps.exchange;
  let flooding = true;
  world.deps.exchange = {
    challenge: honest.challenge,
    precheck: (request) => (flooding ? badNonces : honest).precheck(request),
  };
  for (let i = 0; i < 200; i++) {
    await expectConnectError(call(fakeJoinRequest({ diskUuid: `garbage-${i}` })), Code.InvalidArgument);
    await expectConnectError(call(fakeJoinRequest()), Code.PermissionDenied, /nonce-bad-mac/);
  }
  flooding = false;

  await call(fakeJoinRequest({ nodeName: "worker-a" }));
  await call(fakeJoinRequest({ nodeName: "worker-b" }));
  await expectConnectError(
    call(fakeJoinRequest({ nodeName: "worker-c" })),
    Code.ResourceExhausted,
    /global rate limit/,
  );
  assert.deepEqual(world.writes, [
    "create token tok001",
    "record worker-a (worker)",
    "create token tok002",
    "record worker-b (worker)",
  ]);
});

Deno.test("the cheap checks run outside the verifier pool: garbage never waits there", async () => {
  const pool = new WorkPool({ concurrency: 1, maxQueued: 0 });
  const busy = Promise.withResolvers<void>();
  const occupying = pool.run(() => busy.promise);
  try {
    const world = fakeDependencies({ verifierPool: pool, precheckFails: "nonce-bad-mac" });
    const result = await join(world, fakeJoinRequest());
    assert.ok("error" in result && result.error instanceof ConnectError);
    assert.equal(world.audit[0].reason, "nonce-bad-mac", "refused for its nonce, not for the full pool");
    assert.equal(world.exchangeCalls.verify, 0);

    const honest = fakeDependencies({ verifierPool: pool });
    await join(honest, fakeJoinRequest());
    assert.equal(honest.audit[0].reason, "verifier-pool-full", "a real verification needs the pool");
  } finally {
    busy.resolve();
    await occupying;
  }
});

Deno.test("a ticket call beyond the RPC server's bounds: server-busy before any work, audited and counted", async (t) => {
  const busy = "server busy: 32 calls in progress and 512 waiting; retry later";
  const rows: { name: string; method: TicketMethod; role: RequestRole }[] = [
    { name: "a join ticket", method: "IssueJoinTicket", role: "control-plane" },
    { name: "a rejoin ticket", method: "IssueRejoinTicket", role: "rejoin" },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const world = fakeDependencies({ keyDigest: CONTROL_PLANE_KEY });
      let peerRateTaken = 0;
      world.deps.peerLimiter = { take: () => ++peerRateTaken > 0 };
      const service = new JoinService(world.deps).handlers();
      const context = fakeContext({ peer: "2001:db8::9", overloaded: busy });
      const diskUuid = DISK_UUID.toUpperCase();
      const call = row.method === "IssueJoinTicket"
        ? service.issueJoinTicket(fakeJoinRequest({ ...controlPlane, diskUuid }), context)
        : service.issueRejoinTicket(create(IssueRejoinTicketRequestSchema, { diskUuid }), context);
      await expectConnectError(Promise.resolve(call), Code.ResourceExhausted, busy);

      assert.deepEqual(world.audit, [{
        method: row.method,
        peer: "2001:db8::9",
        variant: "qemu-vtpm",
        measurementsDigest: "ab".repeat(32),
        diskUuid,
        role: row.role,
        keyDigest: undefined,
        outcome: "rejected",
        reason: "server-busy",
        code: "ResourceExhausted",
        error: busy,
      }]);
      assert.deepEqual(world.exchangeCalls, { precheck: 0, verify: 0 }, "no attestation work");
      assert.equal(peerRateTaken, 0, "the peer's rate is not spent");
      assert.deepEqual(world.writes, []);
      assert.match(
        world.registry.render(),
        new RegExp(`decisions\\{method="${row.method}",outcome="rejected",reason="server-busy"\\} 1`),
      );
    });
  }
});

Deno.test("the per-peer rate groups IPv6 peers by /64", async () => {
  const world = fakeDependencies();
  world.deps.peerLimiter = new PeerRateLimiter({
    perPeer: { perSecond: 0.001, burst: 2 },
    clock: world.clock,
  });
  await join(world, fakeJoinRequest({ nodeName: "a" }), "2001:db8:1:2::10");
  await join(world, fakeJoinRequest({ nodeName: "b" }), "2001:db8:1:2:aaaa::11");
  await join(world, fakeJoinRequest({ nodeName: "c" }), "2001:db8:1:2:bbbb::12");
  await join(world, fakeJoinRequest({ nodeName: "d" }), "2001:db8:1:3::10");
  assert.deepEqual(world.audit.map((e) => [e.peer, e.outcome, e.reason]), [
    ["2001:db8:1:2::10", "issued", undefined],
    ["2001:db8:1:2:aaaa::11", "issued", undefined],
    ["2001:db8:1:2:bbbb::12", "rejected", "rate-limit-peer"],
    ["2001:db8:1:3::10", "issued", undefined],
  ]);
});

Deno.test("an internal error: the node sees only 'internal error', the log names the step and cause", async () => {
  const world = fakeDependencies({
    discoveryHash: { current: () => Promise.reject(new TypeError("x is undefined")) },
  });
  const result = await join(world, fakeJoinRequest());
  assert.ok("error" in result && result.error instanceof ConnectError);
  assert.equal(result.error.rawMessage, "internal error");
  const logged = world.logs.find((line) => line.msg === "unexpected error");
  assert.deepEqual(
    { step: logged?.step, reason: logged?.reason, error: logged?.error },
    { step: "getting discovery CA hash", reason: "internal", error: "x is undefined" },
  );
});

Deno.test("a control-plane grant under controlPlaneAnyKey is logged as insecure", async () => {
  const world = fakeDependencies({ config: { akTrust: { kind: "any" }, controlPlanes: { kind: "any" } } });
  await join(world, fakeJoinRequest(controlPlane));
  const warning = world.logs.find((line) => line.msg === CONTROL_PLANE_ANY_KEY_WARNING);
  assert.equal(warning?.level, "warn");
  assert.equal(warning?.keyDigest, WORKER_KEY);
  const listed = fakeDependencies({ keyDigest: CONTROL_PLANE_KEY });
  await join(listed, fakeJoinRequest(controlPlane));
  assert.ok(
    !listed.logs.some((line) => line.msg === CONTROL_PLANE_ANY_KEY_WARNING),
    "a listed key is not insecure",
  );
});

Deno.test("a challenge outage is logged once, and its end once", async () => {
  let down = true;
  const world = fakeDependencies();
  world.deps.exchange = {
    ...world.deps.exchange,
    challenge: () =>
      down
        ? failing("key-service-unavailable")()
        : Promise.resolve({ nonce: new Uint8Array(NONCE_LENGTH), expiresAt: 1 }),
  };
  const service = new JoinService(world.deps);
  for (let i = 0; i < 5; i++) await expectConnectError(service.getChallenge({}), Code.Unavailable);
  down = false;
  await service.getChallenge({});
  await service.getChallenge({});
  assert.deepEqual(
    world.logs.map((line) => line.msg),
    ["cannot issue challenges", "issuing challenges again"],
  );
});

Deno.test("status: the variant, measurements, digest, generation and counters", async () => {
  const world = fakeDependencies();
  const service = new JoinService(world.deps);
  await join(world, fakeJoinRequest());
  const status = service.status();
  assert.equal(status.attestationVariant, "qemu-vtpm");
  assert.equal(status.measurementsDigest, "ab".repeat(32));
  assert.equal(status.configGeneration, 1n);
  assert.deepEqual(status.measurements.map((m) => [m.index, m.expected, m.warnOnly]), [[
    4,
    "04".repeat(32),
    false,
  ]]);
  assert.deepEqual(status.counters, { 'method="IssueJoinTicket",outcome="issued",reason=""': 1n });
  assert.equal(status.startedAtUnixMs, BigInt(world.clock.now()));
});

Deno.test("status: decisions counted by method, outcome and reason; recent ones newest first, no secrets", async () => {
  const world = fakeDependencies();
  const service = new JoinService(world.deps);
  const handlers = service.handlers();
  const decide = (request: IssueJoinTicketRequest) =>
    Promise.resolve(handlers.issueJoinTicket(request, fakeContext({ peer: FAKE_PEER }))).catch(() => {});
  await decide(fakeJoinRequest());
  world.clock.advance(1_000);
  await decide(fakeJoinRequest({ diskUuid: "measurementSecret" }));
  world.clock.advance(1_000);
  await decide(fakeJoinRequest({ certificateRequest: new Uint8Array() }));

  const status = service.status();
  const counts = status.decisionCounts.map((c) => [c.method, c.outcome, c.reason, c.count]);
  assert.deepEqual(counts.toSorted(), [
    ["IssueJoinTicket", "issued", "", 1n],
    ["IssueJoinTicket", "rejected", "malformed-request", 2n],
  ]);
  assert.deepEqual(status.recentDecisions.map((d) => [d.outcome, d.reason, d.code, d.peer, d.role]), [
    ["rejected", "malformed-request", "InvalidArgument", FAKE_PEER, "worker"],
    ["rejected", "malformed-request", "InvalidArgument", FAKE_PEER, "worker"],
    ["issued", "", "", FAKE_PEER, "worker"],
  ]);
  const [newest, , oldest] = status.recentDecisions;
  assert.equal(newest.timeUnixMs - oldest.timeUnixMs, 2_000n);
  assert.equal(oldest.nodeName, world.audit[0].nodeName);
  assert.equal(newest.message, "certificate_request is empty");
  // What the dashboard shows is the audit entry: no ticket, token or key material.
  const shown = JSON.stringify(
    status.recentDecisions,
    (_, value) => typeof value === "bigint" ? String(value) : value,
  );
  for (const secret of ["token", "stateDiskKey", 'measurementSecret":']) {
    assert.ok(!shown.includes(secret), secret);
  }
});

Deno.test("recent decisions keep at most their limit, newest first", () => {
  const recent = new RecentDecisions(2);
  const entry = (nodeName: string): AuditEntry => ({
    method: "IssueJoinTicket",
    peer: FAKE_PEER,
    variant: "qemu-vtpm",
    measurementsDigest: "ab".repeat(32),
    diskUuid: DISK_UUID,
    role: "worker",
    nodeName,
    outcome: "issued",
  });
  for (const [i, name] of ["a", "b", "c"].entries()) recent.add(entry(name), i);
  assert.deepEqual(recent.list().map((e) => [e.nodeName, e.timeUnixMs]), [["c", 2], ["b", 1]]);
  assert.throws(() => new RecentDecisions(0), RangeError);
});
