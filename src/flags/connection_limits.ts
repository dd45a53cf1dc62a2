/**
 * The connection-limit flags every RPC service takes (see `src/rpc/limits.ts`).
 *
 * @module
 */
import { type ConnectionLimits, DEFAULT_CONNECTION_LIMITS } from "../rpc/limits.ts";
import { parseCount, parseSeconds, parseWholeNumber } from "./flags.ts";

/** The flags' `parseArgs` options; spread them into a component's options. */
export const CONNECTION_LIMIT_OPTIONS = {
  "max-connections": { type: "string", default: String(DEFAULT_CONNECTION_LIMITS.maxConnections) },
  "max-connections-per-peer": {
    type: "string",
    default: String(DEFAULT_CONNECTION_LIMITS.maxConnectionsPerPeer),
  },
  "max-streams-per-connection": {
    type: "string",
    default: String(DEFAULT_CONNECTION_LIMITS.maxConcurrentStreams),
  },
  "max-calls-in-progress": {
    type: "string",
    default: String(DEFAULT_CONNECTION_LIMITS.maxCallsInProgress),
  },
  "max-calls-waiting": { type: "string", default: String(DEFAULT_CONNECTION_LIMITS.maxCallsWaiting) },
  "handshake-timeout": {
    type: "string",
    default: String(DEFAULT_CONNECTION_LIMITS.handshakeTimeoutMs / 1000),
  },
  "idle-timeout": { type: "string", default: String(DEFAULT_CONNECTION_LIMITS.idleTimeoutMs / 1000) },
  "request-timeout": { type: "string", default: String(DEFAULT_CONNECTION_LIMITS.requestTimeoutMs / 1000) },
} as const;

/** The flags' lines for a component's `--help` (33-column flag column, as the services use). */
export const CONNECTION_LIMITS_USAGE =
  `  --max-connections <n>            connections open at once (default ${DEFAULT_CONNECTION_LIMITS.maxConnections})
  --max-connections-per-peer <n>   connections open at once from one IPv4 address or IPv6 /64 (default ${DEFAULT_CONNECTION_LIMITS.maxConnectionsPerPeer})
  --max-streams-per-connection <n> calls open at once on one HTTP/2 connection (default ${DEFAULT_CONNECTION_LIMITS.maxConcurrentStreams})
  --max-calls-in-progress <n>      calls worked on at once over all connections (default ${DEFAULT_CONNECTION_LIMITS.maxCallsInProgress})
  --max-calls-waiting <n>          calls waiting for one of those at most, 0 for none; a call beyond
                                   is refused at once, retry later (default ${DEFAULT_CONNECTION_LIMITS.maxCallsWaiting})
  --handshake-timeout <seconds>    close a connection whose TLS handshake, or an HTTP/1.1 request's
                                   headers, take longer (default ${
    DEFAULT_CONNECTION_LIMITS.handshakeTimeoutMs / 1000
  }; plaintext HTTP/2 has neither)
  --idle-timeout <seconds>         close a connection with no call open for this long (default ${
    DEFAULT_CONNECTION_LIMITS.idleTimeoutMs / 1000
  })
  --request-timeout <seconds>      cancel a call not finished after this long (default ${
    DEFAULT_CONNECTION_LIMITS.requestTimeoutMs / 1000
  })
`;

/**
 * Reads the flags' values.
 *
 * @throws {UsageError} naming the flag when a value is not a positive number
 * (counts must be whole numbers; `--max-calls-waiting` may be 0).
 */
export function parseConnectionLimits(
  values: { [K in keyof typeof CONNECTION_LIMIT_OPTIONS]: string },
): Partial<ConnectionLimits> {
  return {
    maxConnections: parseCount(values["max-connections"], "--max-connections"),
    maxConnectionsPerPeer: parseCount(values["max-connections-per-peer"], "--max-connections-per-peer"),
    maxConcurrentStreams: parseCount(values["max-streams-per-connection"], "--max-streams-per-connection"),
    maxCallsInProgress: parseCount(values["max-calls-in-progress"], "--max-calls-in-progress"),
    maxCallsWaiting: parseWholeNumber(values["max-calls-waiting"], "--max-calls-waiting"),
    handshakeTimeoutMs: parseSeconds(values["handshake-timeout"], "--handshake-timeout"),
    idleTimeoutMs: parseSeconds(values["idle-timeout"], "--idle-timeout"),
    requestTimeoutMs: parseSeconds(values["request-timeout"], "--request-timeout"),
  };
}
