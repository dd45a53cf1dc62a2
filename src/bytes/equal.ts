/**
 * Equality of byte arrays in time that depends on their length only, for
 * secrets and digests.
 *
 * @module
 */

/** Constant-time equality of two byte arrays (of the same length; different lengths are unequal at once). */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i] ^ b[i];
  return diff === 0;
}
