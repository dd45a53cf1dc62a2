/**
 * Waiting, deadlines and the retry loop shared by the join client and the
 * rejoin client: time goes through an injectable {@linkcode Timers} so tests
 * drive every interval and deadline by hand, and every wait ends at once
 * when its `AbortSignal` aborts (no timer outlives its caller).
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { sleep } from "../async/sleep.ts";
import type { Logger } from "../log/logger.ts";
import { ReasonError } from "../reason_error.ts";

/** Sleeps; the one source of delays of the join and rejoin clients. */
export interface Timers {
  /** Resolves after `ms`; rejects with the signal's reason (and cancels the timer) when it aborts. */
  sleep(ms: number, options?: { signal?: AbortSignal }): Promise<void>;
}

/** {@linkcode Timers} over `setTimeout`. */
export const systemTimers: Timers = {
  sleep: (ms, options = {}) => sleep(ms, options.signal),
};

/** A call did not finish within its deadline. */
export class DeadlineError extends ReasonError<"deadline"> {
  /** `what` took longer than `ms`. */
  constructor(what: string, ms: number) {
    super("deadline", `${what}: no answer within ${ms} ms`);
  }
}

/**
 * Runs `call` with a signal that aborts when `signal` aborts or `ms` pass
 * (then with a {@linkcode DeadlineError}). Settles as soon as that signal
 * aborts, even when `call` ignores it; the deadline's timer is cancelled
 * when the call settles.
 */
export async function withDeadline<T>(
  timers: Timers,
  what: string,
  ms: number,
  signal: AbortSignal | undefined,
  call: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const deadline = new AbortController();
  const timer = new AbortController();
  timers.sleep(ms, { signal: timer.signal }).then(
    () => deadline.abort(new DeadlineError(what, ms)),
    () => {},
  );
  const combined = signal ? AbortSignal.any([signal, deadline.signal]) : deadline.signal;
  try {
    return await untilAborted(call(combined), combined);
  } finally {
    timer.abort();
  }
}

/**
 * How long work whose deadline passed is given to finish the step it is in
 * before the caller cleans up after it (a file written after the cleanup
 * would outlive it).
 */
export const AFTER_DEADLINE_SETTLE_MS = 10_000;

/** Waits until `work` settles (either way), at most `ms`. */
export async function settledWithin(work: Promise<unknown>, timers: Timers, ms: number): Promise<void> {
  const timer = new AbortController();
  await Promise.race([
    work.then(() => {}, () => {}),
    timers.sleep(ms, { signal: timer.signal }).catch(() => {}),
  ]);
  timer.abort();
}

/** `promise`, or a rejection with the signal's reason as soon as `signal` aborts. */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    promise.catch(() => {});
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** Options of {@linkcode retryUntilDone}. */
export interface RetryOptions {
  /** Ends the loop: the pending wait or attempt rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Delays and deadlines; default real time. */
  timers: Timers;
  /** Pause after a failed attempt. */
  intervalMs: number;
  /** Structured log; never receives a secret. */
  logger: Logger;
  /** Errors that end the loop instead of being retried; default none. */
  isTerminal?: (error: unknown) => boolean;
}

/**
 * Calls `attempt` until it resolves: the first time at once, then
 * `intervalMs` after each failure, logging every failure (warn, with its
 * reason). A terminal error or an abort rejects.
 */
export async function retryUntilDone<T>(
  what: string,
  attempt: (signal: AbortSignal | undefined) => Promise<T>,
  options: RetryOptions,
): Promise<T> {
  const { signal, timers, intervalMs, logger } = options;
  for (let attempts = 1;; attempts++) {
    signal?.throwIfAborted();
    try {
      return await attempt(signal);
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      if (options.isTerminal?.(error)) throw error;
      logger.warn(`${what} failed; retrying`, { attempts, retryInMs: intervalMs, ...errorFields(error) });
    }
    await timers.sleep(intervalMs, { signal });
  }
}

/** Log fields of an error: its reason (when it has one) and its message, never a stack. */
export function errorFields(error: unknown): { reason?: string; error: string } {
  const reason = typeof error === "object" && error !== null && "reason" in error &&
      typeof error.reason === "string"
    ? error.reason
    : undefined;
  const message = errorMessage(error);
  return reason === undefined ? { error: message } : { reason, error: message };
}
