/**
 * The real join service process refusing requests, as an acceptance layer
 * over the handler's unit tests (`service_test.ts`) and the exchange tests
 * (`tests/atls/`): CSRs a kubelet may not have, wildcard SSH principals and
 * disk UUIDs naming other keys (each with the right code and without a
 * single call to the API server), a worker's key asking for control-plane
 * files until the operator names it, nodes whose measurements no longer
 * match after the attestation config is changed on disk, a flood of garbage
 * that must not starve attested nodes, peers over their rate limit, and
 * tickets beyond the server's bounds on calls (refused at once, audited).
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, type ConnectError } from "@connectrpc/connect";
import { IssueJoinTicketRequestSchema } from "../../src/gen/join/join_pb.ts";
import { measurementsDigest, parseMeasurements } from "../../src/attestation/measurements.ts";
import {
  type AttestationConfigJson,
  auditLines,
  type JoinCluster,
  nodeCsr,
  startJoinCluster,
} from "../support/join_cluster.ts";
import { expectConnectError } from "../support/connect_error.ts";

/** Asserts that `call` fails with `code` (and a message matching `message`) and the API server saw no request. */
async function assertRejected(
  cluster: JoinCluster,
  call: () => Promise<unknown>,
  code: Code,
  message?: RegExp,
): Promise<ConnectError> {
  const requests = cluster.apiServer.requests.length;
  const error = await expectConnectError(call, code, message);
  assert.deepEqual(cluster.apiServer.requests.slice(requests), [], "the API server was not called");
  return error;
}

