/**
 * X25519 public keys of small order, as the tests' own list (not the one in
 * src/atls/low_order.ts, which they check): canonical encodings, the
 * non-canonical ones a 255-bit value allows, each also with the top bit set
 * (which X25519 ignores). Every one gives an all-zero shared secret.
 *
 * @module
 */

const CANONICAL = [
  "0000000000000000000000000000000000000000000000000000000000000000",
  "0100000000000000000000000000000000000000000000000000000000000000",
  "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
  "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
];

/** Every low-order encoding, hex. */
export const LOW_ORDER_POINTS: readonly string[] = CANONICAL.flatMap((hex) => {
  const high = Uint8Array.fromHex(hex);
  high[31] |= 0x80;
  return [hex, high.toHex()];
});
