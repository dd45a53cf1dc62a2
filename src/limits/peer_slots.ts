/**
 * A cap on things held at once per peer group (e.g. open connections): one
 * host cannot hold more than its share however many addresses it rotates
 * through inside its IPv6 /64.
 *
 * @module
 */
import { peerGroup } from "./peer_group.ts";

/** Counts what each peer group holds, up to `maxPerPeer`. */
export class PeerSlots {
  readonly #maxPerPeer: number;
  readonly #held = new Map<string, number>();

  /** At most `maxPerPeer` held at once by one peer group. */
  constructor(maxPerPeer: number) {
    if (!(maxPerPeer > 0)) throw new RangeError(`a per-peer cap needs a positive limit, got ${maxPerPeer}`);
    this.#maxPerPeer = maxPerPeer;
  }

  /**
   * Takes a slot for the peer at `address` (see {@linkcode peerGroup}):
   * returns the function that gives it back (once; later calls do nothing),
   * or undefined when the peer's group holds all its slots.
   */
  tryTake(address: string): (() => void) | undefined {
    const group = peerGroup(address);
    const held = this.#held.get(group) ?? 0;
    if (held >= this.#maxPerPeer) return undefined;
    this.#held.set(group, held + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = (this.#held.get(group) ?? 1) - 1;
      if (left > 0) this.#held.set(group, left);
      else this.#held.delete(group);
    };
  }

  /** Peer groups holding at least one slot now. */
  get groups(): number {
    return this.#held.size;
  }
}
