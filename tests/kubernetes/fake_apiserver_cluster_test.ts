/**
 * The fake API server as a kubeadm cluster's API server (`pkiDir`): it
 * serves the PKI once it is written, authenticates client certificates from
 * that CA, bootstrap tokens and anonymous users as kube-apiserver does, signs
 * cluster-info for bootstrap tokens and kubelet certificate requests.
 */
import assert from "node:assert/strict";
import type { CertificateSigningRequest } from "kubernetes-types/certificates/v1.d.ts";
import type { Secret } from "kubernetes-types/core/v1.d.ts";
import { bootstrapTokenSecret, generateBootstrapToken } from "../../src/joinservice/bootstraptoken.ts";
import { clusterInfoSignatureKey, verifyClusterInfo } from "../../src/kubernetes/cluster_info_signature.ts";
import { KubernetesClient } from "../../src/kubernetes/client.ts";
import { parseKubeconfig, resolveConnection } from "../../src/kubernetes/kubeconfig.ts";
import { staticToken } from "../../src/kubernetes/token.ts";
import { loadClusterPki } from "../../src/localapi/pki.ts";
import * as x509 from "../../src/x509/x509.ts";
import { type FakeApiServer, startFakeApiServer } from "../support/fake_apiserver.ts";
import {
  createTestCa,
  generateKeyPair,
  issueCert,
  issueLoopbackServerCert,
  type TestCa,
} from "../support/pki.ts";

type Json = Record<string, unknown>;

/** Writes the four files the server waits for, as kubeadm's certs phase would. */
async function writeClusterPki(pkiDir: string): Promise<TestCa> {
  await Deno.mkdir(pkiDir, { recursive: true });
  const ca = await createTestCa("CN=kubernetes");
  const server = await issueLoopbackServerCert(ca, "CN=kube-apiserver");
  await Deno.writeTextFile(`${pkiDir}/ca.key`, ca.keyPem);
  await Deno.writeTextFile(`${pkiDir}/apiserver.key`, server.keyPem);
  await Deno.writeTextFile(`${pkiDir}/apiserver.crt`, server.certPem);
  await Deno.writeTextFile(`${pkiDir}/ca.crt`, ca.certPem);
  return ca;
}

/** GET `path` over TLS trusting `caPem`, with optional client certificate or bearer token. */
async function get(
  server: FakeApiServer,
  caPem: string,
  path: string,
  auth: { cert?: string; key?: string; bearer?: string } = {},
): Promise<{ status: number; body: string }> {
  using client = Deno.createHttpClient({
    caCerts: [caPem],
    ...(auth.cert ? { cert: auth.cert, key: auth.key! } : {}),
  });
  const headers: Record<string, string> = auth.bearer ? { authorization: `Bearer ${auth.bearer}` } : {};
  const response = await fetch(server.url + path, { client, headers });
  return { status: response.status, body: await response.text() };
}

async function adminClient(server: FakeApiServer): Promise<KubernetesClient> {
  return new KubernetesClient(
    await resolveConnection(parseKubeconfig(server.kubeconfig()), { baseDir: "/" }),
  );
}

function tokenClient(server: FakeApiServer, token: string): KubernetesClient {
  return new KubernetesClient({
    server: server.url,
    caPem: server.caPem,
    token: staticToken(token),
    namespace: "default",
  }, { getAttempts: 1 });
}

const CLUSTER_INFO_PATH = "/api/v1/namespaces/kube-public/configmaps/cluster-info";

