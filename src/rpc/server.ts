/**
 * One port serving gRPC, gRPC-Web and the Connect protocol, over TLS
 * (HTTP/2 and HTTP/1.1 through ALPN) or plaintext HTTP/2 (h2c), built to
 * survive hostile peers: the runtime's session teardown is guarded
 * (`http2_guard.ts`), and connections, streams, buffered request bytes,
 * unary calls worked on at once and waiting (`handler.ts`; a call beyond
 * both is refused at once, see `overload.ts`), header sizes and time are
 * bounded ({@linkcode ConnectionLimits}).
 * Shutdown is graceful: stop accepting, let in-flight calls finish, then
 * close.
 *
 * @module
 */
import * as http2 from "node:http2";
import type { Socket } from "node:net";
import type { DescMethodUnary } from "@bufbuild/protobuf";
import { listen } from "./listen.ts";
import {
  type ConnectRouter,
  type ContextValues,
  createContextValues,
  type Interceptor,
} from "@connectrpc/connect";
import { guardHttp2Teardown } from "./http2_guard.ts";
import { createRpcHandler, type RpcRequest, type RpcResponse } from "./handler.ts";
import { type ConnectionLimits, DEFAULT_CONNECTION_LIMITS } from "./limits.ts";
import { closeWhenIdle } from "./idle_close.ts";
import { PeerSlots } from "../limits/peer_slots.ts";
import { peerAddressKey } from "./peer.ts";

/** TLS material for {@linkcode serveRpc}. */
export interface TlsOptions {
  /** PEM certificate chain. */
  cert: string;
  /** PEM private key. */
  key: string;
}

/** Options for {@linkcode serveRpc}. */
export interface ServeRpcOptions {
  /** Registers the services. */
  routes: (router: ConnectRouter) => void;
  /** Address to bind, e.g. "0.0.0.0" or "127.0.0.1". */
  hostname: string;
  /** Port to bind; 0 picks a free one. */
  port: number;
  /** Serve TLS; without it the server speaks plaintext HTTP/2 only. */
  tls?: TlsOptions;
  /** Interceptors applied to every call. */
  interceptors?: Interceptor[];
  /** Largest accepted request message in bytes; default 64 KiB. */
  readMaxBytes?: number;
  /** Per-request context values; the peer address ({@linkcode peerAddressKey}) is always set. */
  contextValues?: (req: RpcRequest) => ContextValues;
  /** Bounds on what clients may hold; each one defaults to {@linkcode DEFAULT_CONNECTION_LIMITS}. */
  limits?: Partial<ConnectionLimits>;
  /**
   * Unary methods that refuse calls beyond `maxCallsInProgress` + `maxCallsWaiting` themselves, e.g. to
   * audit the refusal: such a call reaches the method at once, with `callOverloadedKey` (`overload.ts`) set,
   * and the method must refuse it. Every other method's are refused by the server with ResourceExhausted
   * (the default, for every method).
   */
  overloadRefusedByService?: readonly DescMethodUnary[];
  /** Extra plain-HTTP handler tried before the RPC routes (e.g. /healthz); return true if handled. */
  httpHandler?: (req: RpcRequest, res: RpcResponse) => boolean;
  /** Called when a response could not be delivered for a reason other than the client going away. */
  onResponseError?: (error: unknown) => void;
}

/** A running RPC server. */
export interface RpcServer {
  /** The bound address (the real port when 0 was asked). */
  readonly address: { hostname: string; port: number };
  /**
   * Lets in-flight calls finish, gives their clients up to 1 s to hang up
   * (so none loses an answer's last frames), then stops listening and closes
   * every connection (GOAWAY); whatever outlasts `graceMs` (default 10 s) in
   * all is destroyed.
   */
  shutdown(graceMs?: number): Promise<void>;
}

/** Default largest request message. */
const DEFAULT_READ_MAX_BYTES = 64 * 1024;

