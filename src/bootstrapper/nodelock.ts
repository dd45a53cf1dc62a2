/**
 * The node lock (reference §3): a one-way switch from unlocked to locked that
 * decides whether this node is initialized as the first node of a cluster or
 * joins one. Init and join race for it; exactly one wins.
 *
 * Winning marks the node as bound to the cluster (PCR 15, see `pcr15.ts`).
 * The switch flips before marking starts and never flips back, also when
 * marking fails: a half-extended PCR cannot be undone, so the node must not
 * accept another init or join in this boot (the point of no return). The
 * failure is the winner's to report. The winner is told at the flip
 * (`onTaken`), not after marking: a loser answers at once, and whoever
 * watches the race must already know who won when it hears of the loss.
 *
 * @module
 */
import { systemTimers, type Timers, withDeadline } from "./retry.ts";

/**
 * How long marking may take: a TPM answers in milliseconds; one that hangs
 * must end the boot with an error rather than leave the node waiting
 * without a word.
 */
export const DEFAULT_MARK_TIMEOUT_MS = 60_000;

/** Options of {@linkcode NodeLock}. */
export interface NodeLockOptions {
  /** Default {@linkcode DEFAULT_MARK_TIMEOUT_MS}. */
  markTimeoutMs?: number;
  /** Default real time. */
  timers?: Timers;
}

/** Marks the node as bound to a cluster (e.g. measures the cluster ID into PCR 15). */
export interface ClusterMarker {
  /** Marks the node with `clusterId`; called at most once per node lock. */
  mark(clusterId: Uint8Array, options?: { signal?: AbortSignal }): Promise<void>;
}

/** Where a node lock stands. */
export type NodeLockState =
  /** Nobody has taken the lock. */
  | "unlocked"
  /** The winner's marking runs. */
  | "marking"
  /** Taken and marked. */
  | "marked"
  /** Taken, but marking failed: the node stays locked and must be wiped or rebooted. */
  | "mark-failed";

/** Options of {@linkcode NodeLock.tryLock}. */
export interface TryLockOptions {
  /** Abandons marking (the lock stays taken once flipped). */
  signal?: AbortSignal;
  /**
   * Called synchronously when this caller takes the lock, before marking
   * starts (so also when marking then fails); never for a caller that does
   * not take it. Must not throw.
   */
  onTaken?: () => void;
}

/** The one-way lock that init and join race for. */
export class NodeLock {
  readonly #marker: ClusterMarker;
  readonly #options: NodeLockOptions;
  #state: NodeLockState = "unlocked";

  /** A lock that marks the node through `marker` when taken. */
  constructor(marker: ClusterMarker, options: NodeLockOptions = {}) {
    this.#marker = marker;
    this.#options = options;
  }

  /**
   * Takes the lock for `clusterId`: true for exactly one caller ever, whose
   * marking runs exactly once; false for every other caller, at once and
   * without touching the marker.
   *
   * A signal already aborted when the call starts rejects with its reason
   * and leaves the lock untouched. Once taken, the lock stays taken: if
   * marking fails, is aborted or outlasts its deadline (a `DeadlineError`),
   * the call rejects with that error.
   */
  async tryLock(clusterId: Uint8Array, options: TryLockOptions = {}): Promise<boolean> {
    options.signal?.throwIfAborted();
    // Checked and flipped in one synchronous step: no other caller can run in between.
    if (this.#state !== "unlocked") return false;
    this.#state = "marking";
    options.onTaken?.();
    try {
      await withDeadline(
        this.#options.timers ?? systemTimers,
        "marking the node (PCR 15)",
        this.#options.markTimeoutMs ?? DEFAULT_MARK_TIMEOUT_MS,
        options.signal,
        (signal) => this.#marker.mark(clusterId, { signal }),
      );
    } catch (error) {
      this.#state = "mark-failed";
      throw error;
    }
    this.#state = "marked";
    return true;
  }

  /** "none" until some caller has taken the lock, "taken" from then on (for diagnostics). */
  get holder(): "none" | "taken" {
    return this.#state === "unlocked" ? "none" : "taken";
  }

  /** The detailed state, for logs and status. */
  get state(): NodeLockState {
    return this.#state;
  }
}
