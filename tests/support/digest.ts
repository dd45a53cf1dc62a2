/**
 * SHA-256 over concatenated parts, for expected PCR values and the like.
 *
 * @module
 */

/** SHA-256 of `parts` joined in order. */
export async function sha256(...parts: Uint8Array[]): Promise<Uint8Array> {
  const joined = new Uint8Array(parts.reduce((n, part) => n + part.length, 0));
  parts.reduce((offset, part) => (joined.set(part, offset), offset + part.length), 0);
  return new Uint8Array(await crypto.subtle.digest("SHA-256", joined));
}
