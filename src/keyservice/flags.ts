/**
 * The key service's command line.
 *
 * @module
 */
import type { LogLevel } from "../log/logger.ts";
import { parseFlags, parseListenAddress, parseLogLevelFlag, parsePort, UsageError } from "../flags/flags.ts";
import {
  CONNECTION_LIMIT_OPTIONS,
  CONNECTION_LIMITS_USAGE,
  parseConnectionLimits,
} from "../flags/connection_limits.ts";
import type { ConnectionLimits } from "../rpc/limits.ts";

/** The key service's settings. */
export interface KeyServiceFlags {
  /** Port to listen on; 0 picks a free one. */
  port: number;
  /** File holding the master secret (raw bytes, at least 16). */
  masterSecretPath: string;
  /** File holding the master salt (raw bytes, at least 32). */
  saltPath: string;
  /** Address to bind. */
  listenAddress: string;
  /** The lowest level logged. */
  logLevel: LogLevel;
  /** Connection limits given on the command line. */
  limits: Partial<ConnectionLimits>;
}

/** Usage text for `--help`. */
export const KEY_SERVICE_USAGE = `Usage: key-service [flags]

Derives data keys from the cluster's master secret (kms.API/GetDataKey over
plaintext HTTP/2: gRPC, gRPC-Web and Connect on one port).

Flags:
  --port <port>             port to listen on, 0 for any free port (default 9000)
  --listen-address <addr>   IP address to bind (default 0.0.0.0)
  --master-secret <file>    master secret file, at least 16 bytes (default /var/config/mastersecret)
  --salt <file>             salt file, at least 32 bytes (default /var/config/salt)
  --log-level <level>       debug, info, warn or error (default info)
  --help                    show this help

Connection limits:
${CONNECTION_LIMITS_USAGE}`;

/**
 * Parses the command line. Returns "help" when `--help` is given.
 *
 * @throws {UsageError} for an unknown flag, a positional argument, a missing
 * flag value, a bad port, listen address or log level.
 */
export function parseKeyServiceFlags(args: string[]): KeyServiceFlags | "help" {
  const values = parseFlags(args, {
    port: { type: "string", default: "9000" },
    "listen-address": { type: "string", default: "0.0.0.0" },
    "master-secret": { type: "string", default: "/var/config/mastersecret" },
    salt: { type: "string", default: "/var/config/salt" },
    "log-level": { type: "string", default: "info" },
    help: { type: "boolean", default: false },
    ...CONNECTION_LIMIT_OPTIONS,
  }, "key service");
  if (values.help) return "help";
  const logLevel = parseLogLevelFlag(values["log-level"]);
  for (const name of ["master-secret", "salt"] as const) {
    if (values[name] === "") throw new UsageError(`--${name} must not be empty`);
  }
  return {
    port: parsePort(values.port),
    listenAddress: parseListenAddress(values["listen-address"], "--listen-address"),
    masterSecretPath: values["master-secret"],
    saltPath: values.salt,
    logLevel,
    limits: parseConnectionLimits(values),
  };
}
