/**
 * A browser listener: a second port of a service that serves only its
 * read-only operator RPCs (the bootstrapper's `init.API/GetAttestation`, the
 * join service's `join.API/GetStatus`) to web pages such as the browser
 * console, over plain HTTP/1.1 with CORS for an origin allow-list
 * ({@linkcode CorsPolicy}).
 *
 * Why a second port, and why plain HTTP: the services' own ports speak TLS
 * with a certificate made at start, which no browser accepts without the
 * operator trusting it first, and a page cannot ask the browser to make an
 * exception. Nothing these RPCs answer is secret (evidence is what a node
 * shows anyone; the status holds no secret), and a page trusts neither the
 * transport nor the node: it verifies the evidence itself for a nonce it
 * drew, against the operator's config, as the CLI does. A network attacker
 * can therefore make a verification fail, never pass. The status has no
 * such check: see the README for what that means. The main ports never
 * carry a browser's calls, and this port never carries `Init` or tickets:
 * its router holds only the routes it is given.
 *
 * Bounds: connections in all and per peer (an IPv4 address or an IPv6 /64),
 * request messages (4 KiB by default: these requests are a nonce at most),
 * buffered request bytes, unary calls in progress and waiting (a call beyond
 * both is refused by the listener itself: these routes are no decisions to
 * audit), the handshake timeout for a request's headers, the call deadline, and connections
 * idle for the idle timeout are closed.
 *
 * @module
 */
import * as http from "node:http";
import type { Socket } from "node:net";
import { listen } from "./listen.ts";
import type { ConnectRouter } from "@connectrpc/connect";
import { createContextValues } from "@connectrpc/connect";
import { PeerSlots } from "../limits/peer_slots.ts";
import { CorsPolicy } from "./cors.ts";
import { createRpcHandler } from "./handler.ts";
import { type ConnectionLimits, DEFAULT_CONNECTION_LIMITS } from "./limits.ts";
import { peerAddressKey } from "./peer.ts";
import { checkListenPermission, type RpcServer } from "./server.ts";

/** Options for {@linkcode serveBrowserRpc}. */
export interface BrowserRpcOptions {
  /** Registers the read-only routes this port serves, and nothing else. */
  routes: (router: ConnectRouter) => void;
  /** Address to bind. */
  hostname: string;
  /** Port to bind; 0 picks a free one. */
  port: number;
  /** The web origins whose pages may call (exact origins, e.g. "http://127.0.0.1:9080"); none by default. */
  allowedOrigins: readonly string[];
  /** Largest accepted request message in bytes; default 4 KiB. */
  readMaxBytes?: number;
  /** Bounds on what clients may hold (HTTP/2-only limits do not apply); defaults {@linkcode DEFAULT_CONNECTION_LIMITS}. */
  limits?: Partial<ConnectionLimits>;
  /** Called when a response could not be delivered for a reason other than the client going away. */
  onResponseError?: (error: unknown) => void;
}

/** Largest request message of a browser listener by default. */
const DEFAULT_READ_MAX_BYTES = 4 * 1024;
/** How often node:http checks its header and request deadlines. */
const DEADLINE_CHECK_INTERVAL_MS = 1_000;

/** Starts a browser listener; resolves once it listens. */
export async function serveBrowserRpc(options: BrowserRpcOptions): Promise<RpcServer> {
  await checkListenPermission(options.hostname, options.port);
  const limits: ConnectionLimits = { ...DEFAULT_CONNECTION_LIMITS, ...options.limits };
  const policy = new CorsPolicy(options.allowedOrigins);
  const rpcHandler = createRpcHandler({
    routes: options.routes,
    readMaxBytes: options.readMaxBytes ?? DEFAULT_READ_MAX_BYTES,
    contextValues: (req) => createContextValues().set(peerAddressKey, req.socket?.remoteAddress ?? "unknown"),
    maxRequestBytesPerConnection: limits.maxRequestBytesPerConnection,
    maxRequestBytesInFlight: limits.maxRequestBytesInFlight,
    maxCallsInProgress: limits.maxCallsInProgress,
    maxCallsWaiting: limits.maxCallsWaiting,
    requestTimeoutMs: limits.requestTimeoutMs,
    onResponseError: options.onResponseError,
  });
  const server = http.createServer({
    headersTimeout: limits.handshakeTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: Math.min(limits.idleTimeoutMs, 5_000),
    connectionsCheckingInterval: DEADLINE_CHECK_INTERVAL_MS,
    maxHeaderSize: limits.maxHeaderListBytes,
  }, (req, res) => {
    if (policy.apply(req, res) === "answered") return;
    rpcHandler(req, res);
  });
  server.maxConnections = limits.maxConnections;

  const slots = new PeerSlots(limits.maxConnectionsPerPeer);
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    const giveBack = slots.tryTake(socket.remoteAddress ?? "unknown");
    if (!giveBack) {
      socket.destroy();
      return;
    }
    sockets.add(socket);
    // A connection that sends and receives nothing for this long is closed (node:http's own deadlines
    // start only with a request).
    socket.setTimeout(limits.idleTimeoutMs, () => socket.destroy());
    socket.once("close", () => {
      sockets.delete(socket);
      giveBack();
    });
  });
  server.on("clientError", (_error: Error, socket: Socket) => socket.destroy());

  const port = await listen(server, options.port, options.hostname);
  return {
    address: { hostname: options.hostname, port },
    async shutdown(graceMs = 10_000) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const timer = setTimeout(() => {
        for (const socket of sockets) socket.destroy();
      }, graceMs);
      await closed;
      clearTimeout(timer);
    },
  };
}
