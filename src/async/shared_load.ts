/**
 * One load shared by every caller, kept once it succeeds (for `maxAgeMs`,
 * when given) and forgotten when it fails, so the next caller tries again.
 *
 * Services load a few values once and use them for every request (a key
 * from the key service, a CA from its files, an endpoint from the metadata
 * API), or read a value at most so often (the NodeVersion, a file's change
 * stamp). Concurrent requests must share the one load in flight, and the load
 * must not run under any one request's signal: a caller that gives up must
 * not fail the others. A caller's signal therefore only stops that caller
 * waiting; the load itself is bounded by the loader (its client's own
 * deadline).
 *
 * ```ts
 * const secret = new SharedLoad(() => keys.getDataKey("measurementSecret", 32, {}));
 * const value = await secret.get({ signal });
 * ```
 *
 * @module
 */
import type { Clock } from "../clock.ts";

/** Options for {@linkcode SharedLoad}. */
export interface SharedLoadOptions {
  /**
   * How long a failure is answered from memory before the next caller loads
   * again, so that callers arriving during an outage do not each start a
   * load; default 0 (the next caller loads again at once). Needs `clock`.
   */
  failureHoldMs?: number;
  /**
   * How long a loaded value is kept, from the moment it loaded; default
   * forever (until a caller asks for another version). Needs `clock`.
   */
  maxAgeMs?: number;
  /** Time source for `failureHoldMs` and `maxAgeMs`. */
  clock?: Clock;
}

/** Options for {@linkcode SharedLoad.get}. */
export interface SharedLoadGetOptions {
  /** Stops this caller waiting (rejects with the signal's reason); the shared load goes on. */
  signal?: AbortSignal;
  /**
   * The version of the source the caller wants (e.g. a file's change stamp):
   * a value loaded for another version is loaded again. Default: any.
   */
  version?: string;
}

interface Loaded<T> {
  promise: Promise<T>;
  version: string | undefined;
  /** When the load failed (clock time), or undefined while it has not. */
  failedAt?: number;
  /** When the load succeeded (clock time; only tracked with `maxAgeMs`), or undefined while it has not. */
  loadedAt?: number;
}

/** A value loaded once for all callers, and again after a failure. */
export class SharedLoad<T> {
  readonly #load: () => Promise<T>;
  readonly #failureHoldMs: number;
  readonly #maxAgeMs: number;
  readonly #clock: Clock | undefined;
  #current: Loaded<T> | undefined;

  /** `load` runs without any caller's signal; it must bound its own time. */
  constructor(load: () => Promise<T>, options: SharedLoadOptions = {}) {
    this.#load = load;
    this.#failureHoldMs = options.failureHoldMs ?? 0;
    this.#maxAgeMs = options.maxAgeMs ?? Infinity;
    this.#clock = options.clock;
    if (this.#failureHoldMs > 0 && !this.#clock) throw new RangeError("failureHoldMs needs a clock");
    if (this.#maxAgeMs !== Infinity && !this.#clock) throw new RangeError("maxAgeMs needs a clock");
  }

  /** The loaded value: the shared load in flight, the kept value, or a new load. */
  get(options: SharedLoadGetOptions = {}): Promise<T> {
    const { signal, version } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (!this.#usable(version)) this.#current = this.#start(version);
    return abortable(this.#current!.promise, signal);
  }

  #usable(version: string | undefined): boolean {
    const current = this.#current;
    if (!current || current.version !== version) return false;
    if (current.loadedAt !== undefined) return this.#clock!.now() - current.loadedAt < this.#maxAgeMs;
    if (current.failedAt === undefined) return true; // in flight, or kept forever
    return this.#clock!.now() - current.failedAt < this.#failureHoldMs;
  }

  #start(version: string | undefined): Loaded<T> {
    const loaded: Loaded<T> = { version, promise: Promise.resolve() as Promise<T> };
    loaded.promise = this.#load().then((value) => {
      if (this.#maxAgeMs !== Infinity) loaded.loadedAt = this.#clock!.now();
      return value;
    }, (error) => {
      if (this.#failureHoldMs > 0) loaded.failedAt = this.#clock!.now();
      else if (this.#current === loaded) this.#current = undefined;
      throw error;
    });
    return loaded;
  }
}

/** `promise`, or the signal's reason as soon as `signal` aborts. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
