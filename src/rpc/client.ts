/**
 * The project's RPC clients' connection: one HTTP/2 connection to one
 * server, reused by every call and reopened when it drops, with the
 * runtime's session teardown guarded (`http2_guard.ts`), for gRPC, Connect
 * or gRPC-Web. A unary call the server refused unprocessed (RST_STREAM
 * REFUSED_STREAM, e.g. racing the server's idle GOAWAY) is sent again once.
 *
 * ```ts
 * using connection = connectRpc({ baseUrl: "http://127.0.0.1:9000" });
 * const client = createClient(API, connection.transport);
 * ```
 *
 * @module
 */
import { ConnectError, type Interceptor, type Transport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { guardHttp2Teardown } from "./http2_guard.ts";

/** The wire protocol of a connection's calls. */
export type RpcProtocol = "grpc" | "connect" | "grpc-web";

/** Options for {@linkcode connectRpc}. */
export interface RpcConnectionOptions {
  /** "http://host:port" (plaintext HTTP/2) or "https://host:port" (TLS). */
  baseUrl: string;
  /** Default "grpc". */
  protocol?: RpcProtocol;
  /** PEM CA certificates to trust for an https URL, instead of the system's. */
  caCerts?: string[];
  /**
   * Accept any server certificate. Only where security does not rest on
   * TLS (the attested exchange seals every secret to an attested key).
   */
  skipServerVerification?: boolean;
  /** Close the connection after this long without a call; default 60 s. */
  idleConnectionTimeoutMs?: number;
  /**
   * Largest message a call reads from the server; a larger one fails the
   * call (ResourceExhausted) before it is buffered. Default Connect's, 4 GiB:
   * set it when the server is not trusted.
   */
  readMaxBytes?: number;
}

/** A connection; closing it ends the HTTP/2 session and fails calls still open. */
export interface RpcConnection extends Disposable {
  /** The transport to create clients with. */
  readonly transport: Transport;
  /** Closes the connection (calls made afterwards open a new one). */
  close(): void;
}

/** Default idle time before a client connection is closed. */
const DEFAULT_IDLE_CONNECTION_TIMEOUT_MS = 60_000;

/** Opens (lazily, on the first call) a reusable connection to `baseUrl`. */
export function connectRpc(options: RpcConnectionOptions): RpcConnection {
  guardHttp2Teardown();
  const sessionManager = new Http2SessionManager(
    options.baseUrl,
    { idleConnectionTimeoutMs: options.idleConnectionTimeoutMs ?? DEFAULT_IDLE_CONNECTION_TIMEOUT_MS },
    {
      ...(options.caCerts ? { ca: options.caCerts } : {}),
      ...(options.skipServerVerification ? { rejectUnauthorized: false } : {}),
    },
  );
  const common = {
    baseUrl: options.baseUrl,
    sessionManager,
    interceptors: [retryRefusedStream],
    ...(options.readMaxBytes === undefined ? {} : { readMaxBytes: options.readMaxBytes }),
  };
  const transports: Record<RpcProtocol, () => Transport> = {
    grpc: () => createGrpcTransport(common),
    connect: () => createConnectTransport({ ...common, httpVersion: "2" }),
    "grpc-web": () => createGrpcWebTransport({ ...common, httpVersion: "2" }),
  };
  const transport = transports[options.protocol ?? "grpc"]();
  const close = () => sessionManager.abort();
  return { transport, close, [Symbol.dispose]: close };
}

/**
 * Sends a unary call again, once, when the server refused its stream: a
 * refused stream was not processed at all (RFC 9113 §8.7), so this is safe
 * for any method. connect-node reports it as Internal.
 */
const retryRefusedStream: Interceptor = (next) => async (request) => {
  try {
    return await next(request);
  } catch (error) {
    if (request.stream || !wasRefused(error)) throw error;
    return await next(request);
  }
};

function wasRefused(error: unknown): boolean {
  for (let cause = error; cause instanceof Error; cause = cause.cause) {
    const message = cause instanceof ConnectError ? cause.rawMessage : cause.message;
    if (/REFUSED_STREAM/.test(message)) return true;
    if (cause.cause === cause) break;
  }
  return false;
}
