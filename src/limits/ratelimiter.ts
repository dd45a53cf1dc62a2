/**
 * Token-bucket rate limits: one global bucket and one bucket per peer.
 *
 * @module
 */
import type { Clock } from "../clock.ts";

/** Rate of one bucket. */
export interface Rate {
  /** Sustained requests per second. */
  perSecond: number;
  /** Largest burst. */
  burst: number;
}

/** Options for {@linkcode RateLimiter}. */
export interface RateLimiterOptions {
  /** Limit over all peers. */
  global: Rate;
  /** Limit per peer (e.g. per IP address). */
  perPeer: Rate;
  clock: Clock;
  /** Most peers tracked at once; idle full buckets are dropped first. Default 10,000. */
  maxPeers?: number;
}

/** Which limit refused a request. */
export type RateLimitScope = "global" | "peer";

interface Bucket {
  tokens: number;
  updated: number;
}

/** Admits or refuses requests by token buckets. */
export class RateLimiter {
  readonly #options: Required<RateLimiterOptions>;
  readonly #global: Bucket;
  readonly #peers = new Map<string, Bucket>();

  constructor(options: RateLimiterOptions) {
    this.#options = { maxPeers: 10_000, ...options };
    this.#global = { tokens: options.global.burst, updated: options.clock.now() };
  }

  /** How many peers have a bucket now; never more than `maxPeers`. */
  get trackedPeers(): number {
    return this.#peers.size;
  }

  /**
   * Takes one token for `peer` and one global token. Returns null when
   * admitted, or the scope whose limit refused it (nothing is taken then).
   */
  take(peer: string): RateLimitScope | null {
    const now = this.#options.clock.now();
    const peerBucket = this.#peerBucket(peer, now);
    refill(peerBucket, this.#options.perPeer, now);
    refill(this.#global, this.#options.global, now);
    if (peerBucket.tokens < 1) return "peer";
    if (this.#global.tokens < 1) return "global";
    peerBucket.tokens--;
    this.#global.tokens--;
    return null;
  }

  #peerBucket(peer: string, now: number): Bucket {
    let bucket = this.#peers.get(peer);
    if (bucket) return bucket;
    if (this.#peers.size >= this.#options.maxPeers) this.#evict(now);
    bucket = { tokens: this.#options.perPeer.burst, updated: now };
    this.#peers.set(peer, bucket);
    return bucket;
  }

  /** Drops buckets that have refilled completely (they carry no state), else the oldest. */
  #evict(now: number): void {
    for (const [peer, bucket] of this.#peers) {
      refill(bucket, this.#options.perPeer, now);
      if (bucket.tokens >= this.#options.perPeer.burst) this.#peers.delete(peer);
    }
    if (this.#peers.size >= this.#options.maxPeers) {
      const oldest = this.#peers.keys().next().value;
      if (oldest !== undefined) this.#peers.delete(oldest);
    }
  }
}

function refill(bucket: Bucket, rate: Rate, now: number): void {
  const elapsed = Math.max(0, now - bucket.updated) / 1000;
  bucket.tokens = Math.min(rate.burst, bucket.tokens + elapsed * rate.perSecond);
  bucket.updated = now;
}
