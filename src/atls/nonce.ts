/**
 * Stateless challenge nonces for the attested exchange
 * (docs/attested-exchange.md, "Nonces").
 *
 * A nonce is `version (1 byte, 0x02) ‖ expiry (u64 BE, Unix ms) ‖ replica
 * ID (16 bytes) ‖ 32 random bytes ‖ HMAC-SHA256(key, preceding 57 bytes)`,
 * 89 bytes in all. Every replica of the verifier holds the same key (derived
 * from the master secret through the key service under
 * {@linkcode NONCE_KEY_ID}), so a replica can tell a nonce of its cluster
 * from a forged one; but it accepts only the nonces it issued itself since
 * it started (its replica ID is random per start), each once until it
 * expires, remembering consumed nonces in a bounded set. A request recorded
 * on the wire can therefore not be replayed at another replica, nor at the
 * same one after a restart (which forgot what it consumed). An attester
 * sends its request to the replica it got the challenge from: the same
 * connection.
 *
 * @module
 */
import type { Clock } from "../clock.ts";
import { equalInConstantTime, primitives } from "../crypto/primitives.ts";
import { ExchangeError } from "./errors.ts";

/** Version byte of the nonce format. */
export const NONCE_VERSION = 2;
/** Length of the replica ID. */
export const NONCE_REPLICA_ID_LENGTH = 16;
/** Length of the random part. */
export const NONCE_RANDOM_LENGTH = 32;
/** Length of the HMAC-SHA256 tag. */
export const NONCE_TAG_LENGTH = 32;
/** Where the replica ID starts: after the version and the expiry. */
const REPLICA_ID_OFFSET = 1 + 8;
/** Where the random part starts. */
const RANDOM_OFFSET = REPLICA_ID_OFFSET + NONCE_REPLICA_ID_LENGTH;
/** Length of the MAC'd body: version, expiry, replica ID, random part. */
const BODY_LENGTH = RANDOM_OFFSET + NONCE_RANDOM_LENGTH;
/** Version 1, whose nonces (73 bytes, no replica ID) every replica accepted: a replica of an older version made it. */
const LEGACY_NONCE_VERSION = 1;
const LEGACY_NONCE_LENGTH = 73;
/** Length of a whole nonce (89 bytes). */
export const NONCE_LENGTH: number = BODY_LENGTH + NONCE_TAG_LENGTH;
/** Length of the nonce MAC key. */
export const NONCE_KEY_LENGTH = 32;
/** Key ID under which the nonce key is derived from the master secret by the key service. */
export const NONCE_KEY_ID = "joinServiceNonceKey";
/** Default nonce lifetime: 2 minutes. */
export const DEFAULT_NONCE_LIFETIME_MS = 2 * 60 * 1000;
/** Default bound on consumed nonces remembered per replica. */
export const DEFAULT_MAX_TRACKED_NONCES = 65_536;
/** Default tolerance for this replica's clock being stepped back. */
export const DEFAULT_MAX_CLOCK_SKEW_MS = 30_000;

/** Options for {@linkcode ChallengeNonces}. */
export interface ChallengeNoncesOptions {
  /** The nonce MAC key shared by all replicas, 32 bytes. Copied. */
  key: Uint8Array;
  /**
   * This replica's ID, 16 bytes: only nonces carrying it are accepted.
   * Default: random, so that every instance (every start of a replica)
   * accepts only its own nonces. Copied.
   */
  replicaId?: Uint8Array;
  /** Source of the current time. */
  clock: Clock;
  /** How long an issued nonce stays valid; default 2 minutes. */
  lifetimeMs?: number;
  /** Most consumed nonces remembered (each until its expiry plus `maxClockSkewMs`); default 65,536. */
  maxTracked?: number;
  /**
   * How far this replica's clock may be stepped back: a nonce expiring later
   * than now + lifetime + this is rejected as not yet valid. Also how long
   * past its expiry a consumed nonce is remembered, so this clock stepping
   * back by up to this much cannot make it acceptable again. Default 30 s.
   */
  maxClockSkewMs?: number;
}