Deno.test("fake apiserver (pkiDir): drops connections until kubeadm's PKI exists, then serves it", async () => {
  const pkiDir = await Deno.makeTempDir({ prefix: "fake-apiserver-pki-" });
  try {
    await using server = await startFakeApiServer({ pkiDir: `${pkiDir}/pki`, pkiPollMs: 20 });
    assert.throws(() => server.caPem, /no PKI yet/);
    await assert.rejects(
      fetch(`${server.url}/healthz`).then((r) => r.body?.cancel()),
      "no TLS before the PKI exists",
    );
    // The port stays the server's while it takes the PKI: no other listener can take it in between.
    const port = Number(new URL(server.url).port);
    let portTaken = false;
    const serving = server.whenServing({ signal: AbortSignal.timeout(5000) });
    let served = false;
    serving.finally(() => served = true).catch(() => {});
    const ca = await writeClusterPki(`${pkiDir}/pki`);
    while (!served) {
      try {
        Deno.listen({ hostname: "127.0.0.1", port }).close();
        portTaken = true;
      } catch (error) {
        if (!(error instanceof Deno.errors.AddrInUse)) throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, 0));
    }
    await serving;
    assert.equal(portTaken, false, "another listener could bind the port while the PKI was taken");
    assert.equal(server.caPem, ca.certPem);

    const health = await get(server, ca.certPem, "/healthz");
    assert.deepEqual(health, { status: 200, body: "ok" }, "anonymous users may read /healthz");

    const admin = await get(server, ca.certPem, "/api/v1/namespaces/kube-system/secrets/x", {
      cert: server.clientCertPem,
      key: server.clientKeyPem,
    });
    assert.equal(admin.status, 404, "a client certificate from ca.crt is authenticated (404, not 401/403)");

    const foreignCa = await createTestCa("CN=foreign");
    const foreign = await issueCert(foreignCa, { subject: "CN=kubernetes-admin, O=system:masters" });
    const refused = await get(server, ca.certPem, "/api/v1/namespaces/kube-system/secrets/x", {
      cert: foreign.certPem,
      key: foreign.keyPem,
    });
    // As kube-apiserver (anonymous auth fails on an authenticator error): a foreign certificate is 401, not anonymous.
    assert.equal(refused.status, 401, "a foreign certificate fails authentication");
    assert.match(refused.body, /"reason":"Unauthorized"/);

    const chain = await new Promise<string[]>((resolve, reject) => {
      import("node:tls").then((tls) => {
        const socket = tls.connect({
          host: "127.0.0.1",
          port: server.port,
          rejectUnauthorized: false,
          ca: [],
        }, () => {
          const peer = socket.getPeerCertificate(true);
          resolve([peer.subject.CN as string, peer.issuerCertificate?.subject.CN as string]);
          socket.end();
        });
        socket.on("error", reject);
      });
    });
    assert.deepEqual(
      chain,
      ["kube-apiserver", "kubernetes"],
      "apiserver.crt is served with the CA in its chain",
    );
  } finally {
    await Deno.remove(pkiDir, { recursive: true });
  }
});

Deno.test("fake apiserver (pkiDir): a serving key still being written is not served, the finished one is", async (t) => {
  const pkiDir = await Deno.makeTempDir({ prefix: "fake-apiserver-pki-" });
  try {
    await using server = await startFakeApiServer({ pkiDir, pkiPollMs: 20 });
    let served = false;
    server.whenServing().then(() => served = true, () => {});
    const ca = await createTestCa("CN=kubernetes");
    const apiServer = await issueLoopbackServerCert(ca, "CN=kube-apiserver");
    const other = await issueLoopbackServerCert(ca, "CN=kube-apiserver");
    await Deno.writeTextFile(`${pkiDir}/ca.key`, ca.keyPem);
    await Deno.writeTextFile(`${pkiDir}/ca.crt`, ca.certPem);
    await Deno.writeTextFile(`${pkiDir}/apiserver.crt`, apiServer.certPem);
    const unfinished: [string, string, RegExp][] = [
      ["an empty apiserver.key (opened, not yet written)", "", /apiserver\.key: no PEM private key block/],
      [
        "half of apiserver.key",
        apiServer.keyPem.slice(0, apiServer.keyPem.length / 2),
        /apiserver\.key: no PEM private key block/,
      ],
      ["another key than apiserver.crt's", other.keyPem, /apiserver\.key is not the key of the certificate/],
    ];
    for (const [name, text, problem] of unfinished) {
      await t.step(name, async () => {
        await Deno.writeTextFile(`${pkiDir}/apiserver.key`, text);
        assert.match((await loadClusterPki(pkiDir)).problem ?? "", problem);
        await new Promise((resolve) => setTimeout(resolve, 100)); // five polls
        assert.equal(served, false, "the server took a key it cannot serve with");
      });
    }
    await Deno.writeTextFile(`${pkiDir}/apiserver.key`, apiServer.keyPem);
    await server.whenServing({ signal: AbortSignal.timeout(5000) });
    const health = await get(server, ca.certPem, "/healthz");
    assert.deepEqual(health, { status: 200, body: "ok" }, "the finished pair is served");
  } finally {
    await Deno.remove(pkiDir, { recursive: true });
  }
});

