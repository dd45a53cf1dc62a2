/**
 * The real join service process issuing tickets: worker, control-plane,
 * SSH host certificate and rejoin tickets checked field by field against
 * the cluster's files, the API server's objects and keys derived locally
 * from the master secret; then its metrics, health endpoints, audit log
 * (one line per decision, no secret anywhere) and graceful shutdown.
 */
import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";
import { NONCE_KEY_ID } from "../../src/atls/nonce.ts";
import { deriveKey } from "../../src/kms/hkdf.ts";
import { dataKeyInfo } from "../../src/kms/keys.ts";
import {
  SSH_CA_KEY_ID,
  SSH_CA_SEED_LENGTH,
  SshCa,
  sshPublicKeyFromAuthorizedKey,
} from "../../src/joinservice/sshca.ts";
import * as x509 from "../../src/x509/x509.ts";
import {
  auditLines,
  OBJECT_PATHS,
  type OpenedJoinTicket,
  startJoinCluster,
  type TicketRequestOptions,
} from "../support/join_cluster.ts";
import { opensslVerify } from "../support/openssl.ts";
import { privateKeyToPem } from "../support/pki.ts";
import { sshKeygen } from "../support/ssh_keygen.ts";
import { expectConnectError } from "../support/connect_error.ts";

const HOUR_MS = 3600_000;
/** Slack for times the service took a moment before or after the test (and X.509's whole seconds). */
const SLACK_MS = 60_000;

const decoder = new TextDecoder();

/** Asserts that two times in Unix milliseconds are within {@linkcode SLACK_MS}. */
function assertAbout(actualMs: number, expectedMs: number, what: string): void {
  assert.ok(
    Math.abs(actualMs - expectedMs) <= SLACK_MS,
    `${what}: ${new Date(actualMs).toISOString()}, want about ${new Date(expectedMs).toISOString()}`,
  );
}

/** The decoded `data` of a stored Secret. */
function secretData(secret: Record<string, unknown>): Record<string, string> {
  const data = secret.data as Record<string, string>;
  return Object.fromEntries(
    Object.entries(data).map(([k, v]) => [k, decoder.decode(Uint8Array.fromBase64(v))]),
  );
}

/** The secrets a ticket carries, in every spelling that could leak into a log. */
function secretSpellings(
  ticket: { token?: string; stateDiskKey: Uint8Array; measurementSecret: Uint8Array },
): string[] {
  const spellings: string[] = [];
  if (ticket.token) spellings.push(ticket.token, ticket.token.split(".")[1]);
  for (const key of [ticket.stateDiskKey, ticket.measurementSecret]) {
    spellings.push(key.toHex(), key.toBase64(), key.toBase64().replace(/=+$/, ""));
  }
  return spellings;
}

