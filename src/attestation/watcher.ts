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
 * read is ignored (events for other files in the directory), and so is a
 * read failing the same way as the last one.
 *
 * A watch can stop: the iterator ends or throws, or the directory itself is
 * removed or renamed, after which the kernel reports nothing more. The
 * watcher then logs it and re-arms the watch with bounded exponential
 * backoff (0.1 s doubling to 30 s, back to 0.1 s once a watch delivers
 * events), re-reading the file after each re-arm for changes made while
 * unwatched. Some changes reach no watch at all (a file system mounted over
 * the directory, a symlinked directory swapped), so the file is also re-read
 * every `pollIntervalMs` (default 30 s) as a safety net; unchanged content
 * makes that a no-op.
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
import { dirname, resolve } from "node:path";
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
  /** The config in force. */
  readonly config: AttestationConfig;
  /** The validator built from it. */
  readonly validator: Validator;
  /** 1 for the config read at start, +1 per applied change. */
  readonly generation: number;
  /** {@linkcode measurementsDigest} of the config's measurements. */
  readonly digest: string;
}

/** What an applied reload changed. */
export interface AttestationConfigChange {
  /** Measurements added, removed and changed. */
  measurements: MeasurementsDiff;
  /** Undefined when the AK trust did not change. */
  akTrust: AkTrustDiff | undefined;
  /** Undefined when the keys that may join as control planes did not change. */
  controlPlanes: AkTrustDiff | undefined;
}

/** Options for {@linkcode AttestationConfigWatcher.start}. */
export interface AttestationConfigWatcherOptions {
  /** The config file, e.g. "/var/config/attestationConfig". */
  path: string;
  /** The service's attestation variant; a config for another variant is rejected. */
  variant: string;
  /** Receives load, reload and watch log lines. */
  logger: Logger;
  /** Called after a changed config was applied. */
  onChange?: (state: AttestationState, change: AttestationConfigChange) => void;
  /** Called when a reload failed and the last good config stays in force. */
  onReloadError?: (error: Error) => void;
  /** Aborts start; aborting later closes the watcher. */
  signal?: AbortSignal;
  /** Quiet time after a file event before re-reading, in ms; default 100. */
  debounceMs?: number;
  /** Interval of the safety-net re-read, in ms, whatever the watch reports; default 30,000. */
  pollIntervalMs?: number;
}

interface Waiter {
  generation: number;
  resolve: (state: AttestationState) => void;
  reject: (reason: unknown) => void;
}

/** Logged when a config lets any attestation key join as a control plane. */
export const CONTROL_PLANE_ANY_KEY_WARNING =
  "INSECURE: controlPlaneAnyKey lets any attestation key join as a control plane and receive the cluster's CA keys; list the control planes' keys in akTrust.controlPlaneKeyDigests outside development";

const DEFAULT_DEBOUNCE_MS = 100;
const DEFAULT_POLL_INTERVAL_MS = 30_000;
/** First and largest wait before re-arming a stopped watch. */
const REARM_MIN_DELAY_MS = 100;
const REARM_MAX_DELAY_MS = 30_000;