Deno.test("the join service process rejects malformed and malicious requests without side effects", async (t) => {
  await using cluster = await startJoinCluster();
  const { client } = cluster.joinService;
  const prepare = (options: { diskUuid?: string; certificateRequest?: Uint8Array } = {}) =>
    cluster.prepareJoinRequest({ diskUuid: crypto.randomUUID(), nodeName: "worker-1", ...options });

  await t.step("attested CSRs a kubelet may not have: InvalidArgument", async () => {
    const cases: [string, Uint8Array, RegExp][] = [
      [
        "a DNS SAN",
        await nodeCsr({ nodeName: "worker-1", ips: ["10.0.0.7"], dnsNames: ["kubernetes.default"] }),
        /may not contain DNS names \(got "kubernetes.default"\)/,
      ],
      [
        "O=system:masters",
        await nodeCsr({ subject: [{ O: ["system:masters"] }, { CN: ["system:node:worker-1"] }] }),
        /organization "system:nodes" but has "system:masters"/,
      ],
      [
        "a CN without the system:node: prefix",
        await nodeCsr({ subject: [{ O: ["system:nodes"] }, { CN: ["worker-1"] }] }),
        /common name prefix "system:node:" but is "worker-1"/,
      ],
      [
        "the API server endpoint's address",
        await nodeCsr({ nodeName: "worker-1", ips: ["10.0.0.7", cluster.apiServerEndpoint.split(":")[0]] }),
        /may not contain 10\.0\.0\.1, the API server endpoint's address$/,
      ],
      [
        "the service network's first address (the API server's Service)",
        await nodeCsr({ nodeName: "worker-1", ips: ["10.96.0.1"] }),
        /may not contain 10\.96\.0\.1, the first address of the service network/,
      ],
      [
        "loopback",
        await nodeCsr({ nodeName: "worker-1", ips: ["::1"] }),
        /may not contain the loopback or unspecified address ::1$/,
      ],
    ];
    for (const [what, certificateRequest, message] of cases) {
      const { request } = await prepare({ certificateRequest });
      const error = await assertRejected(
        cluster,
        () => client.issueJoinTicket(request),
        Code.InvalidArgument,
        message,
      );
      assert.match(error.rawMessage, /^certificate request rejected: /, what);
    }
  });

  await t.step("a wildcard SSH principal: InvalidArgument", async () => {
    for (const principal of ["*", "*.cluster.local", "node-1,node-2"]) {
      const { request } = await cluster.prepareJoinRequest({
        diskUuid: crypto.randomUUID(),
        nodeName: "worker-1",
        hostKey: {
          publicKey: new TextEncoder().encode("ssh-ed25519 AAAA"),
          principals: ["worker-1", principal],
        },
      });
      await assertRejected(
        cluster,
        () => client.issueJoinTicket(request),
        Code.InvalidArgument,
        /contains the pattern character/,
      );
    }
  });

  await t.step(
    "a worker key asking for control-plane files: PermissionDenied, nothing created; granted once the operator lists it",
    async () => {
      const request = { diskUuid: crypto.randomUUID(), nodeName: "control-plane-9", isControlPlane: true };
      const error = await assertRejected(
        cluster,
        () => cluster.requestTicket(request),
        Code.PermissionDenied,
        /may not join as a control plane/,
      );
      assert.ok(!error.rawMessage.includes(cluster.issuer.keyDigest));
      const [refused] = (await auditLines(cluster.joinService)).filter((e) =>
        e.reason === "control-plane-not-allowed"
      );
      assert.equal(refused.keyDigest, cluster.issuer.keyDigest, "the audit line names the refused key");
      assert.equal(refused.role, "control-plane");

      // The operator names the key as a control plane's: the reloaded config lets the same node in.
      const { configGeneration } = await client.getStatus({});
      const listed: AttestationConfigJson = structuredClone(cluster.attestationConfig);
      listed.akTrust = {
        allowedKeyDigests: [cluster.issuer.keyDigest],
        controlPlaneKeyDigests: [cluster.issuer.keyDigest],
      };
      await cluster.writeAttestationConfig(listed);
      await cluster.waitForConfigGeneration(configGeneration + 1n);
      const { ticket } = await cluster.requestTicket(request);
      assert.equal(ticket.controlPlaneFiles.length, 8);

      // And removing it again takes the grant back.
      await cluster.writeAttestationConfig(cluster.attestationConfig);
      await cluster.waitForConfigGeneration(configGeneration + 2n);
      await assertRejected(cluster, () => cluster.requestTicket(request), Code.PermissionDenied);
    },
  );

  await t.step("a message over 256 KiB: a clean error, and the service stays up", async () => {
    const { request } = await prepare();
    request.hostPublicKey = new Uint8Array(300 * 1024);
    const error = await assertRejected(
      cluster,
      () => client.issueJoinTicket(request),
      Code.ResourceExhausted,
    );
    assert.match(error.rawMessage, /message size .* is larger than configured readMaxBytes 262144/);
    assert.equal((await client.getStatus({})).attestationVariant, "qemu-vtpm");
  });

  await t.step("disk UUIDs that name other keys: InvalidArgument, for join and rejoin", async () => {
    for (const diskUuid of ["measurementSecret", "joinServiceNonceKey", "ca_emergency_ssh", "", "../x"]) {
      // The evidence is bound to this very UUID: only the UUID rule can reject it.
      const { request } = await prepare({ diskUuid });
      await assertRejected(
        cluster,
        () => client.issueJoinTicket(request),
        Code.InvalidArgument,
        /^disk_uuid must be a UUID/,
      );
      await assertRejected(
        cluster,
        () => cluster.requestRejoinTicket(diskUuid),
        Code.InvalidArgument,
        /^disk_uuid must be a UUID/,
      );
    }
  });

  await t.step(
    "garbage bytes POSTed as application/proto over HTTP/1.1: a clean error, the service stays up",
    async () => {
      const requests = cluster.apiServer.requests.length;
      const audited = (await auditLines(cluster.joinService)).length;
      // Over HTTP/1.1 (the port serves both): with HTTP/2, a client closing its session at an unlucky moment
      // can abort the whole service in Deno 2.9.6's nghttp2 (README, known limitations), which this step
      // hit twice in about fifteen CI runs. Sent over HTTP/2 it is answered the same way.
      const http1 = Deno.createHttpClient({ caCerts: [cluster.joinCaPem], http1: true, http2: false });
      try {
        const response = await fetch(`${cluster.joinUrl}/join.API/IssueJoinTicket`, {
          method: "POST",
          headers: { "content-type": "application/proto" },
          // Every byte has its continuation bit set: no valid varint, so no valid message.
          body: crypto.getRandomValues(new Uint8Array(4096)).map((b) => b | 0x80),
          client: http1,
        });
        // Connect 2.2 (like grpc-go) classifies an undecodable request message as "internal", before any
        // handler or interceptor runs; the answer is still a clean Connect error naming the decoding failure.
        assert.equal(response.headers.get("content-type"), "application/json");
        assert.deepEqual(await response.json(), {
          code: "internal",
          message: "parse binary: invalid varint",
        });
        assert.equal(response.status, 500);
      } finally {
        http1.close();
      }
      assert.equal((await client.getStatus({})).attestationVariant, "qemu-vtpm");
      assert.equal(cluster.apiServer.requests.length, requests);
      assert.equal((await auditLines(cluster.joinService)).length, audited, "no ticket decision was made");
    },
  );

  await t.step(
    "changed measurements on disk: reloaded, every mismatch named, accepted again when restored",
    async () => {
      const original = cluster.attestationConfig;
      const status = await client.getStatus({});
      assert.equal(status.measurementsDigest, await digestOf(original));
      const changed: AttestationConfigJson = structuredClone(original);
      changed.measurements["4"] = { expected: "aa".repeat(32), warnOnly: false };
      changed.measurements["9"] = { expected: "bb".repeat(32), warnOnly: false };

      await cluster.writeAttestationConfig(changed);
      const reloaded = await cluster.waitForConfigGeneration(status.configGeneration + 1n);
      assert.equal(reloaded.measurementsDigest, await digestOf(changed));
      assert.notEqual(reloaded.measurementsDigest, status.measurementsDigest);
      assert.deepEqual(
        reloaded.measurements.filter((m) => m.index === 4 || m.index === 9).map((
          m,
        ) => [m.expected, m.warnOnly]),
        [["aa".repeat(32), false], ["bb".repeat(32), false]],
      );

      const error = await assertRejected(
        cluster,
        () => cluster.requestTicket({ diskUuid: crypto.randomUUID(), nodeName: "worker-1" }),
        Code.PermissionDenied,
        /measurement-mismatch/,
      );
      for (const [index, expected] of [[4, "aa"], [9, "bb"]] as const) {
        const actual = cluster.pcrs.get(index)!.toHex();
        assert.ok(
          error.rawMessage.includes(
            `PCR[${index}] expected ${expected.repeat(32)}, got ${actual} (enforced)`,
          ),
          error.rawMessage,
        );
      }
      assert.equal(error.rawMessage.match(/PCR\[/g)?.length, 2, error.rawMessage);
      const [rejection] = (await auditLines(cluster.joinService)).filter((e) =>
        e.reason === "measurement-mismatch"
      );
      assert.equal(
        rejection.keyDigest,
        cluster.issuer.keyDigest,
        "the audit line names the rejected node's key",
      );
      assert.equal(
        error.rawMessage.includes(cluster.issuer.keyDigest),
        false,
        "the node is not told its key digest",
      );

      await cluster.writeAttestationConfig(original);
      const restored = await cluster.waitForConfigGeneration(status.configGeneration + 2n);
      assert.equal(restored.measurementsDigest, status.measurementsDigest);
      const { ticket } = await cluster.requestTicket({ diskUuid: crypto.randomUUID(), nodeName: "worker-1" });
      assert.equal(ticket.stateDiskKey.length, 32);
    },
  );

  await t.step("every decision made one audit line; every rejection names its reason and code", async () => {
    const { counters } = await client.getStatus({});
    const decisions = Object.values(counters).reduce((sum, n) => sum + n, 0n);
    const audit = await auditLines(cluster.joinService);
    assert.equal(BigInt(audit.length), decisions);
    const rejected = audit.filter((entry) => entry.outcome === "rejected");
    assert.ok(rejected.length >= 15, `${rejected.length} rejections`);
    for (const entry of rejected) {
      assert.equal(typeof entry.reason, "string");
      assert.ok(["InvalidArgument", "PermissionDenied", "ResourceExhausted"].includes(String(entry.code)));
      if (entry.reason !== "reserved-node-name") {
        assert.equal(entry.nodeName, undefined, "no node name before the CSR is accepted");
      }
    }
    const reasons = new Set(rejected.map((entry) => entry.reason));
    for (
      const reason of [
        "measurement-mismatch",
        "control-plane-not-allowed",
        "csr-rejected",
        "malformed-request",
      ]
    ) {
      assert.ok(reasons.has(reason), `${reason} in ${[...reasons]}`);
    }
  });

  await t.step(
    "a flood of garbage does not spend the ticket budget: attested nodes still get their tickets",
    async () => {
      const budgeted = await cluster.startJoinService({
        flags: ["--rate-global", "0.001", "--burst-global", "3"],
      });
      try {
        const garbage = (i: number) => {
          const fields = { diskUuid: crypto.randomUUID(), certificateRequest: new Uint8Array([0x30, 0x00]) };
          const forgedNonce = {
            nonce: Uint8Array.of(2, ...crypto.getRandomValues(new Uint8Array(88))),
            publicKey: crypto.getRandomValues(new Uint8Array(32)), // not a low-order point: refused earlier
            evidence: { variant: "qemu-vtpm", document: new Uint8Array(64) },
          };
          switch (i % 3) {
            case 0:
              return create(IssueJoinTicketRequestSchema, { ...fields, diskUuid: `garbage-${i}` });
            case 1:
              return create(IssueJoinTicketRequestSchema, fields);
            default:
              return create(IssueJoinTicketRequestSchema, { ...fields, attestation: forgedNonce });
          }
        };
        const reasons = new Map<string, number>();
        for (let batch = 0; batch < 15; batch++) {
          const calls = Array.from(
            { length: 20 },
            (_, i) => budgeted.client.issueJoinTicket(garbage(batch * 20 + i)),
          );
          for (const settled of await Promise.allSettled(calls)) {
            assert.equal(settled.status, "rejected");
          }
        }
        for (const entry of await auditLines(budgeted)) {
          reasons.set(String(entry.reason), (reasons.get(String(entry.reason)) ?? 0) + 1);
        }
        assert.deepEqual(
          Object.fromEntries(reasons),
          { "malformed-request": 100, "evidence-missing": 100, "nonce-bad-mac": 100 },
        );

        for (const nodeName of ["worker-x", "worker-y", "worker-z"]) {
          const { ticket } = await cluster.requestTicket({
            diskUuid: crypto.randomUUID(),
            nodeName,
            service: budgeted,
          });
          assert.equal(ticket.stateDiskKey.length, 32, nodeName);
        }
        await assertRejected(
          cluster,
          () =>
            cluster.requestTicket({ diskUuid: crypto.randomUUID(), nodeName: "worker-4", service: budgeted }),
          Code.ResourceExhausted,
          /global rate limit/,
        );
      } finally {
        assert.equal((await budgeted.stop()).code, 0);
      }
    },
  );

  await t.step(
    "rate limit: the third ticket of a peer within its burst of 2 is ResourceExhausted",
    async () => {
      const limited = await cluster.startJoinService({
        flags: ["--rate-per-peer", "0.01", "--burst-per-peer", "2"],
      });
      try {
        for (const nodeName of ["worker-a", "worker-b"]) {
          await cluster.requestTicket({ diskUuid: crypto.randomUUID(), nodeName, service: limited });
        }
        await assertRejected(
          cluster,
          () =>
            cluster.requestTicket({ diskUuid: crypto.randomUUID(), nodeName: "worker-c", service: limited }),
          Code.ResourceExhausted,
          /rate limit exceeded for this peer/,
        );
      } finally {
        assert.equal((await limited.stop()).code, 0);
      }
    },
  );

  await t.step(
    "server busy: tickets beyond one call in progress and none waiting are refused at once, each audited; challenges unaudited",
    async () => {
      const busy = await cluster.startJoinService({
        flags: ["--max-calls-in-progress", "1", "--max-calls-waiting", "0"],
      });
      try {
        const refused = (error: unknown) => {
          assert.equal(Code[(error as ConnectError).code], "ResourceExhausted", String(error));
          assert.equal(
            (error as ConnectError).rawMessage,
            "server busy: 1 calls in progress and 0 waiting; retry later",
          );
          return "refused";
        };
        // Attested one after the other (a challenge is a call too), then sent at once: the first
        // ticket takes the one slot for longer than the others take to arrive.
        const prepared = [];
        for (let i = 0; i < 8; i++) {
          prepared.push(
            await cluster.prepareJoinRequest({
              diskUuid: crypto.randomUUID(),
              nodeName: `busy-${i}`,
              service: busy,
            }),
          );
        }
        const tickets = await Promise.all(
          prepared.map(({ request }) => busy.client.issueJoinTicket(request).then(() => "issued", refused)),
        );
        assert.ok(tickets.includes("issued"), "the call in progress gets its ticket");
        const refusedDisks = prepared.filter((_, i) => tickets[i] === "refused").map((p) =>
          p.request.diskUuid
        );
        assert.ok(refusedDisks.length > 0, "the others are refused");

        const challenges = await Promise.all(
          Array.from({ length: 50 }, () => busy.client.getChallenge({}).then(() => "issued", refused)),
        );
        assert.ok(challenges.includes("refused"), "challenges beyond the bounds are refused too");

        const audit = await auditLines(busy);
        const serverBusy = audit.filter((line) => line.reason === "server-busy");
        assert.deepEqual(
          serverBusy.map((line) => [line.method, line.peer, line.role, line.code, line.keyDigest]),
          refusedDisks.map(() => ["IssueJoinTicket", "127.0.0.1", "worker", "ResourceExhausted", undefined]),
          "one audit entry per refused ticket, before any attestation work; none for challenges",
        );
        assert.deepEqual(serverBusy.map((line) => line.diskUuid).toSorted(), refusedDisks.toSorted());
        assert.equal(audit.length, tickets.length, "challenges are no decisions");
      } finally {
        assert.equal((await busy.stop()).code, 0);
      }
    },
  );
});

/** The digest of `config`'s measurements, as GetStatus reports it. */
function digestOf(config: AttestationConfigJson): Promise<string> {
  return measurementsDigest(parseMeasurements(config.measurements));
}
