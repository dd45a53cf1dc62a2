import assert from "node:assert/strict";
import { generateKeyPair, open, PUBLIC_KEY_LENGTH, seal } from "../../src/atls/hpke.ts";
import { sealInfo } from "../../src/atls/reportdata.ts";

const text = new TextEncoder();
const binding = { info: sealInfo("rejoin", "response"), aad: crypto.getRandomValues(new Uint8Array(32)) };

// `seal` is written out on WebCrypto, `open` is @hpke/core's: every payload that opens here shows the two
// derive the same key schedule (RFC 9180) from the same inputs.
Deno.test("a sealed payload opens with the recipient's key, info and aad", async () => {
  const recipient = await generateKeyPair();
  assert.equal(recipient.publicKey.length, PUBLIC_KEY_LENGTH);
  const plaintext = text.encode("state disk key");
  const sealed = await seal(recipient.publicKey, plaintext, binding);
  assert.equal(sealed.encapsulatedKey.length, 32);
  assert.equal(sealed.ciphertext.length, plaintext.length + 16);
  assert.deepEqual(await open(recipient, sealed, binding), plaintext);
});

Deno.test("sealing twice to the same key gives different ciphertexts", async () => {
  const recipient = await generateKeyPair();
  const a = await seal(recipient.publicKey, text.encode("x"), binding);
  const b = await seal(recipient.publicKey, text.encode("x"), binding);
  assert.notDeepEqual(a.encapsulatedKey, b.encapsulatedKey);
});

Deno.test("a sealed payload does not open with another key, info, aad or a flipped bit", async () => {
  const recipient = await generateKeyPair();
  const sealed = await seal(recipient.publicKey, text.encode("secret"), binding);
  await assert.rejects(open(await generateKeyPair(), sealed, binding));
  await assert.rejects(open(recipient, sealed, { ...binding, info: sealInfo("join", "response") }));
  await assert.rejects(open(recipient, sealed, { ...binding, aad: new Uint8Array(32) }));
  const tampered = new Uint8Array(sealed.ciphertext);
  tampered[0] ^= 1;
  await assert.rejects(open(recipient, { ...sealed, ciphertext: tampered }, binding));
});

Deno.test("unusable public keys are refused", async () => {
  await assert.rejects(seal(new Uint8Array(31), text.encode("x"), binding), /must be 32 bytes, got 31/);
  // The all-zero point is of low order: the shared secret would be zero.
  await assert.rejects(seal(new Uint8Array(32), text.encode("x"), binding));
});