Deno.test("fake apiserver (pkiDir): closing before the PKI appears rejects whenServing", async () => {
  const pkiDir = await Deno.makeTempDir({ prefix: "fake-apiserver-pki-" });
  try {
    const server = await startFakeApiServer({ pkiDir, pkiPollMs: 20 });
    const serving = server.whenServing();
    await server.close();
    await assert.rejects(serving, /closed before the cluster PKI appeared/);
  } finally {
    await Deno.remove(pkiDir, { recursive: true });
  }
});

Deno.test("fake apiserver (pkiDir): bootstrap tokens, anonymous users and cluster-info signatures", async (t) => {
  const pkiDir = await Deno.makeTempDir({ prefix: "fake-apiserver-pki-" });
  await using server = await startFakeApiServer({ pkiDir, pkiPollMs: 20 });
  try {
    await writeClusterPki(pkiDir);
    await server.whenServing();
    using admin = await adminClient(server);
    const kubeconfig = "apiVersion: v1\nkind: Config\nclusters: []\n";
    await admin.createConfigMap("kube-public", { metadata: { name: "cluster-info" }, data: { kubeconfig } });
    await admin.createConfigMap("kube-system", { metadata: { name: "kubeadm-config" }, data: { x: "y" } });

    const now = Date.now();
    const tokens = {
      valid: generateBootstrapToken(),
      expired: generateBootstrapToken(),
      signingOnly: generateBootstrapToken(),
      unknown: generateBootstrapToken(),
    };
    const store = async (
      token: typeof tokens.valid,
      expiresAt: Date,
      change: (s: Secret) => void = () => {},
    ) => {
      const secret = bootstrapTokenSecret(token, expiresAt);
      change(secret);
      await admin.createSecret("kube-system", secret);
    };
    await store(tokens.valid, new Date(now + 15 * 60_000));
    await store(tokens.expired, new Date(now - 1000));
    await store(tokens.signingOnly, new Date(now + 15 * 60_000), (secret) => {
      secret.data!["usage-bootstrap-authentication"] = btoa("false");
    });

    await t.step("a valid token is system:bootstrap:<id> and may read kubeadm-config", async () => {
      using client = tokenClient(server, tokens.valid.token);
      const configMap = await client.getConfigMap("kube-system", "kubeadm-config");
      assert.equal(configMap.data?.x, "y");
      assert.equal(server.requests.at(-1)?.user, `system:bootstrap:${tokens.valid.id}`);
    });

    await t.step("kubeadm's RBAC: the token may not read Secrets", async () => {
      using client = tokenClient(server, tokens.valid.token);
      await assert.rejects(client.getSecret("kube-system", "x"), /Forbidden|forbidden/);
    });

    const rejected: [string, string][] = [
      ["an expired token", tokens.expired.token],
      ["a token not allowed to authenticate", tokens.signingOnly.token],
      ["a token without a Secret", tokens.unknown.token],
      ["a known ID with another secret", `${tokens.valid.id}.${"0".repeat(16)}`],
      ["no token format", "not-a-token"],
    ];
    for (const [name, token] of rejected) {
      await t.step(`401 for ${name}`, async () => {
        const answer = await get(
          server,
          server.caPem,
          "/api/v1/namespaces/kube-system/configmaps/kubeadm-config",
          {
            bearer: token,
          },
        );
        assert.equal(answer.status, 401);
        assert.equal((JSON.parse(answer.body) as Json).reason, "Unauthorized");
      });
    }

    await t.step("anonymous users may read cluster-info and nothing else", async () => {
      const denied = await get(
        server,
        server.caPem,
        "/api/v1/namespaces/kube-system/configmaps/kubeadm-config",
      );
      assert.equal(denied.status, 403);
      const answer = await get(server, server.caPem, CLUSTER_INFO_PATH);
      assert.equal(answer.status, 200);
      const data = (JSON.parse(answer.body) as { data: Record<string, string> }).data;
      assert.equal(data.kubeconfig, kubeconfig);
      assert.deepEqual(
        Object.keys(data).filter((k) => k.startsWith("jws-")).sort(),
        [clusterInfoSignatureKey(tokens.signingOnly.id), clusterInfoSignatureKey(tokens.valid.id)].sort(),
        "signatures for unexpired tokens that may sign, none for the expired one",
      );
      const signature = data[clusterInfoSignatureKey(tokens.valid.id)];
      assert.equal(
        await verifyClusterInfo(signature, kubeconfig, tokens.valid.id, tokens.valid.secret),
        true,
      );
      assert.equal(
        await verifyClusterInfo(signature, kubeconfig + " ", tokens.valid.id, tokens.valid.secret),
        false,
      );
      assert.equal(
        await verifyClusterInfo(signature, kubeconfig, tokens.valid.id, tokens.unknown.secret),
        false,
      );
    });

    await t.step("a deleted token's signature disappears", async () => {
      await admin.deleteSecret("kube-system", `bootstrap-token-${tokens.signingOnly.id}`);
      const data = (JSON.parse((await get(server, server.caPem, CLUSTER_INFO_PATH)).body) as Json)
        .data as Json;
      assert.equal(data[clusterInfoSignatureKey(tokens.signingOnly.id)], undefined);
    });

    await t.step("a kubelet's certificate request is approved and signed by the cluster CA", async () => {
      using client = tokenClient(server, tokens.valid.token);
      const keys = await generateKeyPair();
      const csr = await x509.Pkcs10CertificateRequestGenerator.create({
        name: "CN=system:node:worker-1, O=system:nodes",
        keys,
        signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
      });
      const type = { group: "certificates.k8s.io", version: "v1", plural: "certificatesigningrequests" };
      const created = await client.createCustomResource<CertificateSigningRequest>(type, {
        kind: "CertificateSigningRequest",
        metadata: { generateName: "csr-" },
        spec: {
          request: new TextEncoder().encode(csr.toString("pem")).toBase64(),
          signerName: "kubernetes.io/kube-apiserver-client-kubelet",
          usages: ["digital signature", "client auth"],
        },
      });
      assert.equal(created.status?.conditions?.[0].type, "Approved");
      assert.equal(created.spec.username, `system:bootstrap:${tokens.valid.id}`);
      const certificate = new x509.X509Certificate(
        new TextDecoder().decode(Uint8Array.fromBase64(created.status?.certificate ?? "")),
      );
      assert.equal(certificate.subject, "CN=system:node:worker-1, O=system:nodes");
      assert.equal(await certificate.verify({ publicKey: server.ca.cert.publicKey }), true);
      const read = await client.getCustomResource(type, created.metadata!.name!);
      assert.deepEqual(read.status, created.status);

      const kubeletClient = await tlsClientPem(certificate, keys);
      const own = await get(
        server,
        server.caPem,
        `/apis/certificates.k8s.io/v1/certificatesigningrequests/${created.metadata!.name}`,
        kubeletClient,
      );
      assert.equal(own.status, 200, "the signed certificate authenticates, and a kubelet reads its requests");
      assert.equal(server.requests.at(-1)?.user, "system:node:worker-1");
      // A kubelet is no administrator: the master secret and the tokens are not its to read or write.
      for (
        const path of [
          "/api/v1/namespaces/kube-system/secrets",
          "/api/v1/namespaces/kube-system/configmaps/x",
        ]
      ) {
        assert.equal((await get(server, server.caPem, path, kubeletClient)).status, 403, path);
      }
    });
  } finally {
    await Deno.remove(pkiDir, { recursive: true });
  }
});

