import assert from "node:assert/strict";
import * as x509 from "../../src/x509/x509.ts";
import { createSelfSignedCertificate } from "../../src/x509/selfsigned.ts";

Deno.test("self-signed serving certificate is an end-entity with the requested names, and its key matches", async () => {
  const { cert, key } = createSelfSignedCertificate({
    commonName: "join-service",
    dnsNames: ["localhost"],
    ipAddresses: ["127.0.0.1"],
  });
  const parsed = new x509.X509Certificate(cert);
  assert.equal(parsed.subject, "CN=join-service");
  assert.equal(await parsed.verify({ signatureOnly: true }), true);
  assert.equal(parsed.getExtension(x509.BasicConstraintsExtension)?.ca, false);
  const san = parsed.getExtension(x509.SubjectAlternativeNameExtension)!;
  assert.deepEqual(san.names.items.map((n) => `${n.type}:${n.value}`), ["dns:localhost", "ip:127.0.0.1"]);
  const privateKey = await crypto.subtle.importKey(
    "pkcs8",
    x509.PemConverter.decodeFirst(key),
    { name: "ECDSA", namedCurve: "P-256" },
    false,
    ["sign"],
  );
  const data = new TextEncoder().encode("proof");
  const signature = await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, privateKey, data);
  const publicKey = await parsed.publicKey.export();
  assert.equal(
    await crypto.subtle.verify({ name: "ECDSA", hash: "SHA-256" }, publicKey, signature, data),
    true,
  );
});
