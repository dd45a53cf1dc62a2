/**
 * A budget of bytes held at once (e.g. request bodies being buffered): a
 * holder takes bytes as they arrive and gives them all back when done, and
 * a take that would exceed the limit is refused instead of waiting.
 *
 * @module
 */

/** A bounded count of bytes held at once. */
export class ByteBudget {
  readonly #limit: number;
  #held = 0;

  /** A budget of `limit` bytes. */
  constructor(limit: number) {
    if (!(limit > 0)) throw new RangeError(`a byte budget needs a positive limit, got ${limit}`);
    this.#limit = limit;
  }

  /** Bytes held now. */
  get held(): number {
    return this.#held;
  }

  /** Takes `bytes` if they fit; returns false (taking nothing) if they do not. */
  tryTake(bytes: number): boolean {
    if (this.#held + bytes > this.#limit) return false;
    this.#held += bytes;
    return true;
  }

  /** Gives back `bytes` taken earlier. */
  give(bytes: number): void {
    this.#held = Math.max(0, this.#held - bytes);
  }
}
