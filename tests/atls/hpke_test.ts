import assert from "node:assert/strict";
import { LOW_ORDER_POINTS } from "../support/low_order_points.ts";
import { Aes256Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import { generateKeyPair, open, PUBLIC_KEY_LENGTH, seal } from "../../src/atls/hpke.ts";
import { sealWithEphemeralKey } from "../../src/atls/hpke_seal.ts";
import { sealInfo } from "../../src/atls/reportdata.ts";
import { seededRandom } from "../support/seeded_random.ts";

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

// --- the WebCrypto seal against fixed vectors and against @hpke/core ---

/**
 * RFC 9180 Appendix A.1's ephemeral and recipient keys (base mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256),
 * sealed with this suite's AEAD, AES-256-GCM (A.1 uses AES-128-GCM; no appendix vector has AES-256-GCM
 * with X25519). The expected values were computed by an independent implementation written from the RFC
 * text on Python's hmac/hashlib and pyca/cryptography 48 (X25519, AESGCM), which reproduces A.1's
 * shared_secret, key, base_nonce and sequence-0 ciphertext exactly before it switches the AEAD.
 */
const A1 = {
  skEm: "52c4a758a802cd8b936eceea314432798d5baf2d7e9235dc084ab1b9cfa2f736",
  pkEm: "37fda3567bdbd628e88668c3c8d7e97d1d1253b6d4ea6d44c150f741f1bf4431",
  pkRm: "3948cfe0ad1ddb695d780e59077195da6c56506b027329794ab02bca80815c4d",
  skRm: "4612c550263fc8ad58375df3f557aac531d26850903e55a9f23f21d8534e8ac8",
  info: "4f6465206f6e2061204772656369616e2055726e",
};

interface SealVector {
  label: string;
  info: Uint8Array<ArrayBuffer>;
  aad: Uint8Array<ArrayBuffer>;
  plaintext: Uint8Array<ArrayBuffer>;
  key: string;
  baseNonce: string;
  /** The ciphertext in hex, or its SHA-256 when long. */
  ciphertext?: string;
  ciphertextSha256?: string;
}

const vectors: SealVector[] = [
  {
    label: "A.1 inputs, sequence number 0",
    info: Uint8Array.fromHex(A1.info),
    aad: Uint8Array.fromHex("436f756e742d30"),
    plaintext: Uint8Array.fromHex("4265617574792069732074727574682c20747275746820626561757479"),
    key: "a2863277956ec56c4f9f16b43665870daa2403d0d22baceff6551c4ff35b8528",
    baseNonce: "94fc3a5af015ec686da39ff8",
    ciphertext: "090b7dc225419f7da9e8b460becfbb96a26c7964d79b8010d397fa838530a32a397b14f5776db19ff5e57734e0",
  },
  {
    label: "empty info, aad and plaintext",
    info: new Uint8Array(),
    aad: new Uint8Array(),
    plaintext: new Uint8Array(),
    key: "00b0548eb39b63cda15f469f58c6023ebd3334b2fdadc3c7fec0567dbded28f4",
    baseNonce: "2433ffef6a3882930e222a21",
    ciphertext: "54a49987be6be6dc37cdf0c911263ef4",
  },
  {
    label: "300-byte info, 256-byte aad, 70000-byte plaintext",
    info: new TextEncoder().encode("x".repeat(300)),
    aad: Uint8Array.from({ length: 256 }, (_, i) => i),
    plaintext: Uint8Array.from({ length: 70000 }, (_, i) => i % 251),
    key: "1688f68efa5f1d9da5a712195b86c7cf3abee0fd8a7a8ac5a826f304d20b9c17",
    baseNonce: "9875f599cc3d382786f97e0c",
    ciphertextSha256: "589667e370a45152ad78a56b382d4e79832adb59e3dfa840e4b5abc17e56d738",
  },
];

/** An X25519 key pair from its raw private and public key (PKCS#8 wraps the 32 private bytes). */
async function x25519KeyPair(privateHex: string, publicHex: string): Promise<CryptoKeyPair> {
  const pkcs8 = Uint8Array.fromHex("302e020100300506032b656e04220420" + privateHex);
  return {
    privateKey: await crypto.subtle.importKey("pkcs8", pkcs8, { name: "X25519" }, false, ["deriveBits"]),
    publicKey: await crypto.subtle.importKey(
      "raw",
      Uint8Array.fromHex(publicHex),
      { name: "X25519" },
      true,
      [],
    ),
  };
}

const coreSuite = new CipherSuite({
  kem: new DhkemX25519HkdfSha256(),
  kdf: new HkdfSha256(),
  aead: new Aes256Gcm(),
});

Deno.test("the seal matches fixed vectors (RFC 9180 A.1 keys, AES-256-GCM), and the A.1 recipient opens it", async (t) => {
  const recipient = await x25519KeyPair(A1.skRm, A1.pkRm);
  for (const vector of vectors) {
    await t.step(vector.label, async () => {
      const sealed = await sealWithEphemeralKey(
        await x25519KeyPair(A1.skEm, A1.pkEm),
        Uint8Array.fromHex(A1.pkRm),
        vector.plaintext,
        { info: vector.info, aad: vector.aad },
      );
      assert.equal(sealed.encapsulatedKey.toHex(), A1.pkEm, "enc is the serialized ephemeral public key");
      assert.equal(sealed.ciphertext.length, vector.plaintext.length + 16);
      if (vector.ciphertext) assert.equal(sealed.ciphertext.toHex(), vector.ciphertext);
      else {
        const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", sealed.ciphertext));
        assert.equal(digest.toHex(), vector.ciphertextSha256);
      }
      // The AEAD is AES-256-GCM under the vector's key with base_nonce itself as the nonce (sequence 0).
      const aead = await crypto.subtle.importKey("raw", Uint8Array.fromHex(vector.key), "AES-GCM", false, [
        "decrypt",
      ]);
      const direct = await crypto.subtle.decrypt(
        { name: "AES-GCM", iv: Uint8Array.fromHex(vector.baseNonce), additionalData: vector.aad },
        aead,
        sealed.ciphertext,
      );
      assert.deepEqual(new Uint8Array(direct), vector.plaintext);
      // And @hpke/core, as the recipient of RFC 9180 A.1, opens it.
      const opened = await coreSuite.open(
        { recipientKey: recipient, enc: sealed.encapsulatedKey, info: vector.info },
        sealed.ciphertext,
        vector.aad,
      );
      assert.deepEqual(new Uint8Array(opened), vector.plaintext);
    });
  }
});

function randomBytes(next: (n: number) => number, length: number): Uint8Array<ArrayBuffer> {
  return Uint8Array.from({ length }, () => next(256));
}

Deno.test("with the same ephemeral key, the seal and @hpke/core's sender give the same bytes", async () => {
  const seed = 0x5eed;
  const next = seededRandom(seed);
  for (let i = 0; i < 40; i++) {
    const recipient = await generateKeyPair();
    const ikm = randomBytes(next, 32);
    const ephemeral = await coreSuite.kem.deriveKeyPair(ikm.buffer);
    const info = randomBytes(next, [0, 1, 32, 64, 200][i % 5]);
    const aad = randomBytes(next, [0, 1, 32, 1000][i % 4]);
    const plaintext = randomBytes(next, [0, 1, 15, 16, 17, 255, 4096][i % 7]);
    const ours = await sealWithEphemeralKey(ephemeral, recipient.publicKey, plaintext, { info, aad });
    const sender = await coreSuite.createSenderContext({
      recipientPublicKey: recipient.keys.publicKey,
      info,
      ekm: await coreSuite.kem.deriveKeyPair(ikm.buffer),
    });
    const theirs = new Uint8Array(await sender.seal(plaintext, aad));
    assert.equal(ours.encapsulatedKey.toHex(), new Uint8Array(sender.enc).toHex(), `seed ${seed}, case ${i}`);
    assert.equal(ours.ciphertext.toHex(), theirs.toHex(), `seed ${seed}, case ${i}`);
  }
});

Deno.test("random seals of every size open with @hpke/core, and only with their own info and aad", async () => {
  const seed = 0xc0ffee;
  const next = seededRandom(seed);
  const recipient = await generateKeyPair();
  const sizes = [0, 1, 2, 11, 12, 13, 15, 16, 17, 31, 32, 33, 64, 100, 255, 256, 1024, 4095, 65536, 200_000];
  for (const [i, size] of sizes.entries()) {
    const binding = {
      info: randomBytes(next, next(300)),
      aad: randomBytes(next, i % 3 === 0 ? 0 : next(2000)),
    };
    const plaintext = randomBytes(next, size);
    const sealed = await seal(recipient.publicKey, plaintext, binding);
    assert.deepEqual(await open(recipient, sealed, binding), plaintext, `seed ${seed}, size ${size}`);
    const otherInfo = Uint8Array.of(...binding.info, 0);
    await assert.rejects(
      open(recipient, sealed, { ...binding, info: otherInfo }),
      `seed ${seed}, size ${size}`,
    );
    const otherAad = Uint8Array.of(...binding.aad, 0);
    await assert.rejects(
      open(recipient, sealed, { ...binding, aad: otherAad }),
      `seed ${seed}, size ${size}`,
    );
  }
});

Deno.test("an ephemeral key seals once: a second seal with it is refused", async () => {
  const recipient = await generateKeyPair();
  const ephemeral = await crypto.subtle.generateKey({ name: "X25519" }, false, [
    "deriveBits",
  ]) as CryptoKeyPair;
  await sealWithEphemeralKey(ephemeral, recipient.publicKey, text.encode("a"), binding);
  await assert.rejects(
    sealWithEphemeralKey(ephemeral, recipient.publicKey, text.encode("b"), binding),
    /ephemeral key already used/,
  );
});

Deno.test("seal makes its ephemeral key pair with a non-extractable private key", async () => {
  const generateKey = crypto.subtle.generateKey;
  const extractable: boolean[] = [];
  // deno-lint-ignore no-explicit-any
  (crypto.subtle as any).generateKey = function (algorithm: AlgorithmIdentifier, ...rest: unknown[]) {
    if ((algorithm as Algorithm).name === "X25519") extractable.push(rest[0] as boolean);
    // deno-lint-ignore no-explicit-any
    return (generateKey as any).call(this, algorithm, ...rest);
  };
  try {
    await seal((await generateKeyPair()).publicKey, text.encode("x"), binding);
  } finally {
    crypto.subtle.generateKey = generateKey;
  }
  assert.deepEqual(extractable.slice(-1), [false]);
});

Deno.test("seal uses its inputs as they were when it was called, even if the caller reuses the buffers", async () => {
  const recipient = await generateKeyPair();
  const publicKey = recipient.publicKey.slice();
  const plaintext = text.encode("the ticket");
  const info = binding.info.slice();
  const aad = binding.aad.slice();
  const sealing = seal(publicKey, plaintext, { info, aad });
  for (const buffer of [publicKey, plaintext, info, aad]) buffer.fill(0x55);
  const sealed = await sealing;
  assert.deepEqual(await open(recipient, sealed, binding), text.encode("the ticket"));
});

Deno.test("low-order public keys are refused with a RangeError that says why and carries no key bytes", async () => {
  for (const hex of LOW_ORDER_POINTS) {
    const error = await seal(Uint8Array.fromHex(hex), text.encode("x"), binding).then(
      () => assert.fail(`sealed to the low-order point ${hex}`),
      (error: unknown) => error,
    );
    assert.ok(error instanceof RangeError, `${hex}: ${error}`);
    assert.match(error.message, /low-order/);
    assert.doesNotMatch(error.message, /[0-9a-f]{16}/);
  }
  for (const length of [0, 31, 33, 65]) {
    await assert.rejects(seal(new Uint8Array(length), text.encode("x"), binding), RangeError);
  }
});
