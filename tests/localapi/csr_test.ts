/**
 * The local API's kubelet certificate requests: approved and signed only
 * when a bootstrap token user asks the kubelet client signer for client
 * usages; any other request is recorded with its requester and left pending.
 */
import assert from "node:assert/strict";
import { parseKubeletCa } from "../../src/joinservice/kubeletca.ts";
import { BOOTSTRAPPERS_GROUP, type Identity } from "../../src/localapi/bootstrap.ts";
import { approveAndSign, KUBELET_CLIENT_SIGNER } from "../../src/localapi/csr.ts";
import type { JsonObject as Json } from "../../src/localapi/json.ts";
import * as x509 from "../../src/x509/x509.ts";
import { BOOTSTRAP_TOKEN_GROUP } from "../../src/joinservice/bootstraptoken.ts";
import { createTestCa, generateKeyPair } from "../support/pki.ts";

const testCa = await createTestCa("CN=kubernetes");
const ca = await parseKubeletCa(testCa.certPem, testCa.keyPem);
const csrPem = (await x509.Pkcs10CertificateRequestGenerator.create({
  name: "CN=system:node:worker-1, O=system:nodes",
  keys: await generateKeyPair(),
  signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
})).toString("pem");

const bootstrapToken: Identity = {
  user: "system:bootstrap:abcdef",
  groups: [BOOTSTRAPPERS_GROUP, BOOTSTRAP_TOKEN_GROUP],
};

function request(spec: Json = {}): Json {
  return {
    kind: "CertificateSigningRequest",
    metadata: { name: "csr-1" },
    spec: {
      request: new TextEncoder().encode(csrPem).toBase64(),
      signerName: KUBELET_CLIENT_SIGNER,
      usages: ["digital signature", "key encipherment", "client auth"],
      ...spec,
    },
  };
}

Deno.test("a kubelet's client certificate request from a bootstrap token is approved and signed", async () => {
  const csr = await approveAndSign(request(), bootstrapToken, ca);
  const status = csr.status as { conditions: Json[]; certificate: string };
  assert.deepEqual(status.conditions.map((condition) => condition.type), ["Approved"]);
  const certificate = new x509.X509Certificate(
    new TextDecoder().decode(Uint8Array.fromBase64(status.certificate)),
  );
  assert.equal(certificate.subject, "CN=system:node:worker-1, O=system:nodes");
  assert.equal(await certificate.verify({ publicKey: testCa.cert.publicKey }), true);
});

Deno.test("any other certificate request is recorded with who asked and left pending", async (t) => {
  const rows: { name: string; csr: Json; requester: Identity }[] = [
    {
      name: "a user outside system:bootstrappers (a kubelet renewing with its own certificate)",
      csr: request(),
      requester: { user: "system:node:worker-1", groups: ["system:nodes", "system:authenticated"] },
    },
    {
      name: "a user who is only in the token's extra group",
      csr: request(),
      requester: { user: "system:bootstrap:abcdef", groups: [BOOTSTRAP_TOKEN_GROUP] },
    },
    {
      name: "server auth asked for besides client auth",
      csr: request({ usages: ["digital signature", "client auth", "server auth"] }),
      requester: bootstrapToken,
    },
    {
      name: "certificate signing asked for besides client auth",
      csr: request({ usages: ["client auth", "cert sign"] }),
      requester: bootstrapToken,
    },
    {
      name: "no client auth",
      csr: request({ usages: ["digital signature", "key encipherment"] }),
      requester: bootstrapToken,
    },
    {
      name: "usages that are not a list",
      csr: request({ usages: "client auth" }),
      requester: bootstrapToken,
    },
    {
      name: "another signer",
      csr: request({ signerName: "kubernetes.io/kubelet-serving" }),
      requester: bootstrapToken,
    },
    { name: "no request", csr: request({ request: undefined }), requester: bootstrapToken },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const csr = await approveAndSign(row.csr, row.requester, ca);
      assert.equal(csr.status, undefined, "neither approved nor signed");
      const spec = csr.spec as Json;
      assert.equal(spec.username, row.requester.user);
      assert.deepEqual(spec.groups, row.requester.groups);
    });
  }
});

Deno.test("a kubelet client request whose CSR is not one is approved and fails, without a certificate", async (t) => {
  const rows: { name: string; request: string }[] = [
    { name: "not base64 of PEM", request: "%%%" },
    { name: "PEM holding no CSR", request: new TextEncoder().encode("hello").toBase64() },
    {
      name: "a CSR for another subject",
      request: new TextEncoder().encode(
        (await x509.Pkcs10CertificateRequestGenerator.create({
          name: "CN=admin, O=system:masters",
          keys: await generateKeyPair(),
          signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
        })).toString("pem"),
      ).toBase64(),
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const csr = await approveAndSign(request({ request: row.request }), bootstrapToken, ca);
      const status = csr.status as { conditions: Json[]; certificate?: string };
      assert.deepEqual(status.conditions.map((condition) => condition.type), ["Approved", "Failed"]);
      assert.equal(status.conditions[1].reason, "SignerValidationFailure");
      assert.equal(status.certificate, undefined);
    });
  }
});
