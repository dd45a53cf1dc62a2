/**
 * One port serving gRPC, gRPC-Web and the Connect protocol, over TLS
 * (HTTP/2 and HTTP/1.1 through ALPN) or plaintext HTTP/2 (h2c), with
 * graceful shutdown: stop accepting, let in-flight calls finish, then close.
 *
 * @module
 */
import * as http2 from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import {
  type ConnectRouter,
  type ContextValues,
  createContextValues,
  type Interceptor,
} from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { peerAddressKey } from "./peer.ts";

/** How long a client may take for its TLS handshake. */
const HANDSHAKE_TIMEOUT_MS = 10_000;
/** How long an idle connection may take to close after its GOAWAY before it is destroyed. */
const IDLE_CLOSE_GRACE_MS = 10_000;

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
  /** Largest accepted request message in bytes; default 4 MiB as grpc-go. */
  readMaxBytes?: number;
  /** Per-request context values; the peer address ({@linkcode peerAddressKey}) is always set. */
  contextValues?: (req: http2.Http2ServerRequest) => ContextValues;
  /** Most connections open at once; more are refused. Default 4096. */
  maxConnections?: number;
  /** Most connections open at once from one address; more are closed at once. Default 64. */
  maxConnectionsPerPeer?: number;
  /**
   * A connection idle this long is closed (GOAWAY), and destroyed if it has
   * not closed 10 s later. Default 120 s.
   */
  idleTimeoutMs?: number;
  /** Extra plain-HTTP handler tried before the RPC routes (e.g. /healthz); return true if handled. */
  httpHandler?: (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => boolean;
}

/** A running RPC server. */
export interface RpcServer {
  /** The bound address (the real port when 0 was asked). */
  readonly address: { hostname: string; port: number };
  /**
   * Stops accepting connections, lets in-flight calls finish within
   * `graceMs` (default 10 s), then closes whatever remains.
   */
  shutdown(graceMs?: number): Promise<void>;
}

/** Starts an RPC server; resolves once it listens. */
export async function serveRpc(options: ServeRpcOptions): Promise<RpcServer> {
  await checkListenPermission(options.hostname, options.port);
  const adapter = connectNodeAdapter({
    routes: options.routes,
    interceptors: options.interceptors,
    readMaxBytes: options.readMaxBytes ?? 4 * 1024 * 1024,
    // Every request here is an Http2ServerRequest: both server kinds below are node:http2's.
    contextValues: (req) => {
      const values = options.contextValues?.(req as http2.Http2ServerRequest) ?? createContextValues();
      return values.set(peerAddressKey, req.socket?.remoteAddress ?? "unknown");
    },
  });
  const handler = (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
    if (options.httpHandler?.(req, res)) return;
    adapter(req, res);
  };
  const server: http2.Http2Server | http2.Http2SecureServer = options.tls
    ? http2.createSecureServer(
      {
        cert: options.tls.cert,
        key: options.tls.key,
        allowHTTP1: true,
        handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
      },
      handler,
    )
    : http2.createServer({}, handler);

  // Bounds on what unauthenticated peers can hold open: connections overall and per address, a TLS
  // handshake deadline, and idle connections closed (and destroyed if they ignore the GOAWAY).
  server.maxConnections = options.maxConnections ?? 4096;
  const maxPerPeer = options.maxConnectionsPerPeer ?? 64;
  const perPeer = new Map<string, number>();
  server.on("connection", (socket: Socket) => {
    const peer = socket.remoteAddress ?? "unknown";
    const open = (perPeer.get(peer) ?? 0) + 1;
    if (open > maxPerPeer) {
      socket.destroy();
      return;
    }
    perPeer.set(peer, open);
    socket.once("close", () => {
      const left = (perPeer.get(peer) ?? 1) - 1;
      if (left > 0) perPeer.set(peer, left);
      else perPeer.delete(peer);
    });
  });
  const idleTimeoutMs = options.idleTimeoutMs ?? 120_000;
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session: http2.ServerHttp2Session) => {
    sessions.add(session);
    session.setTimeout(idleTimeoutMs, () => {
      session.close();
      const force = setTimeout(() => session.destroy(), IDLE_CLOSE_GRACE_MS);
      session.once("close", () => clearTimeout(force));
    });
    session.on("close", () => sessions.delete(session));
    session.on("error", () => {});
  });
  server.on("sessionError", () => {});

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.hostname, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const bound = server.address() as AddressInfo;
  return {
    address: { hostname: options.hostname, port: bound.port },
    async shutdown(graceMs = 10_000) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.close(); // GOAWAY: in-flight streams finish
      let timer: ReturnType<typeof setTimeout> | undefined;
      const deadline = new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          for (const session of sessions) session.destroy();
          resolve();
        }, graceMs);
      });
      await Promise.race([closed, deadline]);
      clearTimeout(timer);
      for (const session of sessions) session.destroy();
      await closed;
    },
  };
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
