/**
 * HKDF-SHA256 (RFC 5869) key derivation, synchronous in Deno
 * (`src/crypto/primitives.ts`): the key service derives a key per call, and
 * WebCrypto's two calls (import, derive) each went to the runtime's thread
 * pool and back, which cost more than the derivation itself.
 *
 * @module
 */
import { primitives } from "../crypto/primitives.ts";
import { KmsError } from "./errors.ts";

/** The largest key HKDF-SHA256 can derive: 255 blocks of 32 bytes. */
export const MAX_DERIVED_KEY_LENGTH = 255 * 32;

const encoder = new TextEncoder();

/**
 * Derives `length` bytes with HKDF-SHA256: extract with `salt` (an empty salt
 * counts as 32 zero bytes, per the RFC), then expand with `info` (a string is
 * encoded as UTF-8).
 *
 * The length is checked before anything is allocated, so a hostile length
 * (up to 2^32 from the wire) costs nothing.
 *
 * @throws {KmsError} `invalid-length` unless `length` is an integer from 1 to
 * {@linkcode MAX_DERIVED_KEY_LENGTH}.
 */
export function deriveKey(
  secret: Uint8Array,
  salt: Uint8Array,
  info: string | Uint8Array,
  length: number,
): Promise<Uint8Array<ArrayBuffer>> {
  return Promise.try(() => {
    checkKeyLength(length);
    return primitives.hkdfSha256(
      secret,
      salt,
      typeof info === "string" ? encoder.encode(info) : info,
      length,
    );
  });
}

/**
 * Checks that `length` is a derivable key length.
 *
 * @throws {KmsError} `invalid-length` otherwise.
 */
export function checkKeyLength(length: number): void {
  if (!Number.isInteger(length)) {
    throw new KmsError("invalid-length", `invalid key length ${length}: want a whole number of bytes`);
  }
  if (length < 1) throw new KmsError("invalid-length", `invalid key length ${length}: want at least 1 byte`);
  if (length > MAX_DERIVED_KEY_LENGTH) {
    throw new KmsError(
      "invalid-length",
      `invalid key length ${length}: HKDF-SHA256 derives at most ${MAX_DERIVED_KEY_LENGTH} bytes`,
    );
  }
}
