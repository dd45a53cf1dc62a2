import assert from "node:assert/strict";
import { DummyIssuer, DummyValidator } from "../../src/attestation/dummy.ts";
import { checkTicket, JoinTicketApplier } from "../../src/bootstrapper/apply_ticket.ts";
import { AttestedTicketSource, TicketError } from "../../src/bootstrapper/join_ticket_source.ts";
import { JoinClient, kubeletCredentials } from "../../src/bootstrapper/joinclient.ts";
import { deriveClusterId } from "../../src/kms/keys.ts";
import { silentLogger } from "../../src/log/logger.ts";
import * as x509 from "../../src/x509/x509.ts";
import { MEASUREMENT_SECRET, startJoinFixture, stateDiskKeyFor } from "../atls/join_fixture.ts";
import { type AttestationConfigJson, startJoinCluster } from "../support/join_cluster.ts";
import { createTestCa } from "../support/pki.ts";
import { fakeOs, ManualTimers, recordingLogger } from "./support.ts";

const DISK_UUID = "6f0d8e2a-3c1b-4a5e-9f7d-2b8c4e6a1d3f";

/** A join ticket for a node `name` at `ip`. */
async function joinTicket(
  source: AttestedTicketSource,
  endpoint: string,
  name: string,
  ip: string,
  isControlPlane: boolean,
) {
  const { csr } = kubeletCredentials(name, [ip]);
  return await source.joinTicket(endpoint, { diskUuid: DISK_UUID, certificateRequest: csr, isControlPlane });
}

async function rejected(promise: Promise<unknown>): Promise<TicketError> {
  const error = await promise.then(() => assert.fail("got a ticket"), (e) => e);
  assert.ok(error instanceof TicketError, String(error));
  return error;
}

Deno.test("attested ticket source against the real join service (qemu-vtpm on swtpm)", async (t) => {
  await using cluster = await startJoinCluster({ controlPlaneKey: true });
  const endpoint = new URL(cluster.joinUrl).host;
  const verified = new AttestedTicketSource({ issuer: cluster.issuer, caCerts: [cluster.joinCaPem] });
  const unverified = new AttestedTicketSource({ issuer: cluster.issuer });
  const expected = await cluster.expectedKeys(DISK_UUID);

  await t.step("a worker ticket, the server verified against its CA", async () => {
    const ticket = await joinTicket(verified, endpoint, "worker-1", "10.0.0.7", false);
    assert.deepEqual(ticket.stateDiskKey, expected.stateDiskKey);
    assert.deepEqual(ticket.measurementSecret, expected.measurementSecret);
    assert.deepEqual(ticket.measurementSalt, cluster.measurementSalt);
    assert.equal(ticket.apiServerEndpoint, cluster.apiServerEndpoint);
    assert.deepEqual(checkTicket(ticket, "Worker"), [], "the applier accepts the real ticket");
    const cert = new x509.X509Certificate(new TextDecoder().decode(ticket.kubeletCert));
    assert.equal(cert.subject, "O=system:nodes, CN=system:node:worker-1");
  });

  await t.step("a control-plane ticket without server verification (the default)", async () => {
    const ticket = await joinTicket(unverified, endpoint, "cp-1", "10.0.0.2", true);
    assert.equal(checkTicket(ticket, "ControlPlane").length, 8);
  });

  await t.step("a service whose certificate is not from the configured CA is refused", async () => {
    const otherCa = await createTestCa("CN=another-ca");
    const source = new AttestedTicketSource({ issuer: cluster.issuer, caCerts: [otherCa.certPem] });
    await rejected(source.rejoinTicket(endpoint, DISK_UUID));
  });

  await t.step("a rejoin ticket", async () => {
    const ticket = await verified.rejoinTicket(endpoint, DISK_UUID);
    assert.deepEqual(ticket.stateDiskKey, expected.stateDiskKey);
    assert.deepEqual(ticket.measurementSecret, expected.measurementSecret);
  });

  await t.step(
    "measurements that do not match: the error carries the reason and names the PCRs",
    async () => {
      const { configGeneration } = await cluster.joinService.client.getStatus({});
      const changed: AttestationConfigJson = structuredClone(cluster.attestationConfig);
      changed.measurements["4"] = { expected: "00".repeat(32), warnOnly: false };
      await cluster.writeAttestationConfig(changed);
      await cluster.waitForConfigGeneration(configGeneration + 1n);
      try {
        const error = await rejected(verified.rejoinTicket(endpoint, DISK_UUID));
        assert.equal(error.reason, "measurement-mismatch");
        assert.match(
          error.message,
          new RegExp(`PCR\\[4\\] expected ${"00".repeat(32)}, got [0-9a-f]{64} \\(enforced\\)`),
        );
      } finally {
        await cluster.writeAttestationConfig(cluster.attestationConfig);
        await cluster.waitForConfigGeneration(configGeneration + 2n);
      }
    },
  );

  await t.step("the join client joins through the real join service (OS effects faked)", async () => {
    const log = recordingLogger();
    const os = await fakeOs({ logger: log.logger, timers: new ManualTimers() });
    try {
      const port = Number(new URL(cluster.joinUrl).port);
      const client = new JoinClient({
        metadata: {
          self: () =>
            Promise.resolve({ name: "worker-2", providerId: "", role: "Worker", vpcIp: "10.0.0.8" }),
          peers: () =>
            Promise.resolve([{ name: "cp-0", providerId: "", role: "ControlPlane", vpcIp: "127.0.0.1" }]),
        },
        tickets: verified,
        disk: { uuid: () => Promise.resolve(DISK_UUID) },
        applier: new JoinTicketApplier(os.deps),
        logger: log.logger,
      }, { joinServicePort: port, retryIntervalMs: 50 });
      const outcome = await client.run();
      assert.equal(outcome.status, "joined");
      assert.deepEqual(
        outcome.status === "joined" && outcome.clusterId,
        await deriveClusterId(expected.measurementSecret, cluster.measurementSalt),
      );
      assert.deepEqual(os.passphrases, [expected.stateDiskKey]);
      assert.equal(os.joins[0].apiServerEndpoint, cluster.apiServerEndpoint);
      assert.equal(os.installed[0].length, cluster.components.length);
      const cert = new x509.X509Certificate(await Deno.readTextFile(os.deps.paths.kubeletCert));
      assert.equal(cert.subject, "O=system:nodes, CN=system:node:worker-2");
    } finally {
      await Deno.remove(os.root, { recursive: true });
    }
  });
});

Deno.test("attested ticket source, dummy variant, against the fixture join service", async () => {
  await using fixture = await startJoinFixture(new DummyValidator(silentLogger));
  const source = new AttestedTicketSource({
    issuer: new DummyIssuer(silentLogger),
    caCerts: [fixture.caPem],
  });
  const rejoin = await source.rejoinTicket(fixture.endpoint, DISK_UUID);
  assert.deepEqual(rejoin.stateDiskKey, stateDiskKeyFor(DISK_UUID));
  assert.deepEqual(rejoin.measurementSecret, MEASUREMENT_SECRET);
  const ticket = await joinTicket(source, fixture.endpoint, "worker-1", "10.0.0.7", false);
  assert.deepEqual(ticket.stateDiskKey, stateDiskKeyFor(DISK_UUID));
  assert.deepEqual(fixture.verified.map((v) => v.purpose), ["rejoin", "join"]);
});
