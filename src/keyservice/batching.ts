/**
 * Batches data-key requests to the key service: one call is in flight at a
 * time, and the keys asked for meanwhile go out together in the next one
 * (`GetDataKeys`). A request that finds no call in flight goes out at once,
 * alone, so a quiet service waits for nothing; under load the batches grow
 * by themselves, with the time one call takes. The join service's tickets
 * each need one key, and a call costs the key service some 0.7 ms of RPC
 * stack around a 32-byte derivation (see README, Performance).
 *
 * A batch of one is a plain `GetDataKey` call, as the original system makes,
 * and carries its caller's signal. A key whose caller gives up while it
 * waits, or while its batch is in flight, is rejected at once with its
 * signal's reason as a ConnectError (a deadline stays DeadlineExceeded,
 * anything else is Canceled); its batch goes on for the others. A key still
 * unanswered `timeoutMs` after it was asked for, queued or in flight, fails
 * with DeadlineExceeded, as a call of its own would have. One key's failure
 * (an empty ID, a bad length) is that key's alone. A failed call (no
 * connection, deadline) fails every key it carried, with that call's error.
 * A key service that does not know `GetDataKeys` (Unimplemented: the
 * original's, which has only `GetDataKey`, or ours from before it) gets a
 * call of its own for every key, at once, as before batching, for the life
 * of the batcher.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";
import type { DataKeyError, DataKeyOutcome, GetDataKeyRequest } from "../gen/kms/kms_pb.ts";

/** The key service calls a batcher makes. */
export interface DataKeyCalls {
  /** One key (`GetDataKey`), cancelled by `signal`. */
  getDataKey(request: GetDataKeyRequest, signal: AbortSignal | undefined): Promise<Uint8Array>;
  /** Several keys (`GetDataKeys`): one outcome per request, in their order. */
  getDataKeys(requests: GetDataKeyRequest[]): Promise<DataKeyOutcome[]>;
}

/** Limits of one batch, and of one key's wait. */
export interface DataKeyBatchLimits {
  /** The most keys in one call. */
  maxKeys: number;
  /** The most bytes of keys (their lengths summed) in one call. A key over this alone still goes, alone. */
  maxKeyBytes: number;
  /**
   * The most bytes of key IDs in one call, counted at 3 bytes a character
   * (UTF-8's most for one UTF-16 unit): the key service refuses larger
   * messages. A key over this alone still goes, in a call of its own.
   */
  maxKeyIdBytes: number;
  /** How long a key may wait for its answer, queued and in its call, in milliseconds. */
  timeoutMs: number;
}

interface PendingKey {
  readonly request: GetDataKeyRequest;
  readonly signal: AbortSignal | undefined;
  /** Resolved, rejected or given up by its caller: its batch's answer is dropped. */
  settled: boolean;
  resolve(key: Uint8Array): void;
  reject(error: unknown): void;
}

/** Sends data-key requests in batches, one call in flight at a time. */
export class DataKeyBatcher {
  readonly #calls: DataKeyCalls;
  readonly #limits: DataKeyBatchLimits;
  #queue: PendingKey[] = [];
  #inFlight = false;
  #batchesUnsupported = false;

  /** A batcher over `calls`, whose batches keep within `limits`. */
  constructor(calls: DataKeyCalls, limits: DataKeyBatchLimits) {
    this.#calls = calls;
    this.#limits = limits;
  }

