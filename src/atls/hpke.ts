/**
 * HPKE (RFC 9180) as the attested exchange uses it: base mode,
 * DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-256-GCM, single-shot.
 *
 * The attester generates a fresh key pair per exchange and binds its
 * 32-byte public key into its evidence; the verifier seals the response to
 * that key. Runs on WebCrypto only (Deno and browsers).
 *
 * @module
 */
import { Aes256Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";

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
  const recipientPublicKey = await suite.kem.deserializePublicKey(publicKey);
  const { ct, enc } = await suite.seal({ recipientPublicKey, info: binding.info }, plaintext, binding.aad);
  return { encapsulatedKey: new Uint8Array(enc), ciphertext: new Uint8Array(ct) };
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
