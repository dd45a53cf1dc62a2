/**
 * The HPKE (RFC 9180) seal of `hpke.ts`, written out on WebCrypto: base
 * mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-256-GCM, single-shot.
 *
 * This module is not part of the attested exchange's API (`mod.ts` does not
 * export it). Callers seal with `seal` of `hpke.ts`, which makes a fresh
 * ephemeral key pair for every seal; {@linkcode sealWithEphemeralKey} takes
 * the ephemeral key pair as an argument only so that tests can check the
 * seal against fixed vectors, and refuses a key pair it has sealed with
 * before (a second seal with the same ephemeral key to the same recipient
 * and `info` would reuse the AES-GCM key and nonce).
 *
 * `@hpke/core` makes about twenty WebCrypto calls per seal, each with its
 * own overhead in the runtime; here the X25519 steps are three WebCrypto
 * calls, the key schedule and the AEAD are `src/crypto/primitives.ts`'s
 * (synchronous `node:crypto` in Deno, WebCrypto in a browser), and the
 * parts that depend on nothing but the suite are computed once.
 *
 * @module
 */
import { concatBytes } from "../bytes/concat.ts";
import { primitives } from "../crypto/primitives.ts";
import type { SealBinding, SealedBytes } from "./hpke.ts";

/** Length of a serialized X25519 public key and of the encapsulated key (`Npk`, `Nenc`). */
export const PUBLIC_KEY_LENGTH = 32;

/** Ephemeral private keys sealed with already: each may seal once. */
const usedEphemeralKeys = new WeakSet<CryptoKey>();

/**
 * Seals `plaintext` to the serialized X25519 `publicKey` with the given
 * ephemeral X25519 key pair (RFC 9180 §4.1 Encap with that key, §5.1 key
 * schedule in base mode, §5.2 single-shot Seal). Throws a RangeError when
 * the recipient key is not a usable X25519 public key (wrong length, or a
 * low-order point whose shared secret would be all zero), and an Error when
 * `ephemeral` has sealed before. The messages carry no key bytes.
 *
 * Only for tests with fixed vectors: seal with `seal` of `hpke.ts`.
 */
export async function sealWithEphemeralKey(
  ephemeral: CryptoKeyPair,
  publicKey: Uint8Array,
  plaintext: Uint8Array,
  binding: SealBinding,
): Promise<SealedBytes> {
  if (publicKey.length !== PUBLIC_KEY_LENGTH) {
    throw new RangeError(`HPKE public key must be ${PUBLIC_KEY_LENGTH} bytes, got ${publicKey.length}`);
  }
  if (usedEphemeralKeys.has(ephemeral.privateKey)) {
    throw new Error("HPKE ephemeral key already used: every seal needs a fresh one");
  }
  usedEphemeralKeys.add(ephemeral.privateKey);
  // Copies, taken before the first await: a caller that reuses its buffers while the seal runs must not
  // get a seal over a mix of old and new bytes (pkR in the DH but another pkR in kem_context opens nowhere).
  // WebCrypto copies its inputs the same way.
  const pkR = publicKey.slice();
  const info = binding.info.slice();
  const aad = binding.aad.slice();
  const message = plaintext.slice();

  // Encap (DHKEM, §4.1): the Diffie-Hellman of the ephemeral key with the recipient's key.
  const recipient = await crypto.subtle.importKey("raw", pkR, X25519, false, []);
  const encapsulatedKey = new Uint8Array(await crypto.subtle.exportKey("raw", ephemeral.publicKey));
  let dh: Uint8Array<ArrayBuffer>;
  try {
    dh = new Uint8Array(
      await crypto.subtle.deriveBits({ name: "X25519", public: recipient }, ephemeral.privateKey, 256),
    );
  } catch {
    // WebCrypto refuses an all-zero X25519 output itself (an OperationError that names no cause).
    throw lowOrderPoint();
  }
  // RFC 9180 §7.1.4: the sender, too, must refuse an all-zero shared secret; not every runtime does.
  if (dh.every((byte) => byte === 0)) throw lowOrderPoint();
  // shared_secret = LabeledExpand(LabeledExtract("", "eae_prk", dh), "shared_secret", enc ‖ pkR, 32):
  // one HKDF with an empty salt.
  const sharedSecret = await primitives.hkdfSha256(
    labeledIkm(KEM_SUITE_ID, "eae_prk", dh),
    new Uint8Array(),
    labeledInfo(KEM_SUITE_ID, "shared_secret", concatBytes(encapsulatedKey, pkR), 32),
    32,
  );
  // KeySchedule (§5.1), base mode: key and base_nonce are LabeledExpand(secret, …), where
  // secret = LabeledExtract(shared_secret, "secret", "") — an HKDF salted with the shared secret.
  const context = concatBytes(
    Uint8Array.of(MODE_BASE),
    await pskIdHash,
    await labeledExtract("info_hash", info),
  );
  const [key, baseNonce] = await Promise.all([
    primitives.hkdfSha256(
      SECRET_IKM,
      sharedSecret,
      labeledInfo(HPKE_SUITE_ID, "key", context, AES_256_KEY_LENGTH),
      AES_256_KEY_LENGTH,
    ),
    primitives.hkdfSha256(
      SECRET_IKM,
      sharedSecret,
      labeledInfo(HPKE_SUITE_ID, "base_nonce", context, NONCE_LENGTH),
      NONCE_LENGTH,
    ),
  ]);
  // Single shot (§6.1): the first message's nonce is base_nonce XOR seq with seq 0, base_nonce itself.
  const ciphertext = await primitives.aes256GcmEncrypt(key, baseNonce, aad, message);
  return { encapsulatedKey, ciphertext };
}