/** The certificate and key as PEM for a TLS client. */
async function tlsClientPem(
  certificate: x509.X509Certificate,
  keys: CryptoKeyPair,
): Promise<{ cert: string; key: string }> {
  const key = x509.PemConverter.encode(
    await crypto.subtle.exportKey("pkcs8", keys.privateKey),
    "PRIVATE KEY",
  );
  return { cert: certificate.toString("pem"), key };
}

Deno.test("fake apiserver (pkiDir): kubelet certificate requests keep their certificates across a restart; a client's own status is not taken", async () => {
  const pkiDir = await Deno.makeTempDir({ prefix: "fake-apiserver-pki-" });
  const stateDir = await Deno.makeTempDir({ prefix: "fake-apiserver-state-" });
  const type = { group: "certificates.k8s.io", version: "v1", plural: "certificatesigningrequests" };
  const token = generateBootstrapToken();
  const request = async (
    name: string,
    signerName: string,
    status?: CertificateSigningRequest["status"],
  ): Promise<CertificateSigningRequest> => {
    const csr = await x509.Pkcs10CertificateRequestGenerator.create({
      name: `CN=system:node:${name}, O=system:nodes`,
      keys: await generateKeyPair(),
      signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
    });
    return {
      kind: "CertificateSigningRequest",
      metadata: { name },
      spec: {
        request: new TextEncoder().encode(csr.toString("pem")).toBase64(),
        signerName,
        usages: ["digital signature", "client auth"],
      },
      ...(status ? { status } : {}),
    };
  };
  try {
    {
      await using server = await startFakeApiServer({ pkiDir, stateDir, pkiPollMs: 20 });
      await writeClusterPki(pkiDir);
      await server.whenServing();
      using admin = await adminClient(server);
      await admin.createSecret(
        "kube-system",
        bootstrapTokenSecret(token, new Date(Date.now() + 15 * 60_000)),
      );
      using client = tokenClient(server, token.token);
      // At once: another request's save between a request's store and its signing journaled it unsigned.
      await Promise.all(
        Array.from(
          { length: 10 },
          async (_, i) =>
            client.createCustomResource<CertificateSigningRequest>(
              type,
              await request(`worker-${i}`, "kubernetes.io/kube-apiserver-client-kubelet"),
            ),
        ),
      );
      const forged = await client.createCustomResource<CertificateSigningRequest>(
        type,
        await request("forged", "kubernetes.io/kube-apiserver-client", {
          conditions: [{ type: "Approved", status: "True" }],
          certificate: btoa("not a certificate"),
        }),
      );
      assert.equal(forged.status, undefined, "a status the client sent is dropped, as kube-apiserver does");
    }
    await using restarted = await startFakeApiServer({ pkiDir, stateDir, pkiPollMs: 20 });
    await restarted.whenServing();
    using admin = await adminClient(restarted);
    for (let i = 0; i < 10; i++) {
      const csr = await admin.getCustomResource<CertificateSigningRequest>(type, `worker-${i}`);
      assert.ok(csr.status?.certificate, `worker-${i} kept its certificate`);
    }
  } finally {
    await Deno.remove(pkiDir, { recursive: true });
    await Deno.remove(stateDir, { recursive: true });
  }
});
