/**
 * Keeps the join service's validator in step with the attestation config
 * file, without a restart.
 *
 * The watch is on the file's directory, not the file: a Kubernetes ConfigMap
 * volume updates the file by atomically renaming a new `..data` symlink over
 * the old one (the file itself is a symlink `attestationConfig ->
 * ..data/attestationConfig`), which no watch on the old file would see.
 * Watching the directory also sees plain writes and rename-over. Bursts of
 * events are debounced, then the file is re-read; content equal to the last
 * read is ignored (events for other files in the directory).
 *
 * A valid, changed config swaps in a new validator and bumps the generation;
 * an invalid one is logged and the last good config and validator stay.
 *
 * Validations are never serialised (the original held one lock for every
 * validation): callers take `current().validator` and use it concurrently.
 * A swap only replaces the reference, so validations already running on the
 * previous validator finish against the previous config.
 *
 * @module
 */
import { dirname } from "node:path";
import type { Validator } from "./attestation.ts";
import {
  type AkTrustDiff,
  type AttestationConfig,
  AttestationConfigError,
  diffAkTrust,
  parseAttestationConfig,
  readConfigText,
} from "./config.ts";
import { diffMeasurements, type MeasurementsDiff, measurementsDigest } from "./measurements.ts";
import { createValidator } from "./registry.ts";
import type { Logger } from "../log/logger.ts";

/** The config in force and the validator built from it. */
export interface AttestationState {
  readonly config: AttestationConfig;
  readonly validator: Validator;
  /** 1 for the config read at start, +1 per applied change. */
  readonly generation: number;
  /** {@linkcode measurementsDigest} of the config's measurements. */
  readonly digest: string;
}

/** What an applied reload changed. */
export interface AttestationConfigChange {
  measurements: MeasurementsDiff;
  /** Undefined when the AK trust did not change. */
  akTrust: AkTrustDiff | undefined;
}

/** Options for {@linkcode AttestationConfigWatcher.start}. */
export interface AttestationConfigWatcherOptions {
  /** The config file, e.g. "/var/config/attestationConfig". */
  path: string;
  /** The service's attestation variant; a config for another variant is rejected. */
  variant: string;
  logger: Logger;
  /** Called after a changed config was applied. */
  onChange?: (state: AttestationState, change: AttestationConfigChange) => void;
  /** Called when a reload failed and the last good config stays in force. */
  onReloadError?: (error: Error) => void;
  /** Aborts start; aborting later closes the watcher. */
  signal?: AbortSignal;
  /** Quiet time after a file event before re-reading, in ms; default 100. */
  debounceMs?: number;
}

interface Waiter {
  generation: number;
  resolve: (state: AttestationState) => void;
  reject: (reason: unknown) => void;
}

const DEFAULT_DEBOUNCE_MS = 100;

/** Watches the attestation config file and swaps validators when it changes. */
export class AttestationConfigWatcher {
  readonly #options: AttestationConfigWatcherOptions;
  readonly #logger: Logger;
  readonly #fsWatcher: Deno.FsWatcher;
  readonly #abort = new AbortController();
  readonly #waiters = new Set<Waiter>();
  readonly #watching: Promise<void>;
  #state: AttestationState;
  #lastText: string | undefined;
  #lastAttemptFailed = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #reloading: Promise<void> | undefined;
  #eventsDuringReload = false;
  #closing: Promise<void> | undefined;

  private constructor(
    options: AttestationConfigWatcherOptions,
    fsWatcher: Deno.FsWatcher,
    state: AttestationState,
    text: string,
  ) {
    this.#options = options;
    this.#logger = options.logger;
    this.#fsWatcher = fsWatcher;
    this.#state = state;
    this.#lastText = text;
    options.signal?.addEventListener("abort", this.#onAbort, { once: true });
    this.#watching = this.#watch();
  }

  /**
   * Reads and validates the config, builds its validator, and starts
   * watching. A missing or invalid file is an error
   * ({@linkcode AttestationConfigError}): the service must not start without
   * a valid config.
   */
  static async start(options: AttestationConfigWatcherOptions): Promise<AttestationConfigWatcher> {
    const { path, variant, logger, signal } = options;
    signal?.throwIfAborted();
    // Watch before the first read, so a change between the read and the watch is not missed.
    let fsWatcher: Deno.FsWatcher;
    try {
      fsWatcher = Deno.watchFs(dirname(path), { recursive: false });
    } catch (error) {
      throw new AttestationConfigError(
        "unreadable",
        `cannot watch the attestation config directory ${dirname(path)}: ${(error as Error).message}`,
        { cause: error },
      );
    }
    try {
      const text = await readConfigText(path, signal);
      const config = parseAttestationConfig(text, { variant, source: `attestation config ${path}` });
      const state: AttestationState = {
        config,
        validator: createValidator(config, { logger }),
        generation: 1,
        digest: measurementsDigest(config.measurements),
      };
      logger.info("attestation config loaded", { path, ...describe(state) });
      signal?.throwIfAborted();
      return new AttestationConfigWatcher(options, fsWatcher, state, text);
    } catch (error) {
      fsWatcher.close();
      throw error;
    }
  }

  /** The config and validator in force. Take the validator from here for each validation. */
  current(): AttestationState {
    return this.#state;
  }

  /**
   * Resolves with the state once a config newer than `generation` is in
   * force (at once if it already is). Rejects when `signal` aborts or the
   * watcher closes.
   */
  reloaded(generation: number, options: { signal?: AbortSignal } = {}): Promise<AttestationState> {
    const { signal } = options;
    if (this.#state.generation > generation) return Promise.resolve(this.#state);
    if (this.#closing) return Promise.reject(closedError());
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.#waiters.delete(waiter);
        reject(signal?.reason);
      };
      const waiter: Waiter = {
        generation,
        resolve: (state) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(state);
        },
        reject: (reason) => {
          signal?.removeEventListener("abort", onAbort);
          reject(reason);
        },
      };
      this.#waiters.add(waiter);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /**
   * Stops watching and waits for a running reload to finish. The last state
   * stays available through {@linkcode current}; pending
   * {@linkcode reloaded} calls reject.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#options.signal?.removeEventListener("abort", this.#onAbort);
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#abort.abort();
    this.#fsWatcher.close();
    for (const waiter of this.#waiters) waiter.reject(closedError());
    this.#waiters.clear();
    await this.#watching;
    await this.#reloading;
  }

  #onAbort = () => {
    void this.close();
  };

  async #watch(): Promise<void> {
    try {
      for await (const _event of this.#fsWatcher) this.#schedule();
    } catch (error) {
      if (this.#closing) return;
      this.#logger.error("attestation config watch failed; changes to the file are no longer applied", {
        path: this.#options.path,
        error,
      });
    }
  }

