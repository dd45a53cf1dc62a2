/**
 * A typed client of the key service (`kms.API/GetDataKey`) for the other
 * components, over the Connect protocol on plaintext HTTP/2 (h2c; the key
 * service is cluster-internal). The key service also speaks gRPC, for the
 * original system's clients; Connect costs both sides less per call (no
 * trailers, no envelope), and the join service makes one call per ticket.
 *
 * A client keeps one HTTP/2 connection to the key service, reused by every
 * call and reopened when it drops (`src/rpc/client.ts`); it is closed after
 * a minute without calls, or by `close()`. Keys asked for while a call is in
 * flight go out together in the next call (`batching.ts`).
 *
 * @module
 */
import { isUnanswered } from "../rpc/unanswered.ts";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { API, GetDataKeyRequestSchema } from "../gen/kms/kms_pb.ts";
import { parseEndpoint } from "../net/endpoint.ts";
import { connectRpc } from "../rpc/client.ts";
import { DataKeyBatcher } from "./batching.ts";
import { MAX_DATA_KEY_BYTES_PER_CALL } from "./limits.ts";

/** Options for {@linkcode createKeyServiceClient}. */
export interface KeyServiceClientOptions {
  /** The key service's "host:port", e.g. "key-service.kube-system:9000" or "[::1]:9000". */
  endpoint: string;
  /** Deadline of each call in milliseconds; default 10 000. */
  timeoutMs?: number;
}

/** Options of one call. */
export interface GetDataKeyOptions {
  /** Cancels the call (it then fails with code Canceled). */
  signal?: AbortSignal;
}

/** A key service client; dispose of it (or `close()` it) when done. */
export interface KeyServiceClient extends Disposable {
  /**
   * Returns the data key for `keyId` (without the "key-" prefix, which the
   * key service adds) of `length` bytes.
   *
   * @throws {ConnectError} with the call's code: Unavailable (no connection)
   * and DeadlineExceeded are worth retrying (see
   * {@linkcode isRetryableKeyServiceError}); InvalidArgument is not.
   */
  getDataKey(keyId: string, length: number, options?: GetDataKeyOptions): Promise<Uint8Array>;
  /** Closes the client's connection; a later call opens a new one. */
  close(): void;
}

/** Default per-call deadline. */
export const DEFAULT_KEY_SERVICE_TIMEOUT_MS = 10_000;

/**
 * The most keys in one call; well under the key service's 64 and its 4 KiB
 * messages (a state disk key's ID is a disk UUID, 36 characters).
 */
const KEYS_PER_CALL = 32;
/** The most bytes of key IDs in one call (counted at 3 bytes a character). */
const KEY_ID_BYTES_PER_CALL = 3_000;

/**
 * Creates a key service client.
 *
 * @throws {TypeError} when `endpoint` is not "host:port".
 */
export function createKeyServiceClient(options: KeyServiceClientOptions): KeyServiceClient {
  const baseUrl = endpointUrl(options.endpoint);
  const timeoutMs = options.timeoutMs ?? DEFAULT_KEY_SERVICE_TIMEOUT_MS;
  const connection = connectRpc({ baseUrl, protocol: "connect" });
  const client = createClient(API, connection.transport);
  const batcher = new DataKeyBatcher({
    getDataKey: async (request, signal) => (await client.getDataKey(request, { timeoutMs, signal })).dataKey,
    getDataKeys: async (requests) => (await client.getDataKeys({ requests }, { timeoutMs })).outcomes,
  }, {
    maxKeys: KEYS_PER_CALL,
    maxKeyBytes: MAX_DATA_KEY_BYTES_PER_CALL,
    maxKeyIdBytes: KEY_ID_BYTES_PER_CALL,
    timeoutMs,
  });
  return {
    async getDataKey(keyId, length, callOptions = {}) {
      const request = create(GetDataKeyRequestSchema, { dataKeyId: keyId, length });
      const dataKey = await batcher.get(request, callOptions.signal);
      if (dataKey.length !== length) {
        throw new ConnectError(`key service returned ${dataKey.length} bytes, want ${length}`, Code.Internal);
      }
      return dataKey;
    },
    close: connection.close,
    [Symbol.dispose]: connection.close,
  };
}

/**
 * Whether a key service call failed in a way worth retrying: Unavailable,
 * DeadlineExceeded, or no answer at all (the connection lost mid-call, e.g.
 * the key service restarting: `src/rpc/unanswered.ts`). For a call the
 * caller did not cancel.
 */
export function isRetryableKeyServiceError(err: unknown): boolean {
  const code = ConnectError.from(err).code;
  return code === Code.Unavailable || code === Code.DeadlineExceeded || isUnanswered(err);
}

function endpointUrl(endpoint: string): string {
  let parsed;
  try {
    parsed = parseEndpoint(endpoint);
  } catch {
    throw new TypeError(`invalid key service endpoint "${endpoint}": want host:port`);
  }
  return `http://${parsed.host}:${parsed.port}`;
}