  /**
   * The key for `request`, from the next call. Rejects with the signal's
   * reason (as a ConnectError, Canceled unless it is one) when `signal`
   * aborts first, and with DeadlineExceeded when no answer came within
   * `timeoutMs`.
   */
  get(request: GetDataKeyRequest, signal?: AbortSignal): Promise<Uint8Array> {
    if (signal?.aborted) return Promise.reject(aborted(signal));
    if (this.#batchesUnsupported) return this.#calls.getDataKey(request, signal);
    return new Promise((resolve, reject) => {
      const onAbort = () => pending.reject(aborted(signal!));
      const timer = setTimeout(
        () => pending.reject(timedOut(this.#limits.timeoutMs)),
        this.#limits.timeoutMs,
      );
      const settle = () => {
        pending.settled = true;
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      const pending: PendingKey = {
        request,
        signal,
        settled: false,
        resolve: (key) => {
          if (pending.settled) return;
          settle();
          resolve(key);
        },
        reject: (error) => {
          if (pending.settled) return;
          settle();
          reject(error);
        },
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#queue.push(pending);
      this.#sendNext();
    });
  }

  #sendNext(): void {
    if (this.#inFlight) return;
    this.#queue = this.#queue.filter((pending) => !pending.settled);
    if (this.#queue.length === 0) return;
    const batch = this.#takeBatch();
    this.#inFlight = true;
    this.#send(batch)
      // #send answers every key itself; should it throw all the same, its keys fail rather than wait
      // forever, and the process does not end on an unhandled rejection.
      .catch((error) => batch.forEach((pending) => pending.reject(error)))
      .finally(() => {
        this.#inFlight = false;
        this.#sendNext();
      });
  }

  #takeBatch(): PendingKey[] {
    let idBytes = 0;
    let keyBytes = 0;
    let count = 0;
    for (const { request } of this.#queue) {
      idBytes += request.dataKeyId.length * 3;
      keyBytes += request.length;
      const full = count === this.#limits.maxKeys || idBytes > this.#limits.maxKeyIdBytes ||
        keyBytes > this.#limits.maxKeyBytes;
      if (count > 0 && full) break;
      count++;
    }
    return this.#queue.splice(0, count);
  }

  async #send(batch: PendingKey[]): Promise<void> {
    if (batch.length === 1) {
      const [pending] = batch;
      await this.#calls.getDataKey(pending.request, pending.signal).then(pending.resolve, pending.reject);
      return;
    }
    let outcomes: DataKeyOutcome[];
    try {
      outcomes = await this.#calls.getDataKeys(batch.map((pending) => pending.request));
    } catch (error) {
      if (ConnectError.from(error).code === Code.Unimplemented) {
        this.#batchesUnsupported = true;
        // Every key waiting goes now, each in a call of its own, as later keys will (see get()).
        for (const pending of [...batch, ...this.#queue.splice(0)]) {
          if (pending.settled) continue;
          this.#calls.getDataKey(pending.request, pending.signal).then(pending.resolve, pending.reject);
        }
        return;
      }
      for (const pending of batch) pending.reject(error);
      return;
    }
    if (outcomes.length !== batch.length) {
      const error = new ConnectError(
        `key service answered ${outcomes.length} of ${batch.length} data keys`,
        Code.Internal,
      );
      for (const pending of batch) pending.reject(error);
      return;
    }
    batch.forEach((pending, index) => {
      const { outcome } = outcomes[index];
      if (outcome.case === "dataKey") pending.resolve(outcome.value);
      else pending.reject(outcomeError(outcome.value));
    });
  }
}

/**
 * A failed key's error: its code as sent (Unknown for one that is no error
 * code: 0, or out of range) and message; Internal for an outcome of neither
 * kind.
 */
function outcomeError(error: DataKeyError | undefined): ConnectError {
  if (!error) return new ConnectError("key service answered no outcome for a data key", Code.Internal);
  return new ConnectError(
    error.message,
    error.code > 0 && Code[error.code] !== undefined ? error.code : Code.Unknown,
  );
}

/**
 * A caller's abort as the call itself would have reported it: a ConnectError
 * reason as it is (a handler's deadline is DeadlineExceeded), an AbortError
 * as Canceled (without a cause: one reads as a lost call, `isUnanswered`).
 */
function aborted(signal: AbortSignal): ConnectError {
  return ConnectError.from(signal.reason, Code.Canceled);
}

function timedOut(timeoutMs: number): ConnectError {
  return new ConnectError(`no data key from the key service within ${timeoutMs} ms`, Code.DeadlineExceeded);
}
