/**
 * HPKE (RFC 9180) as the attested exchange uses it: base mode,
 * DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-256-GCM, single-shot.
 *
 * The attester generates a fresh key pair per exchange and binds its
 * 32-byte public key into its evidence; the verifier seals the response to
 * that key. Runs in Deno and in browsers.
 *
 * Key generation and opening use `@hpke/core`. Sealing, which a join
 * service does for every ticket, is written out in `hpke_seal.ts`
 * (RFC 9180 §4.1, §5.1, §5.2) for speed. The tests check it
 * against vectors derived from RFC 9180 Appendix A.1 and open what it seals
 * with `@hpke/core`.
 *
 * @module
 */
import { Aes256Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import { PUBLIC_KEY_LENGTH, sealWithEphemeralKey } from "./hpke_seal.ts";

export { PUBLIC_KEY_LENGTH } from "./hpke_seal.ts";

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
 * Seals `plaintext` to the serialized `publicKey`, with a fresh ephemeral
 * key pair (never used for anything else). Throws a RangeError when the key
 * is not a usable X25519 public key (wrong length, or a low-order point
 * whose shared secret would be all zero); the message carries no key bytes.
 */
export async function seal(
  publicKey: Uint8Array<ArrayBuffer>,
  plaintext: Uint8Array<ArrayBuffer>,
  binding: SealBinding,
): Promise<SealedBytes> {
  if (publicKey.length !== PUBLIC_KEY_LENGTH) {
    throw new RangeError(`HPKE public key must be ${PUBLIC_KEY_LENGTH} bytes, got ${publicKey.length}`);
  }
  // Copies, taken before the first await (as WebCrypto copies its inputs): a caller that reuses its
  // buffers while the seal runs must not get a seal over a mix of old and new bytes.
  const inputs = [publicKey.slice(), plaintext.slice(), {
    info: binding.info.slice(),
    aad: binding.aad.slice(),
  }] as const;
  // The private half is not extractable: nothing needs it after this seal. (WebCrypto always lets the
  // public half be exported, which is `enc`.)
  const ephemeral = await crypto.subtle.generateKey(X25519, false, ["deriveBits"]) as CryptoKeyPair;
  return await sealWithEphemeralKey(ephemeral, ...inputs);
}

const X25519 = { name: "X25519" } as const;

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