/** A freshly issued nonce. */
export interface IssuedNonce {
  /** The opaque nonce to hand to the attester. */
  nonce: Uint8Array<ArrayBuffer>;
  /** When it expires, Unix milliseconds. */
  expiresAt: number;
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value <= 0) throw new RangeError(`${name} must be a positive integer`);
  return value;
}

/**
 * Issues and checks the verifier's challenge nonces.
 *
 * When the single-use set is full of unexpired nonces, {@linkcode consume}
 * rejects further nonces with the retryable reason `nonce-capacity` rather
 * than forgetting any it still remembers, so a replay can never slip
 * through; room frees as tracked nonces are forgotten (at most a lifetime
 * and twice the skew after they were consumed).
 */
export class ChallengeNonces {
  readonly #key: Uint8Array;
  readonly #replicaId: Uint8Array;
  readonly #clock: Clock;
  readonly #lifetimeMs: number;
  readonly #maxTracked: number;
  readonly #maxClockSkewMs: number;
  /** Consumed nonces by their random part (hex), with when they may be forgotten (expiry plus the skew). */
  readonly #consumed = new Map<string, number>();
  /** Earliest time in `#consumed`: before it, pruning would free nothing. */
  #earliestForget = Infinity;
  #nextPruneAt = 0;

  /** Nonces under `options.key`; throws `RangeError` for a key or replica ID of the wrong length or a bad option. */
  constructor(options: ChallengeNoncesOptions) {
    if (options.key.length !== NONCE_KEY_LENGTH) {
      throw new RangeError(`nonce key must be ${NONCE_KEY_LENGTH} bytes, got ${options.key.length}`);
    }
    this.#clock = options.clock;
    this.#lifetimeMs = positiveInteger("lifetimeMs", options.lifetimeMs ?? DEFAULT_NONCE_LIFETIME_MS);
    this.#maxTracked = positiveInteger("maxTracked", options.maxTracked ?? DEFAULT_MAX_TRACKED_NONCES);
    this.#maxClockSkewMs = options.maxClockSkewMs ?? DEFAULT_MAX_CLOCK_SKEW_MS;
    if (!Number.isSafeInteger(this.#maxClockSkewMs) || this.#maxClockSkewMs < 0) {
      throw new RangeError("maxClockSkewMs must be a non-negative integer");
    }
    this.#key = new Uint8Array(options.key);
    const replicaId = options.replicaId ?? crypto.getRandomValues(new Uint8Array(NONCE_REPLICA_ID_LENGTH));
    if (replicaId.length !== NONCE_REPLICA_ID_LENGTH) {
      throw new RangeError(`replica ID must be ${NONCE_REPLICA_ID_LENGTH} bytes, got ${replicaId.length}`);
    }
    this.#replicaId = new Uint8Array(replicaId);
  }

  /** How many consumed nonces are remembered right now. */
  get trackedCount(): number {
    return this.#consumed.size;
  }

  /** Issues a fresh nonce valid for the configured lifetime. */
  async issue(): Promise<IssuedNonce> {
    const expiresAt = Math.trunc(this.#clock.now()) + this.#lifetimeMs;
    const nonce = new Uint8Array(NONCE_LENGTH);
    const view = new DataView(nonce.buffer);
    view.setUint8(0, NONCE_VERSION);
    view.setBigUint64(1, BigInt(expiresAt));
    nonce.set(this.#replicaId, REPLICA_ID_OFFSET);
    crypto.getRandomValues(nonce.subarray(RANDOM_OFFSET, BODY_LENGTH));
    const body = nonce.slice(0, BODY_LENGTH);
    nonce.set(await primitives.hmacSha256(this.#key, body), BODY_LENGTH);
    return { nonce, expiresAt };
  }

  /**
   * Accepts `nonce` once. Throws {@linkcode ExchangeError} with reason
   * `nonce-malformed`, `nonce-bad-mac`, `nonce-other-replica`,
   * `nonce-expired`, `nonce-not-yet-valid`, `nonce-replayed` or
   * `nonce-capacity`.
   */
  async consume(nonce: Uint8Array): Promise<void> {
    if (nonce.length === LEGACY_NONCE_LENGTH && nonce[0] === LEGACY_NONCE_VERSION) {
      throw new ExchangeError(
        "nonce-other-replica",
        "nonce of the earlier format, issued by a replica of an older version (an upgrade?); get a new challenge",
      );
    }
    if (nonce.length !== NONCE_LENGTH) {
      throw new ExchangeError("nonce-malformed", `nonce must be ${NONCE_LENGTH} bytes, got ${nonce.length}`);
    }
    if (nonce[0] !== NONCE_VERSION) {
      throw new ExchangeError(
        "nonce-malformed",
        `unsupported nonce version ${nonce[0]}, want ${NONCE_VERSION}`,
      );
    }
    const body = nonce.slice(0, BODY_LENGTH);
    const tag = nonce.slice(BODY_LENGTH);
    if (!equalInConstantTime(await primitives.hmacSha256(this.#key, body), tag)) {
      throw new ExchangeError("nonce-bad-mac", "nonce was not issued by this verifier (MAC does not verify)");
    }
    // The ID is not secret (every nonce carries it): no constant-time comparison needed.
    if (body.subarray(REPLICA_ID_OFFSET, RANDOM_OFFSET).toHex() !== this.#replicaId.toHex()) {
      throw new ExchangeError(
        "nonce-other-replica",
        "nonce was issued by another replica of the verifier, or by this one before it restarted; get a new challenge on the connection that sends the request",
      );
    }
    // From here on no await: checking and recording the nonce is atomic.
    const now = this.#clock.now();
    const expiresAt = Number(new DataView(body.buffer).getBigUint64(1));
    if (now >= expiresAt) {
      throw new ExchangeError(
        "nonce-expired",
        `nonce expired ${now - expiresAt} ms ago; get a new challenge`,
      );
    }
    if (expiresAt > now + this.#lifetimeMs + this.#maxClockSkewMs) {
      throw new ExchangeError(
        "nonce-not-yet-valid",
        "nonce expires later than any nonce this verifier issues (was this replica's clock stepped back?)",
      );
    }
    if (now >= this.#nextPruneAt || this.#consumed.size >= this.#maxTracked) this.#prune(now);
    const id = body.subarray(RANDOM_OFFSET).toHex();
    if (this.#consumed.has(id)) {
      throw new ExchangeError("nonce-replayed", "nonce was already used; get a new challenge");
    }
    if (this.#consumed.size >= this.#maxTracked) {
      throw new ExchangeError(
        "nonce-capacity",
        "too many attested requests in flight; retry after a short wait with a new challenge",
      );
    }
    const forgetAt = expiresAt + this.#maxClockSkewMs;
    this.#consumed.set(id, forgetAt);
    this.#earliestForget = Math.min(this.#earliestForget, forgetAt);
  }

  /**
   * Forgets consumed nonces expired for longer than the allowed skew (they
   * are rejected as expired anyway, unless the clock steps back further).
   * Scans only when something can be forgotten, so a full set of live
   * nonces costs nothing per call.
   */
  #prune(now: number): void {
    if (now < this.#earliestForget) return;
    let earliest = Infinity;
    for (const [id, forgetAt] of this.#consumed) {
      if (now >= forgetAt) this.#consumed.delete(id);
      else earliest = Math.min(earliest, forgetAt);
    }
    this.#earliestForget = earliest;
    this.#nextPruneAt = now + this.#lifetimeMs;
  }
}
