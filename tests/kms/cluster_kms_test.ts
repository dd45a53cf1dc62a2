import assert from "node:assert/strict";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { KmsError } from "../../src/kms/errors.ts";
import { CONSTELLATION_VECTORS, HKDF_FF, RFC5869_A3 } from "./vectors.ts";

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

for (const vector of CONSTELLATION_VECTORS) {
  Deno.test(`ClusterKms.getDek() gives the ${vector.name} vector`, async () => {
    const kms = new ClusterKms(vector.secret, vector.salt);
    assert.equal((await kms.getDek(text(vector.info), vector.length)).toHex(), vector.output);
  });
}

Deno.test("ClusterKms.getDek() gives another key for an upper-cased ID", async () => {
  const kms = new ClusterKms(HKDF_FF.secret, HKDF_FF.salt);
  const upper = await kms.getDek(text(HKDF_FF.info).toUpperCase(), 32);
  assert.equal(upper.length, 32);
  assert.notEqual(upper.toHex(), HKDF_FF.output);
});

Deno.test("ClusterKms rejects the RFC 5869 A.3 vector: its salt is empty", () => {
  assert.throws(() => new ClusterKms(RFC5869_A3.secret, RFC5869_A3.salt), (err) => {
    assert.ok(err instanceof KmsError);
    assert.equal(err.reason, "missing-salt");
    assert.equal(err.message, "missing salt");
    return true;
  });
});

Deno.test("ClusterKms rejects an empty master key", () => {
  assert.throws(() => new ClusterKms(new Uint8Array(0), HKDF_FF.salt), (err) => {
    assert.ok(err instanceof KmsError);
    assert.equal(err.reason, "missing-master-key");
    assert.equal(err.message, "missing master key");
    return true;
  });
});

Deno.test("ClusterKms keeps its own copy of the master key and salt", async () => {
  const secret = HKDF_FF.secret.slice();
  const salt = HKDF_FF.salt.slice();
  const kms = new ClusterKms(secret, salt);
  secret.fill(0);
  salt.fill(0);
  assert.equal((await kms.getDek(text(HKDF_FF.info), 32)).toHex(), HKDF_FF.output);
});

Deno.test("ClusterKms does not show its master key when printed", () => {
  const kms = new ClusterKms(new Uint8Array(32).fill(0x5a), new Uint8Array(32).fill(0x5a));
  for (const shown of [Deno.inspect(kms, { depth: 10, showHidden: true }), JSON.stringify(kms)]) {
    assert.doesNotMatch(shown, /90|5a|Z{4}/i);
  }
});

Deno.test("ClusterKms.getDek() rejects an invalid length", async () => {
  const kms = new ClusterKms(HKDF_FF.secret, HKDF_FF.salt);
  await assert.rejects(kms.getDek("key-x", 8161), { name: "KmsError", reason: "invalid-length" });
});