/** Watches the attestation config file and swaps validators when it changes. */
export class AttestationConfigWatcher {
  readonly #options: AttestationConfigWatcherOptions;
  readonly #logger: Logger;
  /** The watch in force; undefined while it is being re-armed. */
  #fsWatcher: Deno.FsWatcher | undefined;
  readonly #pollTimer: ReturnType<typeof setInterval>;
  readonly #abort = new AbortController();
  readonly #waiters = new Set<Waiter>();
  readonly #watching: Promise<void>;
  #state: AttestationState;
  #lastText: string | undefined;
  #lastAttemptFailed = false;
  /** Message of the last failed read, until a read succeeds: repeating it is not news. */
  #lastReadError: string | undefined;
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
    this.#pollTimer = setInterval(() => this.#schedule(), options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS);
    this.#watching = this.#watch(fsWatcher);
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
        digest: await measurementsDigest(config.measurements),
      };
      logger.info("attestation config loaded", { path, ...describe(state) });
      warnIfInsecure(config, logger);
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
    clearInterval(this.#pollTimer);
    this.#abort.abort();
    if (this.#fsWatcher) closeQuietly(this.#fsWatcher);
    for (const waiter of this.#waiters) waiter.reject(closedError());
    this.#waiters.clear();
    await this.#watching;
    await this.#reloading;
  }

  #onAbort = () => {
    void this.close();
  };

  /** Follows the watch, re-arming it whenever it stops, until the watcher closes. */
  async #watch(fsWatcher: Deno.FsWatcher): Promise<void> {
    const { path } = this.#options;
    const directory = resolve(dirname(path));
    let current: Deno.FsWatcher | undefined = fsWatcher;
    let delay = REARM_MIN_DELAY_MS;
    while (!this.#closing) {
      if (current === undefined) {
        await this.#sleep(delay);
        if (this.#closing) return;
        const waited = delay;
        delay = Math.min(2 * delay, REARM_MAX_DELAY_MS);
        try {
          current = Deno.watchFs(directory, { recursive: false });
        } catch (error) {
          this.#logger.warn("cannot re-arm the attestation config watch; retrying", {
            path,
            error,
            retryInMs: delay,
          });
          continue;
        }
        this.#fsWatcher = current;
        this.#logger.info("attestation config watch re-armed", { path, afterMs: waited });
        this.#schedule(); // changes made while nothing watched would be missed otherwise
      }
      const stopped = await this.#follow(current, directory, () => (delay = REARM_MIN_DELAY_MS));
      closeQuietly(current);
      this.#fsWatcher = current = undefined;
      if (this.#closing) return;
      this.#logger.warn("attestation config watch stopped; re-arming it", {
        path,
        reason: stopped,
        retryInMs: delay,
      });
    }
  }

  /**
   * Schedules a reload per event until the watch stops, and says why it
   * stopped. A removed or renamed directory stops it too: the kernel drops
   * the watch, but the iterator would just stay silent.
   */
  async #follow(fsWatcher: Deno.FsWatcher, directory: string, onEvent: () => void): Promise<string> {
    try {
      for await (const event of fsWatcher) {
        this.#schedule();
        if (event.kind === "remove" && event.paths.includes(directory)) {
          return "the directory was removed or renamed";
        }
        onEvent();
      }
      return "the watch ended";
    } catch (error) {
      return `the watch failed: ${(error as Error).message}`;
    }
  }

  /** Waits `ms`, or less if the watcher closes. */
  #sleep(ms: number): Promise<void> {
    const signal = this.#abort.signal;
    if (signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
    });
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
      const message = (error as Error).message;
      if (message === this.#lastReadError) return;
      this.#lastReadError = message;
      return this.#reportFailure(error as Error);
    }
    this.#lastReadError = undefined;
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
        controlPlanes: diffAkTrust(previous.config.controlPlanes, config.controlPlanes),
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
        digest: await measurementsDigest(config.measurements),
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
      controlPlanesChange: change.controlPlanes,
    });
    warnIfInsecure(next.config, logger);
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
      reason: error instanceof AttestationConfigError ? error.reason : undefined,
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
  return added.length === 0 && removed.length === 0 && changed.length === 0 && change.akTrust === undefined &&
    change.controlPlanes === undefined;
}

/** Warns, at every load of such a config, that any attestation key may join as a control plane. */
function warnIfInsecure(config: AttestationConfig, logger: Logger): void {
  if (config.controlPlanes.kind === "any") {
    logger.warn(CONTROL_PLANE_ANY_KEY_WARNING, { variant: config.variant });
  }
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
    controlPlanes: config.controlPlanes.kind,
    controlPlaneKeys: config.controlPlanes.kind === "allow-list"
      ? config.controlPlanes.keyDigests.size
      : undefined,
  };
}

/** Closes a watch that may already be closed (ending its iterator closes it too). */
function closeQuietly(fsWatcher: Deno.FsWatcher): void {
  try {
    fsWatcher.close();
  } catch {
    // Already closed.
  }
}

function closedError(): Error {
  return new Error("attestation config watcher is closed");
}
