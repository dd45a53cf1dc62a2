/**
 * A deterministic generator of test inputs (xorshift32), so that a failing
 * fuzz case can be replayed from its seed.
 *
 * @module
 */

/** A generator from `seed`: each call returns a number from 0 to `n - 1`. */
export function seededRandom(seed: number): (n: number) => number {
  let state = seed || 1;
  return (n) => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) % n;
  };
}
