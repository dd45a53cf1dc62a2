/**
 * Token-bucket rate limits: one shared bucket ({@linkcode TokenBucket}), and
 * one bucket per peer group ({@linkcode PeerRateLimiter}).
 *
 * @module
 */
import type { Clock } from "../clock.ts";
import { peerGroup } from "./peer_group.ts";

/** Rate of one bucket. */
export interface Rate {
  /** Sustained requests per second. */
  perSecond: number;
  /** Largest burst. */
  burst: number;
}

/** Options for {@linkcode TokenBucket}. */
export interface TokenBucketOptions {
  /** The bucket's rate and burst. */
  rate: Rate;
  /** Time source. */
  clock: Clock;
}

/** One token bucket, full at start. */
export class TokenBucket {
  readonly #rate: Rate;
  readonly #clock: Clock;
  #tokens: number;
  #updated: number;

  /** A full bucket of `rate`. */
  constructor(options: TokenBucketOptions) {
    this.#rate = options.rate;
    this.#clock = options.clock;
    this.#tokens = options.rate.burst;
    this.#updated = options.clock.now();
  }

  /** Takes one token; false (and nothing taken) when the bucket is empty. */
  take(): boolean {
    this.#refill();
    if (this.#tokens < 1) return false;
    this.#tokens--;
    return true;
  }

  /** Whether the bucket has refilled completely (it then carries no state). */
  get full(): boolean {
    this.#refill();
    return this.#tokens >= this.#rate.burst;
  }

  #refill(): void {
    const now = this.#clock.now();
    const elapsed = Math.max(0, now - this.#updated) / 1000;
    this.#tokens = Math.min(this.#rate.burst, this.#tokens + elapsed * this.#rate.perSecond);
    this.#updated = now;
  }
}

/** Options for {@linkcode PeerRateLimiter}. */
export interface PeerRateLimiterOptions {
  /** Limit per peer group (an IPv4 address or an IPv6 /64, see `peer_group.ts`). */
  perPeer: Rate;
  /** Time source. */
  clock: Clock;
  /** Most peer groups tracked at once; idle full buckets are dropped first. Default 10,000. */
  maxPeers?: number;
}

/** A token bucket per peer group, bounded in how many groups it tracks. */
export class PeerRateLimiter {
  readonly #options: Required<PeerRateLimiterOptions>;
  readonly #buckets = new Map<string, TokenBucket>();

  /** Tracks nothing yet; every group starts with a full bucket. */
  constructor(options: PeerRateLimiterOptions) {
    this.#options = { maxPeers: 10_000, ...options };
  }

  /** How many peer groups have a bucket now; never more than `maxPeers`. */
  get trackedPeers(): number {
    return this.#buckets.size;
  }

  /** Takes one token of the group of `peerAddress`; false (and nothing taken) when it is empty. */
  take(peerAddress: string): boolean {
    const group = peerGroup(peerAddress);
    let bucket = this.#buckets.get(group);
    if (!bucket) {
      if (this.#buckets.size >= this.#options.maxPeers) this.#evict();
      bucket = new TokenBucket({ rate: this.#options.perPeer, clock: this.#options.clock });
      this.#buckets.set(group, bucket);
    }
    return bucket.take();
  }

  /** Drops buckets that have refilled completely (they carry no state), else the oldest. */
  #evict(): void {
    for (const [group, bucket] of this.#buckets) {
      if (bucket.full) this.#buckets.delete(group);
    }
    if (this.#buckets.size >= this.#options.maxPeers) {
      const oldest = this.#buckets.keys().next().value;
      if (oldest !== undefined) this.#buckets.delete(oldest);
    }
  }
}