function lowOrderPoint(): RangeError {
  return new RangeError("HPKE public key is a low-order X25519 point (the shared secret would be zero)");
}

const X25519 = { name: "X25519" } as const;
const MODE_BASE = 0x00;
/** Nk of AES-256-GCM. */
const AES_256_KEY_LENGTH = 32;
/** Nn of AES-256-GCM. */
const NONCE_LENGTH = 12;
const HPKE_VERSION = new TextEncoder().encode("HPKE-v1");
/** suite_id of the KEM: "KEM" ‖ I2OSP(0x0020, 2), DHKEM(X25519, HKDF-SHA256). */
const KEM_SUITE_ID = concatBytes(new TextEncoder().encode("KEM"), Uint8Array.of(0x00, 0x20));
/** suite_id of the whole suite: "HPKE" ‖ KEM 0x0020 ‖ KDF 0x0001 (HKDF-SHA256) ‖ AEAD 0x0002 (AES-256-GCM). */
const HPKE_SUITE_ID = concatBytes(
  new TextEncoder().encode("HPKE"),
  Uint8Array.of(0x00, 0x20, 0x00, 0x01, 0x00, 0x02),
);

/** The HKDF-Extract key of an empty salt: HMAC-SHA256 pads any key to its block with zeros. */
const EMPTY_SALT = new Uint8Array(32);
/** psk_id_hash of base mode (no PSK ID): the same for every seal. */
const pskIdHash = labeledExtract("psk_id_hash", new Uint8Array());
/** LabeledExtract's input for `secret` in base mode (empty PSK): the same for every seal. */
const SECRET_IKM = labeledIkm(HPKE_SUITE_ID, "secret", new Uint8Array());

/** LabeledExtract("", label, ikm) of the whole suite: HMAC-SHA256 under the empty salt. */
function labeledExtract(label: string, ikm: Uint8Array): Promise<Uint8Array<ArrayBuffer>> {
  return primitives.hmacSha256(EMPTY_SALT, labeledIkm(HPKE_SUITE_ID, label, ikm));
}

/** labeled_ikm = "HPKE-v1" ‖ suite_id ‖ label ‖ ikm. */
function labeledIkm(suiteId: Uint8Array, label: string, ikm: Uint8Array): Uint8Array<ArrayBuffer> {
  return concatBytes(HPKE_VERSION, suiteId, new TextEncoder().encode(label), ikm);
}

/** labeled_info = I2OSP(length, 2) ‖ "HPKE-v1" ‖ suite_id ‖ label ‖ info. */
function labeledInfo(
  suiteId: Uint8Array,
  label: string,
  info: Uint8Array,
  length: number,
): Uint8Array<ArrayBuffer> {
  return concatBytes(
    Uint8Array.of(length >> 8, length & 0xff),
    HPKE_VERSION,
    suiteId,
    new TextEncoder().encode(label),
    info,
  );
}