/** Starts an RPC server; resolves once it listens. */
export async function serveRpc(options: ServeRpcOptions): Promise<RpcServer> {
  await checkListenPermission(options.hostname, options.port);
  guardHttp2Teardown();
  const limits: ConnectionLimits = { ...DEFAULT_CONNECTION_LIMITS, ...options.limits };
  const rpcHandler = createRpcHandler({
    routes: options.routes,
    interceptors: options.interceptors,
    readMaxBytes: options.readMaxBytes ?? DEFAULT_READ_MAX_BYTES,
    contextValues: (req) => {
      const values = options.contextValues?.(req) ?? createContextValues();
      return values.set(peerAddressKey, req.socket?.remoteAddress ?? "unknown");
    },
    maxRequestBytesPerConnection: limits.maxRequestBytesPerConnection,
    maxRequestBytesInFlight: limits.maxRequestBytesInFlight,
    maxCallsInProgress: limits.maxCallsInProgress,
    maxCallsWaiting: limits.maxCallsWaiting,
    overloadRefusedByService: options.overloadRefusedByService,
    requestTimeoutMs: limits.requestTimeoutMs,
    onResponseError: options.onResponseError,
  });
  const handler = (req: RpcRequest, res: RpcResponse) => {
    if (options.httpHandler?.(req, res)) return;
    rpcHandler(req, res);
  };
  const http2Options: http2.ServerOptions = {
    settings: {
      maxConcurrentStreams: limits.maxConcurrentStreams,
      maxHeaderListSize: limits.maxHeaderListBytes,
    },
    maxSessionRejectedStreams: 100,
    maxSessionInvalidFrames: 100,
  };
  const server: http2.Http2Server | http2.Http2SecureServer = options.tls
    ? http2.createSecureServer(
      {
        ...http2Options,
        cert: options.tls.cert,
        key: options.tls.key,
        allowHTTP1: true,
        handshakeTimeout: limits.handshakeTimeoutMs,
      },
      handler,
    )
    : http2.createServer(http2Options, handler);

  if (options.tls) {
    // HTTP/1.1 over TLS (ALPN): headers within the handshake deadline, the whole request within the
    // call's (node:http checks them every 30 s); the http2 typings do not declare these fields.
    Object.assign(server, {
      headersTimeout: limits.handshakeTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
    });
  }
  server.maxConnections = limits.maxConnections;
  const connections = new Connections(server, limits.maxConnectionsPerPeer);
  const sessions = new Set<http2.ServerHttp2Session>();
  const streams = new OpenStreams();
  server.on("session", (session: http2.ServerHttp2Session) => {
    sessions.add(session);
    session.on("stream", (stream: http2.ServerHttp2Stream) => streams.track(stream));
    session.once("close", () => sessions.delete(session));
    session.on("error", () => {});
    const socket = connections.socketOf(session);
    if (socket) closeWhenIdle(session, socket, { idleMs: limits.idleTimeoutMs });
    else session.destroy(); // its connection is already gone
    closeOnResetFlood(session);
  });
  server.on("sessionError", () => {});

  const port = await listen(server, options.port, options.hostname);
  return {
    address: { hostname: options.hostname, port },
    async shutdown(graceMs = 10_000) {
      // Deno's node:http2 reports the listener, and even a session, closed before what is in flight has
      // left the process, and its client can drop a stream's last frames when GOAWAY and FIN arrive with
      // them. So: calls in flight end; clients get a moment to take their answers and hang up; then
      // GOAWAY and each connection's own socket closes. Only what outlasts the grace is destroyed.
      let timer: ReturnType<typeof setTimeout> | undefined;
      const deadline = new Promise<void>((resolve) => timer = setTimeout(resolve, graceMs));
      const socketsClosed = () =>
        Promise.all(
          [...sessions].map((session) => {
            const socket = connections.socketOf(session);
            return !socket || socket.destroyed
              ? Promise.resolve()
              : new Promise<void>((resolve) => socket.once("close", () => resolve()));
          }),
        );
      await Promise.race([streams.idle(), deadline]);
      let hangUpTimer: ReturnType<typeof setTimeout> | undefined;
      const hangUpGrace = new Promise<void>((resolve) =>
        hangUpTimer = setTimeout(resolve, Math.min(PEER_HANG_UP_GRACE_MS, graceMs))
      );
      await Promise.race([socketsClosed(), deadline, hangUpGrace]);
      clearTimeout(hangUpTimer);
      // Closing the listener earlier cut streams in flight in Deno's node:http2.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.close();
      await Promise.race([socketsClosed(), deadline]);
      clearTimeout(timer);
      for (const session of sessions) session.destroy();
      await closed;
    },
  };
}