  /** Coalesces a burst of events into one reload, and events during a reload into one more. */
  #schedule(): void {
    if (this.#closing) return;
    if (this.#reloading) {
      this.#eventsDuringReload = true;
      return;
    }
    if (this.#timer !== undefined) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#reloading = this.#reload().finally(() => {
        this.#reloading = undefined;
        if (this.#eventsDuringReload) {
          this.#eventsDuringReload = false;
          this.#schedule();
        }
      });
    }, this.#options.debounceMs ?? DEFAULT_DEBOUNCE_MS);
  }

  async #reload(): Promise<void> {
    const { path, variant, logger } = this.#options;
    let text: string;
    try {
      text = await readConfigText(path, this.#abort.signal);
    } catch (error) {
      if (this.#closing) return;
      this.#lastText = undefined;
      return this.#reportFailure(error as Error);
    }
    if (this.#closing || text === this.#lastText) return;
    this.#lastText = text;

    const previous = this.#state;
    let next: AttestationState;
    let change: AttestationConfigChange;
    try {
      const config = parseAttestationConfig(text, { variant, source: `attestation config ${path}` });
      change = {
        measurements: diffMeasurements(previous.config.measurements, config.measurements),
        akTrust: diffAkTrust(previous.config.akTrust, config.akTrust),
      };
      if (isEmpty(change)) {
        if (this.#lastAttemptFailed) {
          logger.info("attestation config is valid again and unchanged", {
            path,
            generation: previous.generation,
          });
        } else {
          logger.debug("attestation config rewritten without effective change", {
            path,
            generation: previous.generation,
          });
        }
        this.#lastAttemptFailed = false;
        return;
      }
      next = {
        config,
        validator: createValidator(config, { logger }),
        generation: previous.generation + 1,
        digest: measurementsDigest(config.measurements),
      };
    } catch (error) {
      return this.#reportFailure(error as Error);
    }

    this.#state = next;
    this.#lastAttemptFailed = false;
    logger.info("attestation config reloaded", {
      path,
      ...describe(next),
      previousGeneration: previous.generation,
      previousDigest: previous.digest,
      measurementsAdded: change.measurements.added,
      measurementsRemoved: change.measurements.removed,
      measurementsChanged: change.measurements.changed,
      akTrustChange: change.akTrust,
    });
    for (const waiter of this.#waiters) {
      if (next.generation > waiter.generation) {
        this.#waiters.delete(waiter);
        waiter.resolve(next);
      }
    }
    try {
      this.#options.onChange?.(next, change);
    } catch (error) {
      logger.error("attestation config change handler failed", { error });
    }
  }

  #reportFailure(error: Error): void {
    this.#lastAttemptFailed = true;
    this.#logger.error("attestation config reload failed; keeping the last good config", {
      path: this.#options.path,
      error: error.message,
      code: error instanceof AttestationConfigError ? error.code : undefined,
      generation: this.#state.generation,
      digest: this.#state.digest,
    });
    try {
      this.#options.onReloadError?.(error);
    } catch (handlerError) {
      this.#logger.error("attestation config reload error handler failed", { error: handlerError });
    }
  }
}

function isEmpty(change: AttestationConfigChange): boolean {
  const { added, removed, changed } = change.measurements;
  return added.length === 0 && removed.length === 0 && changed.length === 0 && change.akTrust === undefined;
}

/** Non-secret summary of a state for logs: measurement indices and AK trust, never key material. */
function describe(state: AttestationState): Record<string, unknown> {
  const { config } = state;
  return {
    variant: config.variant,
    generation: state.generation,
    digest: state.digest,
    measurementIndices: [...config.measurements.keys()],
    akTrust: config.akTrust.kind,
    trustedKeys: config.akTrust.kind === "allow-list" ? config.akTrust.keyDigests.size : undefined,
  };
}

function closedError(): Error {
  return new Error("attestation config watcher is closed");
}
