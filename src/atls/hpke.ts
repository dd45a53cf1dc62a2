/**
 * HPKE (RFC 9180) as the attested exchange uses it: base mode,
 * DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-256-GCM, single-shot.
 *
 * The attester generates a fresh key pair per exchange and binds its
 * 32-byte public key into its evidence; the verifier seals the response to
 * that key. Runs in Deno and in browsers.
 *
 * Key generation and opening use `@hpke/core`. Sealing, which a join
 * service does for every ticket, is written out here (RFC 9180 §4.1, §5.1,
 * §5.2): `@hpke/core` makes about twenty WebCrypto calls per seal, each with
 * its own overhead in the runtime; here the X25519 steps are four WebCrypto
 * calls, the key schedule and the AEAD are `src/crypto/primitives.ts`'s
 * (synchronous `node:crypto` in Deno), and the parts that depend on nothing
 * but the suite are computed once. The tests open what it seals with
 * `@hpke/core`.
 *
 * @module
 */
import { Aes256Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import { primitives } from "../crypto/primitives.ts";

/** Length of a serialized X25519 public key and of the encapsulated key. */
export const PUBLIC_KEY_LENGTH = 32;

const suite = new CipherSuite({
  kem: new DhkemX25519HkdfSha256(),
  kdf: new HkdfSha256(),
  aead: new Aes256Gcm(),
});

/** An HPKE key pair whose private key never leaves this process. */
export interface HpkeKeyPair {
  /** Serialized public key (32 bytes). */
  readonly publicKey: Uint8Array<ArrayBuffer>;
  /** The WebCrypto key pair used to open sealed payloads. */
  readonly keys: CryptoKeyPair;
}

/** HPKE context binding: `info` goes into the key schedule, `aad` into the AEAD. */
export interface SealBinding {
  /** HPKE `info`: binds the seal to the protocol, purpose and direction. */
  info: Uint8Array<ArrayBuffer>;
  /** Additional authenticated data: binds the seal to the exchange (its report data). */
  aad: Uint8Array<ArrayBuffer>;
}

/** A single-shot HPKE ciphertext. */
export interface SealedBytes {
  /** The encapsulated key `enc` (32 bytes). */
  encapsulatedKey: Uint8Array<ArrayBuffer>;
  /** The AEAD ciphertext, 16 bytes longer than the plaintext. */
  ciphertext: Uint8Array<ArrayBuffer>;
}

/** Generates a fresh key pair. */
export async function generateKeyPair(): Promise<HpkeKeyPair> {
  const keys = await suite.kem.generateKeyPair();
  const publicKey = new Uint8Array(await suite.kem.serializePublicKey(keys.publicKey));
  return { publicKey, keys };
}

/**
 * Seals `plaintext` to the serialized `publicKey`. Throws when the key is
 * not a usable X25519 public key (wrong length, or a low-order point whose
 * shared secret would be all zero).
 */
export async function seal(
  publicKey: Uint8Array<ArrayBuffer>,
  plaintext: Uint8Array<ArrayBuffer>,
  binding: SealBinding,
): Promise<SealedBytes> {
  if (publicKey.length !== PUBLIC_KEY_LENGTH) {
    throw new RangeError(`HPKE public key must be ${PUBLIC_KEY_LENGTH} bytes, got ${publicKey.length}`);
  }
  // Encap (DHKEM, §4.1): an ephemeral key pair, its Diffie-Hellman with the recipient's key.
  const recipient = await crypto.subtle.importKey("raw", publicKey, X25519, false, []);
  const ephemeral = await crypto.subtle.generateKey(X25519, true, ["deriveBits"]) as CryptoKeyPair;
  const encapsulatedKey = new Uint8Array(await crypto.subtle.exportKey("raw", ephemeral.publicKey));
  const dh = new Uint8Array(
    await crypto.subtle.deriveBits({ name: "X25519", public: recipient }, ephemeral.privateKey, 256),
  );
  if (dh.every((byte) => byte === 0)) throw new RangeError("HPKE public key is a low-order point");
  // shared_secret = LabeledExpand(LabeledExtract("", "eae_prk", dh), "shared_secret", enc ‖ pkR, 32):
  // one HKDF with an empty salt.
  const sharedSecret = await primitives.hkdfSha256(
    labeledIkm(KEM_SUITE_ID, "eae_prk", dh),
    new Uint8Array(),
    labeledInfo(KEM_SUITE_ID, "shared_secret", concat(encapsulatedKey, publicKey), 32),
    32,
  );
  // KeySchedule (§5.1), base mode: key and base_nonce are LabeledExpand(secret, …), where
  // secret = LabeledExtract(shared_secret, "secret", "") — an HKDF salted with the shared secret.
  const context = concat(
    Uint8Array.of(MODE_BASE),
    await pskIdHash,
    await labeledExtract("info_hash", binding.info),
  );
  const [key, baseNonce] = await Promise.all([
    primitives.hkdfSha256(SECRET_IKM, sharedSecret, labeledInfo(HPKE_SUITE_ID, "key", context, 32), 32),
    primitives.hkdfSha256(
      SECRET_IKM,
      sharedSecret,
      labeledInfo(HPKE_SUITE_ID, "base_nonce", context, 12),
      12,
    ),
  ]);
  // Single shot (§6.1): the first message's nonce is base_nonce itself.
  const ciphertext = await primitives.aes256GcmEncrypt(key, baseNonce, binding.aad, plaintext);
  return { encapsulatedKey, ciphertext };
}

const X25519 = { name: "X25519" } as const;
const MODE_BASE = 0x00;
const HPKE_VERSION = new TextEncoder().encode("HPKE-v1");
/** suite_id of the KEM: "KEM" ‖ I2OSP(0x0020, 2), DHKEM(X25519, HKDF-SHA256). */
const KEM_SUITE_ID = concat(new TextEncoder().encode("KEM"), Uint8Array.of(0x00, 0x20));
/** suite_id of the whole suite: "HPKE" ‖ KEM 0x0020 ‖ KDF 0x0001 (HKDF-SHA256) ‖ AEAD 0x0002 (AES-256-GCM). */
const HPKE_SUITE_ID = concat(
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
  return concat(HPKE_VERSION, suiteId, new TextEncoder().encode(label), ikm);
}

/** labeled_info = I2OSP(length, 2) ‖ "HPKE-v1" ‖ suite_id ‖ label ‖ info. */
function labeledInfo(
  suiteId: Uint8Array,
  label: string,
  info: Uint8Array,
  length: number,
): Uint8Array<ArrayBuffer> {
  return concat(
    Uint8Array.of(length >> 8, length & 0xff),
    HPKE_VERSION,
    suiteId,
    new TextEncoder().encode(label),
    info,
  );
}

function concat(...parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(parts.reduce((length, part) => length + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/**
 * Opens a payload sealed to `keyPair`. Throws when the key, `info`, `aad`
 * or any byte of the ciphertext differs from what was sealed.
 */
export async function open(
  keyPair: HpkeKeyPair,
  sealed: SealedBytes,
  binding: SealBinding,
): Promise<Uint8Array<ArrayBuffer>> {
  const plaintext = await suite.open(
    { recipientKey: keyPair.keys, enc: sealed.encapsulatedKey, info: binding.info },
    sealed.ciphertext,
    binding.aad,
  );
  return new Uint8Array(plaintext);
}
