/**
 * A bounded pool of concurrent work with a bounded wait queue: at most
 * `concurrency` tasks run at once, at most `maxQueued` wait, and anything
 * beyond is refused at once instead of piling up.
 *
 * @module
 */

/** The pool's queue is full. */
export class PoolFullError extends Error {
  /** The pool is full; `message` says of what. */
  constructor(message = "too many requests waiting for verification") {
    super(message);
    this.name = "PoolFullError";
  }
}

/** Options for {@linkcode WorkPool}. */
export interface WorkPoolOptions {
  /** Tasks running at once. */
  concurrency: number;
  /** Tasks waiting at once; more are refused with {@linkcode PoolFullError}. */
  maxQueued: number;
}

/** Runs tasks with bounded concurrency and a bounded queue. */
export class WorkPool {
  readonly #options: WorkPoolOptions;
  #running = 0;
  readonly #queue: (() => void)[] = [];

  /** A pool of `options.concurrency` slots and `options.maxQueued` waiters; throws for a concurrency below 1. */
  constructor(options: WorkPoolOptions) {
    if (options.concurrency < 1) throw new Error("pool concurrency must be at least 1");
    this.#options = options;
  }

  /** Tasks running now. */
  get running(): number {
    return this.#running;
  }

  /** Tasks waiting now. */
  get queued(): number {
    return this.#queue.length;
  }

  /** Every slot is taken and the queue is full: a task given now would be refused. */
  get full(): boolean {
    return this.#running >= this.#options.concurrency && this.#queue.length >= this.#options.maxQueued;
  }

  /**
   * Runs `task` when a slot is free. Throws {@linkcode PoolFullError} when the
   * queue is full, or the signal's reason when aborted while waiting.
   */
  async run<T>(task: () => Promise<T>, options: { signal?: AbortSignal } = {}): Promise<T> {
    await this.#acquire(options.signal);
    try {
      return await task();
    } finally {
      this.#release();
    }
  }

  #acquire(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.full) return Promise.reject(new PoolFullError());
    if (this.#running < this.#options.concurrency) {
      this.#running++;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const start = () => {
        signal?.removeEventListener("abort", abort);
        this.#running++;
        resolve();
      };
      const abort = () => {
        const index = this.#queue.indexOf(start);
        if (index >= 0) this.#queue.splice(index, 1);
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", abort, { once: true });
      this.#queue.push(start);
    });
  }

  #release(): void {
    this.#running--;
    this.#queue.shift()?.();
  }
}
