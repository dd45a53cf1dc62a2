/**
 * A typed client of the key service (`kms.API/GetDataKey`) for the other
 * components, over gRPC on plaintext HTTP/2 (h2c; the key service is
 * cluster-internal).
 *
 * Like the original, every call opens its own connection and closes it when
 * the call ends, so an idle client holds nothing open and needs no closing.
 * (A shared HTTP/2 session would save ~0.5 ms per call on loopback, but
 * with Deno 2.9.6's node:http2 a GOAWAY on a reused client session was seen
 * to abort the whole process in nghttp2's `find_stream_on_goaway_func`.)
 *
 * @module
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { API } from "../gen/kms/kms_pb.ts";
import { parseEndpoint } from "../net/endpoint.ts";

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

/** A key service client. */
export interface KeyServiceClient {
  /**
   * Returns the data key for `keyID` (without the "key-" prefix, which the
   * key service adds) of `length` bytes.
   *
   * @throws {ConnectError} with the call's code: Unavailable (no connection)
   * and DeadlineExceeded are worth retrying (see
   * {@linkcode isRetryableKeyServiceError}); InvalidArgument is not.
   */
  getDataKey(keyID: string, length: number, options?: GetDataKeyOptions): Promise<Uint8Array>;
}

/** Default per-call deadline. */
export const DEFAULT_KEY_SERVICE_TIMEOUT_MS = 10_000;

/**
 * Creates a key service client.
 *
 * @throws {TypeError} when `endpoint` is not "host:port".
 */
export function createKeyServiceClient(options: KeyServiceClientOptions): KeyServiceClient {
  const baseUrl = endpointUrl(options.endpoint);
  const timeoutMs = options.timeoutMs ?? DEFAULT_KEY_SERVICE_TIMEOUT_MS;
  return {
    async getDataKey(keyID, length, callOptions = {}) {
      const sessionManager = new Http2SessionManager(baseUrl);
      try {
        const client = createClient(API, createGrpcTransport({ baseUrl, sessionManager }));
        const response = await client.getDataKey(
          { dataKeyId: keyID, length },
          { timeoutMs, signal: callOptions.signal },
        );
        if (response.dataKey.length !== length) {
          throw new ConnectError(
            `key service returned ${response.dataKey.length} bytes, want ${length}`,
            Code.Internal,
          );
        }
        return response.dataKey;
      } finally {
        sessionManager.abort();
      }
    },
  };
}

/** Whether a key service call failed in a way worth retrying (Unavailable, DeadlineExceeded). */
export function isRetryableKeyServiceError(err: unknown): boolean {
  const code = ConnectError.from(err).code;
  return code === Code.Unavailable || code === Code.DeadlineExceeded;
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
