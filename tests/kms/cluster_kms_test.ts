import assert from "node:assert/strict";
import { toHex } from "../../src/attestation/attestation.ts";
import { ClusterKMS } from "../../src/kms/cluster_kms.ts";
import { KmsError } from "../../src/kms/errors.ts";
import { CONSTELLATION_VECTORS, HKDF_FF, RFC5869_A3 } from "./vectors.ts";

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

for (const vector of CONSTELLATION_VECTORS) {
  Deno.test(`ClusterKMS.getDEK() gives the ${vector.name} vector`, async () => {
    const kms = new ClusterKMS(vector.secret, vector.salt);
    assert.equal(toHex(await kms.getDEK(text(vector.info), vector.length)), vector.output);
  });
}

Deno.test("ClusterKMS.getDEK() gives another key for an upper-cased ID", async () => {
  const kms = new ClusterKMS(HKDF_FF.secret, HKDF_FF.salt);
  const upper = await kms.getDEK(text(HKDF_FF.info).toUpperCase(), 32);
  assert.equal(upper.length, 32);
  assert.notEqual(toHex(upper), HKDF_FF.output);
});

Deno.test("ClusterKMS rejects the RFC 5869 A.3 vector: its salt is empty", () => {
  assert.throws(() => new ClusterKMS(RFC5869_A3.secret, RFC5869_A3.salt), (err) => {
    assert.ok(err instanceof KmsError);
    assert.equal(err.code, "missing-salt");
    assert.equal(err.message, "missing salt");
    return true;
  });
});

Deno.test("ClusterKMS rejects an empty master key", () => {
  assert.throws(() => new ClusterKMS(new Uint8Array(0), HKDF_FF.salt), (err) => {
    assert.ok(err instanceof KmsError);
    assert.equal(err.code, "missing-master-key");
    assert.equal(err.message, "missing master key");
    return true;
  });
});

Deno.test("ClusterKMS keeps its own copy of the master key and salt", async () => {
  const secret = HKDF_FF.secret.slice();
  const salt = HKDF_FF.salt.slice();
  const kms = new ClusterKMS(secret, salt);
  secret.fill(0);
  salt.fill(0);
  assert.equal(toHex(await kms.getDEK(text(HKDF_FF.info), 32)), HKDF_FF.output);
});

Deno.test("ClusterKMS does not show its master key when printed", () => {
  const kms = new ClusterKMS(new Uint8Array(32).fill(0x5a), new Uint8Array(32).fill(0x5a));
  for (const shown of [Deno.inspect(kms, { depth: 10, showHidden: true }), JSON.stringify(kms)]) {
    assert.doesNotMatch(shown, /90|5a|Z{4}/i);
  }
});

Deno.test("ClusterKMS.getDEK() rejects an invalid length", async () => {
  const kms = new ClusterKMS(HKDF_FF.secret, HKDF_FF.salt);
  await assert.rejects(kms.getDEK("key-x", 8161), { name: "KmsError", code: "invalid-length" });
});
