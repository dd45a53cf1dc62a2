/**
 * What one peer may hold open on an RPC server: connections, streams,
 * buffered request bytes and time. Every bound is enforced by `serveRpc`;
 * the defaults suit the services here (small unary calls).
 *
 * @module
 */

/** Limits on what clients can hold; see {@linkcode DEFAULT_CONNECTION_LIMITS} for the defaults. */
export interface ConnectionLimits {
  /** Connections open at once; more are refused. */
  maxConnections: number;
  /**
   * Connections open at once from one peer (an IPv4 address, or an IPv6 /64);
   * more are closed at once.
   */
  maxConnectionsPerPeer: number;
  /** Streams (calls) open at once on one HTTP/2 connection, advertised in SETTINGS; more are refused. */
  maxConcurrentStreams: number;
  /** Largest request header list in bytes (SETTINGS_MAX_HEADER_LIST_SIZE); larger requests are refused. */
  maxHeaderListBytes: number;
  /** Request-body bytes buffered at once for one connection; a call beyond gets ResourceExhausted. */
  maxRequestBytesPerConnection: number;
  /** Request-body bytes buffered at once over all connections; a call beyond gets ResourceExhausted. */
  maxRequestBytesInFlight: number;
  /**
   * Unary calls the services work on at once, over all connections; up to {@linkcode maxCallsWaiting}
   * more wait, in arrival order, with their request read, under their deadline (see `handler.ts`).
   */
  maxCallsInProgress: number;
  /**
   * Unary calls waiting for one of the {@linkcode maxCallsInProgress} at once (0: none wait). A call
   * that arrives with both full is refused at once with ResourceExhausted, or passed to a service that
   * refuses it itself (see `overload.ts`).
   *
   * The default, 2,048, lets a burst of 1,000 nodes joining at once wait without a refusal (with 512,
   * 174 of 1,000 were refused on their first attempt, and a real join client retries only after 30 s);
   * at the 90 to 220 tickets per second measured on 2 cores, the last of 2,048 waiting calls is taken
   * up after 10 to 23 s, inside the 30 s call deadline. A waiting call holds only its request (a ticket
   * request is 3 to 5 KiB, counted in the byte budgets).
   */
  maxCallsWaiting: number;
  /** How long a client may take for its TLS handshake. */
  handshakeTimeoutMs: number;
  /**
   * How long one call may take from its headers to the end of its response,
   * including a client that sends its body or reads the answer slowly; the
   * call is then cancelled (RST_STREAM CANCEL, or the HTTP/1.1 connection closed).
   */
  requestTimeoutMs: number;
  /**
   * An HTTP/2 connection with no call open for this long is closed (GOAWAY),
   * and destroyed if it has not closed {@linkcode IDLE_CLOSE_GRACE_MS} after
   * that, or after the last call the GOAWAY let finish.
   * PINGs and SETTINGS do not count as activity.
   */
  idleTimeoutMs: number;
}

/**
 * Time an idle connection gets to close after its GOAWAY before its socket
 * is destroyed. It has no call open, so a client that honours GOAWAY is
 * gone long before.
 */
export const IDLE_CLOSE_GRACE_MS = 1_000;

/** The default limits. */
export const DEFAULT_CONNECTION_LIMITS: Readonly<ConnectionLimits> = Object.freeze({
  maxConnections: 4096,
  maxConnectionsPerPeer: 64,
  maxConcurrentStreams: 100,
  maxHeaderListBytes: 16 * 1024,
  maxRequestBytesPerConnection: 4 * 1024 * 1024,
  maxRequestBytesInFlight: 64 * 1024 * 1024,
  maxCallsInProgress: 32,
  maxCallsWaiting: 2048,
  handshakeTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  idleTimeoutMs: 120_000,
});
