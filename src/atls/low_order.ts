/**
 * X25519 public keys of low order: a Diffie-Hellman with one of them yields
 * all zeros whatever the other key, so nothing can be sealed to it. The
 * attested exchange refuses them with the request's other structural checks,
 * before the verifier writes anything (the seal would fail only after the
 * ticket's side effects).
 *
 * @module
 */

/**
 * The points of order 1, 2, 4 and 8 on Curve25519 as u-coordinates (little
 * endian), canonical and the non-canonical encodings a 255-bit value allows
 * (p and p+1 for 0 and 1): libsodium's list. X25519 ignores the top bit of
 * the last byte, so it is ignored here too.
 */
const LOW_ORDER_POINTS: readonly Uint8Array[] = [
  "0000000000000000000000000000000000000000000000000000000000000000",
  "0100000000000000000000000000000000000000000000000000000000000000",
  "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
  "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
].map((hex) => Uint8Array.fromHex(hex));

/** Whether the 32-byte X25519 public key `key` is a low-order point (the shared secret would be zero). */
export function isLowOrderX25519(key: Uint8Array): boolean {
  if (key.length !== 32) return false;
  return LOW_ORDER_POINTS.some((point) =>
    point.every((byte, i) => (i === 31 ? key[i] & 0x7f : key[i]) === byte)
  );
}
