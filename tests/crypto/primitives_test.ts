import assert from "node:assert/strict";
import * as nodeCrypto from "node:crypto";
import { cryptoPrimitives, equalInConstantTime, primitives } from "../../src/crypto/primitives.ts";

const viaNode = cryptoPrimitives(nodeCrypto);
const viaWebCrypto = cryptoPrimitives(undefined);

Deno.test("crypto primitives: the runtime's are node:crypto's (Deno has it built in)", () => {
  assert.equal(primitives.source, "node:crypto");
  assert.equal(viaWebCrypto.source, "WebCrypto");
});

Deno.test("crypto primitives: node:crypto and WebCrypto give the same bytes", async () => {
  for (const size of [0, 1, 31, 64, 65, 400, 3000]) {
    const data = crypto.getRandomValues(new Uint8Array(size));
    const key = crypto.getRandomValues(new Uint8Array(size === 0 ? 32 : size));
    assert.deepEqual(await viaNode.sha256(data), await viaWebCrypto.sha256(data));
    assert.deepEqual(await viaNode.hmacSha256(key, data), await viaWebCrypto.hmacSha256(key, data));
    for (const length of [12, 32, 100]) {
      assert.deepEqual(
        await viaNode.hkdfSha256(key, data, data.subarray(0, 40), length),
        await viaWebCrypto.hkdfSha256(key, data, data.subarray(0, 40), length),
      );
    }
    const aesKey = crypto.getRandomValues(new Uint8Array(32));
    const iv = crypto.getRandomValues(new Uint8Array(12));
    assert.deepEqual(
      await viaNode.aes256GcmEncrypt(aesKey, iv, key, data),
      await viaWebCrypto.aes256GcmEncrypt(aesKey, iv, key, data),
    );
  }
});

Deno.test("crypto primitives: HKDF with more info than node:crypto's hkdfSync takes (1024 bytes)", async () => {
  const ikm = crypto.getRandomValues(new Uint8Array(32));
  for (const size of [1024, 1025, 10_000]) {
    const info = crypto.getRandomValues(new Uint8Array(size));
    assert.deepEqual(
      await viaNode.hkdfSha256(ikm, ikm, info, 32),
      await viaWebCrypto.hkdfSha256(ikm, ikm, info, 32),
    );
  }
});

Deno.test("crypto primitives: known answers (FIPS 180-2, RFC 4231, RFC 5869)", async () => {
  for (const p of [viaNode, viaWebCrypto]) {
    assert.equal(
      (await p.sha256(new TextEncoder().encode("abc"))).toHex(),
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    );
    assert.equal(
      (await p.hmacSha256(new Uint8Array(20).fill(0x0b), new TextEncoder().encode("Hi There"))).toHex(),
      "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
    );
    assert.equal(
      (await p.hkdfSha256(
        new Uint8Array(22).fill(0x0b),
        Uint8Array.fromHex("000102030405060708090a0b0c"),
        Uint8Array.fromHex("f0f1f2f3f4f5f6f7f8f9"),
        42,
      )).toHex(),
      "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
    );
  }
});

Deno.test("crypto primitives: a wrong AES key or IV length is refused, not used", async () => {
  for (const p of [viaNode, viaWebCrypto]) {
    await assert.rejects(
      p.aes256GcmEncrypt(new Uint8Array(31), new Uint8Array(12), new Uint8Array(), new Uint8Array(1)),
    );
  }
});

Deno.test("equalInConstantTime compares bytes and lengths", () => {
  assert.equal(equalInConstantTime(Uint8Array.of(1, 2, 3), Uint8Array.of(1, 2, 3)), true);
  assert.equal(equalInConstantTime(Uint8Array.of(1, 2, 3), Uint8Array.of(1, 2, 4)), false);
  assert.equal(equalInConstantTime(Uint8Array.of(0, 2, 3), Uint8Array.of(1, 2, 3)), false);
  assert.equal(equalInConstantTime(Uint8Array.of(1, 2), Uint8Array.of(1, 2, 3)), false);
  assert.equal(equalInConstantTime(new Uint8Array(), new Uint8Array()), true);
});
