/**
 * Signing keys from PEM: P-256 and P-384 keys sign with the hash Go's x509
 * pairs with their curve; other curves and key types, encrypted keys and
 * blocks that are no key are refused with the reason and the source.
 */
import assert from "node:assert/strict";
import { importSigningKey, PrivateKeyError } from "../../src/x509/private_key.ts";
import { readCertificate } from "../../src/x509/certificate.ts";
import { DerError } from "../../src/x509/der.ts";
import { encodePem } from "../../src/x509/pem.ts";
import * as x509 from "../../src/x509/x509.ts";

async function pkcs8Pem(algorithm: EcKeyGenParams | RsaHashedKeyGenParams | Algorithm): Promise<string> {
  const keys = await crypto.subtle.generateKey(algorithm, true, ["sign", "verify"]) as CryptoKeyPair;
  return encodePem(await crypto.subtle.exportKey("pkcs8", keys.privateKey), "PRIVATE KEY");
}

Deno.test("importSigningKey: each curve signs with its own hash", async (t) => {
  const rows: { name: string; pem: string; want: unknown }[] = [
    {
      name: "P-256",
      pem: await pkcs8Pem({ name: "ECDSA", namedCurve: "P-256" }),
      want: { name: "ECDSA", hash: "SHA-256" },
    },
    {
      name: "P-384",
      pem: await pkcs8Pem({ name: "ECDSA", namedCurve: "P-384" }),
      want: { name: "ECDSA", hash: "SHA-384" },
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const key = await importSigningKey(row.pem, "ca.key");
      assert.deepEqual(key.signingAlgorithm, row.want);
      assert.equal(key.privateKey.extractable, false);
      const probe = new Uint8Array(16);
      const signature = await crypto.subtle.sign(key.signingAlgorithm, key.privateKey, probe);
      assert.ok(signature.byteLength > 0);
    });
  }
});

Deno.test("importSigningKey: other curves and types, encrypted keys and non-keys are refused", async (t) => {
  const p256 = await pkcs8Pem({ name: "ECDSA", namedCurve: "P-256" });
  const encrypted = p256.replace(
    "-----BEGIN PRIVATE KEY-----\n",
    "-----BEGIN PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00FF\n\n",
  );
  const rows: { name: string; pem: string; reason: PrivateKeyError["reason"]; message: RegExp }[] = [
    {
      name: "P-521",
      pem: await pkcs8Pem({ name: "ECDSA", namedCurve: "P-521" }),
      reason: "unsupported",
      message: /^ca\.key: unsupported elliptic curve 1\.3\.132\.0\.35$/,
    },
    {
      name: "Ed25519",
      pem: await pkcs8Pem({ name: "Ed25519" }),
      reason: "unsupported",
      message: /^ca\.key: unsupported private key algorithm Ed25519$/,
    },
    {
      name: "an encrypted key (PEM headers), though its bytes are a valid key",
      pem: encrypted,
      reason: "unsupported",
      message: /^ca\.key: PEM headers are not supported \(is the key encrypted\?\)$/,
    },
    { name: "no PEM", pem: "key", reason: "invalid", message: /^no PEM data found in ca\.key$/ },
    {
      name: "a key block of random bytes",
      pem: encodePem(crypto.getRandomValues(new Uint8Array(64)), "PRIVATE KEY"),
      reason: "invalid",
      message: /^ca\.key: /,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      await assert.rejects(importSigningKey(row.pem, "ca.key"), (error) => {
        assert.ok(error instanceof PrivateKeyError, String(error));
        assert.equal(error.reason, row.reason);
        assert.match(error.message, row.message);
        return true;
      });
    });
  }
});

Deno.test("readCertificate: an extension given twice is refused", async () => {
  const keys = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, [
    "sign",
    "verify",
  ]) as CryptoKeyPair;
  const create = (extensions: x509.Extension[]) =>
    x509.X509CertificateGenerator.createSelfSigned({
      name: "CN=twice",
      keys,
      signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
      notBefore: new Date("2026-01-01T00:00:00Z"),
      notAfter: new Date("2027-01-01T00:00:00Z"),
      extensions,
    });
  const once = await create([new x509.BasicConstraintsExtension(false, undefined, true)]);
  assert.equal(readCertificate(once.rawData).extensions.size, 1);
  const twice = await create([
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.BasicConstraintsExtension(true, undefined, true),
  ]);
  assert.throws(() => readCertificate(twice.rawData), DerError);
});