/** How long a shutdown waits, once no call is in flight, for clients to hang up before it sends GOAWAY. */
const PEER_HANG_UP_GRACE_MS = 1_000;

/** Counts the server's open streams, for a shutdown that lets calls in flight end. */
class OpenStreams {
  #open = 0;
  #waiters: (() => void)[] = [];

  /** Counts `stream` until it closes. */
  track(stream: http2.ServerHttp2Stream): void {
    this.#open++;
    stream.once("close", () => {
      if (--this.#open === 0) { for (const wake of this.#waiters.splice(0)) wake(); }
    });
  }

  /** Resolves once no stream is open. */
  idle(): Promise<void> {
    return this.#open === 0 ? Promise.resolve() : new Promise((resolve) => this.#waiters.push(resolve));
  }
}

/**
 * The server's open TCP connections: closes, at once, every connection
 * beyond `maxPerPeer` from one peer (an IPv4 address or an IPv6 /64, see
 * {@linkcode PeerSlots}), and finds the raw socket under
 * a session (`session.socket` is a proxy that cannot be destroyed).
 */
class Connections {
  readonly #sockets = new Map<string, Socket>();

  constructor(server: http2.Http2Server | http2.Http2SecureServer, maxPerPeer: number) {
    const slots = new PeerSlots(maxPerPeer);
    // Before the server's own listener, which starts a plaintext session at once.
    server.prependListener("connection", (socket: Socket) => {
      const giveBack = slots.tryTake(socket.remoteAddress ?? "unknown");
      if (!giveBack) {
        socket.destroy();
        return;
      }
      const key = `${socket.remoteAddress}:${socket.remotePort}`;
      this.#sockets.set(key, socket);
      socket.once("close", () => {
        this.#sockets.delete(key);
        giveBack();
      });
    });
  }

  /** The TCP socket carrying `session`, if it is still open. */
  socketOf(session: http2.Http2Session): Socket | undefined {
    const socket = session.socket as Socket | undefined; // gone once the session is destroyed
    return socket && this.#sockets.get(`${socket.remoteAddress}:${socket.remotePort}`);
  }
}

/** Streams a client may reset within {@linkcode RESET_WINDOW_MS} before its connection is closed. */
const RESET_LIMIT = 100;
const RESET_WINDOW_MS = 10_000;

/**
 * Closes `session` (GOAWAY, calls in flight finish) once its client has
 * reset {@linkcode RESET_LIMIT} streams within {@linkcode RESET_WINDOW_MS}:
 * every reset stream has already cost the server a handler ("rapid reset",
 * CVE-2023-44487). An honest client just opens a new connection.
 */
function closeOnResetFlood(session: http2.ServerHttp2Session): void {
  let windowStart = -Infinity;
  let resets = 0;
  session.on("stream", (stream: http2.ServerHttp2Stream) => {
    stream.once("aborted", () => {
      const now = performance.now();
      if (now - windowStart > RESET_WINDOW_MS) {
        windowStart = now;
        resets = 0;
      }
      if (++resets === RESET_LIMIT) session.close();
    });
  });
}

/**
 * Fails clearly when binding lies outside the net permissions: node:net
 * would otherwise throw NotCapable asynchronously, outside any handler.
 */
export async function checkListenPermission(address: string, port: number): Promise<void> {
  const host = address.includes(":") && !address.startsWith("[") ? `[${address}]` : address;
  const { state } = await Deno.permissions.query({
    name: "net",
    host: port === 0 ? host : `${host}:${port}`,
  });
  if (state !== "granted") {
    throw new Error(
      `listen address ${address} is outside this process's net permissions (grant it with --allow-net=${host})`,
    );
  }
}