Deno.test("the join service process issues complete tickets and accounts for every decision", async (t) => {
  await using cluster = await startJoinCluster({ controlPlaneKey: true });
  const seenSecrets: string[] = [];
  const decisions = { issued: 0, rejected: 0 };
  const ticket = async (options: TicketRequestOptions): Promise<OpenedJoinTicket> => {
    const opened = await cluster.requestTicket(options);
    decisions.issued++;
    seenSecrets.push(...secretSpellings(opened.ticket));
    return opened;
  };

  await t.step("worker ticket: every field", async () => {
    const diskUuid = crypto.randomUUID();
    const nodeName = "worker-1";
    const ips = ["10.0.0.7", "fd00::7"];
    const before = Date.now();
    const { ticket: worker } = await ticket({ diskUuid, nodeName, ips });
    const now = Date.now();

    // Kubelet certificate.
    const cert = new x509.X509Certificate(decoder.decode(worker.kubeletCert));
    assert.ok(
      await cert.verify({ publicKey: cluster.clusterCa.keys.publicKey, signatureOnly: true }),
      "the kubelet certificate is signed by the cluster CA key",
    );
    assert.equal(cert.issuer, cluster.clusterCa.cert.subject);
    assert.deepEqual(cert.subjectName.getField("O"), ["system:nodes"]);
    assert.deepEqual(cert.subjectName.getField("CN"), [`system:node:${nodeName}`]);
    const san = cert.getExtension(x509.SubjectAlternativeNameExtension);
    assert.ok(san, "the certificate has a subjectAltName");
    assert.deepEqual(san.names.items.map((n) => [n.type, n.value]), ips.map((ip) => ["ip", ip]));
    const eku = cert.getExtension(x509.ExtendedKeyUsageExtension);
    assert.deepEqual([...eku?.usages ?? []], [x509.ExtendedKeyUsage.clientAuth]);
    assert.equal(cert.getExtension(x509.KeyUsagesExtension)?.usages, x509.KeyUsageFlags.digitalSignature);
    assert.equal(cert.getExtension(x509.BasicConstraintsExtension)?.ca, false);
    assertAbout(cert.notBefore.getTime(), before - 2 * HOUR_MS, "notBefore");
    assertAbout(cert.notAfter.getTime(), now + 8760 * HOUR_MS, "notAfter");

    // Bootstrap token and its Secret.
    assert.match(worker.token, /^[a-z0-9]{6}\.[a-z0-9]{16}$/);
    const [tokenId, tokenSecret] = worker.token.split(".");
    const secret = cluster.apiServer.getObject(OBJECT_PATHS.tokenSecret(tokenId));
    assert.ok(secret, `Secret kube-system/bootstrap-token-${tokenId} exists`);
    assert.equal(secret.type, "bootstrap.kubernetes.io/token");
    const { expiration, ...fields } = secretData(secret);
    assert.deepEqual(fields, {
      "token-id": tokenId,
      "token-secret": tokenSecret,
      "usage-bootstrap-signing": "true",
      "usage-bootstrap-authentication": "true",
      "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
      "description": "Bootstrap token generated by Constellation's Join service",
    });
    assert.match(expiration, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assertAbout(Date.parse(expiration), now + 15 * 60_000, "token expiration");

    // Discovery hash, keys, salt, endpoint, components.
    const spki = new Uint8Array(cluster.clusterCa.cert.publicKey.rawData);
    assert.equal(
      worker.discoveryTokenCaCertHash,
      `sha256:${new Uint8Array(await crypto.subtle.digest("SHA-256", spki)).toHex()}`,
    );
    const expected = await cluster.expectedKeys(diskUuid);
    assert.deepEqual(worker.stateDiskKey, expected.stateDiskKey);
    assert.deepEqual(worker.measurementSecret, expected.measurementSecret);
    assert.deepEqual(
      worker.measurementSecret,
      await deriveKey(cluster.masterSecret, cluster.masterSalt, "key-measurementSecret", 32),
    );
    assert.deepEqual(
      worker.stateDiskKey,
      await deriveKey(cluster.masterSecret, cluster.masterSalt, `key-${diskUuid.toLowerCase()}`, 32),
    );
    assert.deepEqual(worker.measurementSalt, cluster.measurementSalt);
    assert.equal(worker.apiServerEndpoint, cluster.apiServerEndpoint);
    assert.deepEqual(
      worker.kubernetesComponents.map(({ url, hash, installPath, extract }) => ({
        url,
        hash,
        installPath,
        extract,
      })),
      cluster.components,
    );
    assert.equal(worker.kubernetesVersion, "");

    // The JoiningNode record; nothing for control planes or SSH.
    const joining = cluster.apiServer.getObject(OBJECT_PATHS.joiningNode(nodeName));
    assert.ok(joining, `JoiningNode ${nodeName} exists`);
    const spec = joining.spec as Record<string, unknown>;
    assert.deepEqual({ ...spec, deadline: undefined }, {
      name: nodeName,
      componentsreference: cluster.componentsConfigMapName,
      iscontrolplane: false,
      deadline: undefined,
    });
    assertAbout(Date.parse(String(spec.deadline)), now + 48 * HOUR_MS, "JoiningNode deadline");
    assert.equal(worker.controlPlaneFiles.length, 0);
    assert.equal(worker.hostCertificate.length, 0);
    assert.equal(worker.authorizedCaPublicKey.length, 0);
  });

  await t.step(
    "the kubelet certificate is the node's identity at the API server, never a server's",
    async () => {
      const { ticket: worker, kubeletKeys } = await ticket({
        diskUuid: crypto.randomUUID(),
        nodeName: "worker-tls",
        ips: ["10.0.0.8"],
      });
      const certPem = decoder.decode(worker.kubeletCert);
      const caPem = cluster.clusterCa.certPem;
      // OpenSSL's own purpose checks: a client certificate, refused as a TLS server's.
      const asClient = await opensslVerify(caPem, certPem, "sslclient");
      assert.equal(asClient.code, 0, asClient.output);
      const asServer = await opensslVerify(caPem, certPem, "sslserver");
      assert.notEqual(asServer.code, 0, "OpenSSL accepts the kubelet certificate for a TLS server");
      assert.match(asServer.output, /unsuitable certificate purpose/);

      // The API server (the fake, with real TLS client authentication) takes it as system:node:worker-tls.
      const requests = cluster.apiServer.requests.length;
      using client = Deno.createHttpClient({
        caCerts: [caPem],
        cert: certPem,
        key: await privateKeyToPem(kubeletKeys.privateKey),
      });
      const response = await fetch(`${cluster.apiServer.url}${OBJECT_PATHS.configMap("absent")}`, { client });
      await response.body?.cancel();
      assert.equal(response.status, 404);
      assert.deepEqual(cluster.apiServer.requests.slice(requests).map((r) => r.user), [
        "system:node:worker-tls",
      ]);
    },
  );

  await t.step("an upper-case disk UUID gets the key of the lower-case one", async () => {
    const diskUuid = crypto.randomUUID();
    const { ticket: upper } = await ticket({ diskUuid: diskUuid.toUpperCase(), nodeName: "worker-upper" });
    const { ticket: lower } = await ticket({ diskUuid, nodeName: "worker-lower" });
    assert.deepEqual(upper.stateDiskKey, lower.stateDiskKey);
    assert.deepEqual(upper.stateDiskKey, (await cluster.expectedKeys(diskUuid)).stateDiskKey);
  });

  await t.step("control-plane ticket: the eight PKI files and the control-plane JoiningNode", async () => {
    const nodeName = "control-plane-2";
    const { ticket: controlPlane } = await ticket({
      diskUuid: crypto.randomUUID(),
      nodeName,
      ips: ["10.0.0.2"],
      isControlPlane: true,
    });
    const now = Date.now();
    const files = new Map(controlPlane.controlPlaneFiles.map((f) => [f.name, f.data]));
    assert.equal(controlPlane.controlPlaneFiles.length, 8);
    assert.deepEqual([...files.keys()].sort(), [...cluster.controlPlaneFiles.keys()].sort());
    for (const name of cluster.controlPlaneFiles.keys()) {
      assert.deepEqual(files.get(name), await Deno.readFile(`${cluster.paths.pkiDir}/${name}`), name);
    }
    const joining = cluster.apiServer.getObject(OBJECT_PATHS.joiningNode("control-plane"));
    assert.ok(joining, "JoiningNode control-plane exists");
    const spec = joining.spec as Record<string, unknown>;
    assert.equal(spec.iscontrolplane, true);
    assert.equal(spec.name, nodeName);
    assert.equal(spec.componentsreference, cluster.componentsConfigMapName);
    assertAbout(Date.parse(String(spec.deadline)), now + 10 * 60_000, "control-plane JoiningNode deadline");
    assert.equal(cluster.apiServer.getObject(OBJECT_PATHS.joiningNode(nodeName)), undefined);
  });

  await t.step("SSH: ssh-keygen accepts the host certificate, signed by the cluster's SSH CA", async () => {
    const dir = await Deno.makeTempDir({ prefix: "join-ssh-" });
    try {
      await sshKeygen(["-q", "-t", "ed25519", "-N", "", "-C", "host", "-f", `${dir}/host`]);
      const hostPub = await Deno.readTextFile(`${dir}/host.pub`);
      const principals = ["worker-ssh.cluster.local", "10.0.0.9"];
      const { ticket: withSsh } = await ticket({
        diskUuid: crypto.randomUUID(),
        nodeName: "worker-ssh",
        ips: ["10.0.0.9"],
        hostKey: { publicKey: sshPublicKeyFromAuthorizedKey(hostPub), principals },
      });
      await Deno.writeFile(`${dir}/host-cert.pub`, withSsh.hostCertificate);
      await Deno.writeFile(`${dir}/ca.pub`, withSsh.authorizedCaPublicKey);
      const listing = await sshKeygen(["-L", "-f", `${dir}/host-cert.pub`]);
      assert.match(listing, /Type: ssh-ed25519-cert-v01@openssh\.com host certificate/);
      const listed = /Principals:\s*\n((?:\s{16,}\S+\n)+)/.exec(listing)?.[1].trim().split(/\s+/);
      assert.deepEqual(listed, principals, listing);
      const fingerprint = (line: string) => line.split(" ")[1];
      const caFingerprint = fingerprint(await sshKeygen(["-lf", `${dir}/ca.pub`]));
      const hostFingerprint = fingerprint(await sshKeygen(["-lf", `${dir}/host.pub`]));
      assert.ok(listing.includes(`Signing CA: ED25519 ${caFingerprint}`), listing);
      assert.ok(listing.includes(`Public key: ED25519-CERT ${hostFingerprint}`), listing);

      const seed = await deriveKey(
        cluster.masterSecret,
        cluster.masterSalt,
        dataKeyInfo(SSH_CA_KEY_ID),
        SSH_CA_SEED_LENGTH,
      );
      assert.equal(
        decoder.decode(withSsh.authorizedCaPublicKey),
        (await SshCa.fromSeed(seed)).authorizedCaPublicKey(),
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  });

  await t.step(
    "a challenge is good at the replica that issued it only: another replica (same nonce key) refuses it, the issuer accepts it once",
    async () => {
      const replica = await cluster.startJoinService();
      try {
        const prepared = await cluster.prepareJoinRequest({
          diskUuid: crypto.randomUUID(),
          nodeName: "worker-r",
        });
        const requests = cluster.apiServer.requests.length;
        await expectConnectError(
          replica.client.issueJoinTicket(prepared.request),
          Code.PermissionDenied,
          /nonce-other-replica/,
        );
        assert.deepEqual(cluster.apiServer.requests.slice(requests), [], "the other replica wrote nothing");
        const response = await cluster.joinService.client.issueJoinTicket(prepared.request);
        decisions.issued++;
        const opened = await cluster.openJoinTicket(response, prepared.bundle);
        assert.deepEqual(
          opened.stateDiskKey,
          (await cluster.expectedKeys(prepared.request.diskUuid)).stateDiskKey,
        );
        await expectConnectError(
          cluster.joinService.client.issueJoinTicket(prepared.request),
          Code.PermissionDenied,
          /nonce-replayed/,
        );
        decisions.rejected++;
      } finally {
        assert.equal((await replica.stop()).code, 0);
      }
    },
  );

  await t.step("rejoin: the derived keys and the salt, and nothing written to the API server", async () => {
    const diskUuid = crypto.randomUUID();
    const requests = cluster.apiServer.requests.length;
    const rejoin = await cluster.requestRejoinTicket(diskUuid);
    decisions.issued++;
    seenSecrets.push(...secretSpellings(rejoin));
    const expected = await cluster.expectedKeys(diskUuid);
    assert.deepEqual(rejoin.stateDiskKey, expected.stateDiskKey);
    assert.deepEqual(rejoin.measurementSecret, expected.measurementSecret);
    assert.deepEqual(rejoin.measurementSalt, cluster.measurementSalt);
    assert.deepEqual(cluster.apiServer.requests.slice(requests), []);
  });

  await t.step("metrics: decisions by outcome and reason; /healthz on both ports", async () => {
    const prepared = await cluster.prepareJoinRequest({
      diskUuid: crypto.randomUUID(),
      nodeName: "worker-9",
    });
    prepared.request.diskUuid = "not-a-uuid";
    await assert.rejects(cluster.joinService.client.issueJoinTicket(prepared.request));
    decisions.rejected++;

    const metrics = await (await fetch(`${cluster.metricsUrl}/metrics`)).text();
    const issuedJoins = decisions.issued - 1; // one was a rejoin
    assert.ok(
      metrics.includes(
        `join_ticket_decisions_total{method="IssueJoinTicket",outcome="issued",reason=""} ${issuedJoins}\n`,
      ),
      metrics,
    );
    assert.ok(
      metrics.includes(
        `join_ticket_decisions_total{method="IssueRejoinTicket",outcome="issued",reason=""} 1\n`,
      ),
    );
    assert.ok(
      metrics.includes(
        `join_ticket_decisions_total{method="IssueJoinTicket",outcome="rejected",reason="malformed-request"} 1\n`,
      ),
      metrics,
    );
    assert.match(metrics, /join_attestation_verification_seconds_count\{[^}]*variant="qemu-vtpm"[^}]*\} \d+/);

    const health = await fetch(`${cluster.metricsUrl}/healthz`);
    assert.equal(health.status, 200);
    assert.equal(await health.text(), "ok\n");
    using client = Deno.createHttpClient({ caCerts: [cluster.joinCaPem] });
    const joinHealth = await fetch(`${cluster.joinUrl}/healthz`, { client });
    assert.equal(joinHealth.status, 200);
    assert.equal(await joinHealth.text(), "ok\n");
  });

  await t.step("audit: exactly one line per decision, with its fields", async () => {
    const status = await cluster.joinService.client.getStatus({});
    const audit = await auditLines(cluster.joinService);
    assert.equal(audit.length, decisions.issued + decisions.rejected, JSON.stringify(audit, null, 1));
    const issued = audit.filter((entry) => entry.outcome === "issued");
    assert.equal(issued.length, decisions.issued);
    for (const entry of audit) {
      assert.equal(entry.peer, "127.0.0.1");
      assert.equal(entry.variant, "qemu-vtpm");
      assert.equal(entry.measurementsDigest, status.measurementsDigest);
      assert.equal(typeof entry.diskUuid, "string");
      assert.ok(["worker", "control-plane", "rejoin"].includes(entry.role), entry.role);
    }
    for (const entry of issued.filter((e) => e.role !== "rejoin")) {
      assert.match(entry.nodeName ?? "", /^(worker|control-plane)-/);
    }
    for (const entry of issued) {
      assert.equal(
        entry.keyDigest,
        cluster.issuer.keyDigest,
        "the audit line names the node's attestation key",
      );
      assert.match(entry.reportedMeasurementsDigest ?? "", /^[0-9a-f]{64}$/);
    }
    const worker = issued.find((e) => e.nodeName === "worker-1");
    assert.equal(worker?.role, "worker");
    assert.equal(issued.find((e) => e.nodeName === "control-plane-2")?.role, "control-plane");
    const rejected = audit.filter((entry) => entry.outcome === "rejected");
    assert.deepEqual(rejected.map((entry) => entry.reason), ["nonce-replayed", "malformed-request"]);
    assert.equal(rejected[1].diskUuid, "not-a-uuid");
    assert.equal(rejected[1].code, "InvalidArgument");
    assert.equal(rejected[0].code, "PermissionDenied");
  });

  await t.step("no secret in the join service's log", async () => {
    const log = cluster.joinService.process.stderrLines.join("\n");
    // The service's own keys: the SSH CA seed and the nonce MAC key.
    const derived = (id: string) => deriveKey(cluster.masterSecret, cluster.masterSalt, dataKeyInfo(id), 32);
    const keys = [
      cluster.masterSecret,
      cluster.masterSalt,
      await derived(SSH_CA_KEY_ID),
      await derived(NONCE_KEY_ID),
    ];
    const spellings = [...seenSecrets, ...keys.flatMap((key) => [key.toHex(), key.toBase64()])];
    assert.ok(spellings.length >= 30);
    for (const secret of spellings) {
      assert.ok(!log.includes(secret), `the log contains a secret (${secret.length} chars)`);
    }
  });

  await t.step("SIGTERM: the service stops gracefully and exits 0", async () => {
    const status = await cluster.joinService.stop("SIGTERM");
    assert.equal(status.code, 0);
    const messages = cluster.joinService.process.stderrLines.map((line) => JSON.parse(line).msg);
    assert.deepEqual(messages.slice(-2), ["shutting down", "stopped"]);
  });
});
