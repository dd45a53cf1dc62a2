/**
 * The key service's command line.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { type LogLevel, parseLogLevel } from "../log/logger.ts";

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
  logLevel: LogLevel;
}

/** Usage text for `--help`. */
export const KEY_SERVICE_USAGE = `Usage: key-service [flags]

Derives data keys from the cluster's master secret (kms.API/GetDataKey over
plaintext HTTP/2: gRPC, gRPC-Web and Connect on one port).

Flags:
  --port <port>             port to listen on, 0 for any free port (default 9000)
  --listen-address <addr>   address to bind (default 0.0.0.0)
  --master-secret <file>    master secret file, at least 16 bytes (default /var/config/mastersecret)
  --salt <file>             salt file, at least 32 bytes (default /var/config/salt)
  --log-level <level>       debug, info, warn or error (default info)
  --help                    show this help
`;

/** A bad command line; the process exits with status 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/**
 * Parses the command line. Returns "help" when `--help` is given.
 *
 * @throws {UsageError} for an unknown flag, a positional argument, a missing
 * flag value, a bad port or a bad log level.
 */
export function parseKeyServiceFlags(args: string[]): KeyServiceFlags | "help" {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        port: { type: "string", default: "9000" },
        "listen-address": { type: "string", default: "0.0.0.0" },
        "master-secret": { type: "string", default: "/var/config/mastersecret" },
        salt: { type: "string", default: "/var/config/salt" },
        "log-level": { type: "string", default: "info" },
        help: { type: "boolean", default: false },
      },
    }));
  } catch (err) {
    throw new UsageError(describeParseError(err));
  }
  if (values.help) return "help";
  let logLevel: LogLevel;
  try {
    logLevel = parseLogLevel(values["log-level"]);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  for (const name of ["listen-address", "master-secret", "salt"] as const) {
    if (values[name] === "") throw new UsageError(`--${name} must not be empty`);
  }
  return {
    port: parsePort(values.port),
    listenAddress: values["listen-address"],
    masterSecretPath: values["master-secret"],
    saltPath: values.salt,
    logLevel,
  };
}

function parsePort(value: string): number {
  const port = /^\d{1,5}$/.test(value) ? Number(value) : NaN;
  if (!(port <= 65535)) throw new UsageError(`invalid --port "${value}": want a number from 0 to 65535`);
  return port;
}

/** Turns node:util's parse errors (long, Node-specific) into one short line. */
function describeParseError(err: unknown): string {
  const { code, message } = err as { code?: string; message?: string };
  const option = /'(-[^']*)'/.exec(message ?? "")?.[1];
  switch (code) {
    case "ERR_PARSE_ARGS_UNKNOWN_OPTION":
      return `unknown flag ${option}`;
    case "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL":
      return `unexpected argument ${
        /'([^']*)'/.exec(message ?? "")?.[1] ?? ""
      }: the key service takes only flags`;
    case "ERR_PARSE_ARGS_INVALID_OPTION_VALUE":
      if (!option) return message ?? "invalid flag value";
      return (message ?? "").includes("ambiguous")
        ? `flag ${option.split(" ")[0]} needs a value (write ${
          option.split(" ")[0]
        }=<value> for one starting with "-")`
        : `flag ${option.split(" ")[0]} needs a value`;
    default:
      return message ?? String(err);
  }
}
