import assert from "node:assert/strict";
import { discoveryTokenCaCertHash } from "../../src/joinservice/cahash.ts";
import { KubeletCaError } from "../../src/joinservice/kubeletca.ts";
import { opensslOk } from "../support/openssl.ts";

async function selfSignedCa(): Promise<string> {
  const key = new TextDecoder().decode(
    await opensslOk(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"], ""),
  );
  return new TextDecoder().decode(
    await opensslOk(
      ["req", "-x509", "-new", "-key", "/dev/stdin", "-subj", "/CN=kubernetes", "-days", "1"],
      key,
    ),
  );
}

/** kubeadm's documented recipe: sha256 of the DER public key, via openssl. */
async function opensslPin(certPem: string): Promise<string> {
  const publicKeyPem = await opensslOk(["x509", "-pubkey", "-noout"], certPem);
  const der = await opensslOk(["pkey", "-pubin", "-outform", "DER"], publicKeyPem);
  const digest = new TextDecoder().decode(await opensslOk(["dgst", "-sha256", "-r"], der));
  return `sha256:${digest.split(" ")[0]}`;
}

const first = await selfSignedCa();
const second = await selfSignedCa();

Deno.test("the CA cert hash is sha256 of the first certificate's SubjectPublicKeyInfo", async () => {
  const hash = await discoveryTokenCaCertHash(first);
  assert.match(hash, /^sha256:[0-9a-f]{64}$/);
  assert.equal(hash, await opensslPin(first));
  assert.equal(await discoveryTokenCaCertHash(`${first}\n${second}`), hash);
  assert.notEqual(await discoveryTokenCaCertHash(second), hash);
});

Deno.test("the CA cert hash needs a certificate", async () => {
  await assert.rejects(
    discoveryTokenCaCertHash("", "admin.conf certificate-authority-data"),
    new KubeletCaError(
      "ca-certificate-invalid",
      "no PEM data found in admin.conf certificate-authority-data",
    ),
  );
  await assert.rejects(
    discoveryTokenCaCertHash("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
    new KubeletCaError("ca-certificate-invalid", "ca.crt: CERTIFICATE is not a valid X.509 certificate"),
  );
});
