import assert from "node:assert/strict";
import { KmsError } from "../../src/kms/errors.ts";
import { deriveKey, MAX_DERIVED_KEY_LENGTH } from "../../src/kms/hkdf.ts";
import { CONSTELLATION_VECTORS, HKDF_FF, RFC5869_VECTORS } from "./vectors.ts";

for (const vector of [...CONSTELLATION_VECTORS, ...RFC5869_VECTORS]) {
  Deno.test(`deriveKey() gives the ${vector.name} vector`, async () => {
    const key = await deriveKey(vector.secret, vector.salt, vector.info, vector.length);
    assert.equal(key.toHex(), vector.output);
  });
}

Deno.test("deriveKey() encodes string info as UTF-8", async () => {
  const info = new TextDecoder().decode(HKDF_FF.info);
  assert.equal((await deriveKey(HKDF_FF.secret, HKDF_FF.salt, info, 32)).toHex(), HKDF_FF.output);
});

Deno.test("deriveKey() is deterministic and depends on the info", async () => {
  const { secret, salt } = HKDF_FF;
  const a = await deriveKey(secret, salt, "key-a", 32);
  assert.deepEqual(await deriveKey(secret, salt, "key-a", 32), a);
  assert.notDeepEqual(await deriveKey(secret, salt, "key-b", 32), a);
});

Deno.test("deriveKey() is case-sensitive in the info", async () => {
  const info = new TextDecoder().decode(HKDF_FF.info).toUpperCase();
  const key = await deriveKey(HKDF_FF.secret, HKDF_FF.salt, info, 32);
  assert.notEqual(key.toHex(), HKDF_FF.output);
});

Deno.test("deriveKey() derives up to 8160 bytes, a prefix of the longest output", async () => {
  assert.equal(MAX_DERIVED_KEY_LENGTH, 8160);
  const longest = await deriveKey(HKDF_FF.secret, HKDF_FF.salt, HKDF_FF.info, 8160);
  assert.equal(longest.length, 8160);
  assert.equal(longest.subarray(0, 32).toHex(), HKDF_FF.output);
  assert.equal((await deriveKey(HKDF_FF.secret, HKDF_FF.salt, HKDF_FF.info, 1)).length, 1);
});

Deno.test("deriveKey() rejects lengths above 8160 with a clear error", async () => {
  for (const length of [8161, 2 ** 32 - 1, 2 ** 53]) {
    await assert.rejects(deriveKey(HKDF_FF.secret, HKDF_FF.salt, "key-x", length), (err) => {
      assert.ok(err instanceof KmsError);
      assert.equal(err.reason, "invalid-length");
      assert.match(err.message, new RegExp(`^invalid key length ${length}: .*at most 8160 bytes$`));
      return true;
    });
  }
});

Deno.test("deriveKey() rejects zero, negative and fractional lengths", async () => {
  for (const length of [0, -1, 1.5, Number.NaN, Infinity]) {
    await assert.rejects(deriveKey(HKDF_FF.secret, HKDF_FF.salt, "key-x", length), (err) => {
      assert.ok(err instanceof KmsError);
      assert.equal(err.reason, "invalid-length");
      assert.match(err.message, /^invalid key length .*: want (at least 1 byte|a whole number of bytes)$/);
      return true;
    });
  }
});
