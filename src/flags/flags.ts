/**
 * Command-line parsing shared by the components' entry points: node:util
 * `parseArgs` with short, clear errors.
 *
 * @module
 */
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import { type LogLevel, parseLogLevel } from "../log/logger.ts";
import { EndpointError, parseEndpoint } from "../net/endpoint.ts";
import { ipVersion } from "../net/ip.ts";

/** A bad command line; the process exits with status 2. */
export class UsageError extends Error {
  /** A bad command line, described by `message`. */
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** Options of {@linkcode parseFlags}. */
export interface ParseFlagsOptions {
  /**
   * A flag that takes one value, given twice: "last-wins" (the default; the
   * services, whose callers may append a flag to override one) or "refuse"
   * (an operator's command, where `--disk-uuid A --disk-uuid B` is a slip
   * that must not silently act on B).
   */
  repeated?: "last-wins" | "refuse";
}

/**
 * Parses flags strictly (no positionals, no unknown flags).
 *
 * @throws {UsageError} with one short line naming the bad flag.
 */
export function parseFlags<T extends ParseArgsOptionsConfig>(
  args: string[],
  options: T,
  component: string,
  parseOptions: ParseFlagsOptions = {},
): ReturnType<
  typeof parseArgs<{ args: string[]; options: T; strict: true; allowPositionals: false }>
>["values"] {
  let parsed;
  try {
    parsed = parseArgs({
      args: joinNegativeNumbers(args, options),
      options,
      strict: true,
      allowPositionals: false,
      tokens: true,
    });
  } catch (err) {
    throw new UsageError(describeParseError(err, component));
  }
  if (parseOptions.repeated === "refuse") {
    const seen = new Set<string>();
    for (const token of parsed.tokens) {
      if (token.kind !== "option" || options[token.name]?.multiple) continue;
      if (seen.has(token.name)) throw new UsageError(`--${token.name} is given twice (${component})`);
      seen.add(token.name);
    }
  }
  return parsed.values;
}

/**
 * Joins a negative number to the flag before it ("--port -1" becomes
 * "--port=-1"). node:util's parseArgs takes any value starting with "-" for
 * a flag and would report "--port needs a value"; no flag starts with a
 * digit, so the flag's own parser gets the number and says what is wrong.
 */
function joinNegativeNumbers(args: string[], options: ParseArgsOptionsConfig): string[] {
  const joined: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--") return joined.concat(args.slice(i));
    const name = arg.startsWith("--") && !arg.includes("=") ? arg.slice(2) : "";
    const takesValue = Object.hasOwn(options, name) && options[name].type === "string";
    if (takesValue && /^-[\d.]/.test(args[i + 1] ?? "")) joined.push(`${arg}=${args[++i]}`);
    else joined.push(arg);
  }
  return joined;
}

/**
 * Parses the URL of an HTTP service (e.g. a metadata API): http or https,
 * no credentials in it (they would end up in logs); returned without a
 * trailing slash.
 */
export function parseHttpUrlFlag(value: string, flag: string): string {
  // The value is never quoted: a URL may hold a password.
  const url = URL.canParse(value) ? new URL(value) : undefined;
  if (url === undefined) throw new UsageError(`invalid ${flag}: not a URL (want http://host:port)`);
  if (url.username !== "" || url.password !== "") {
    throw new UsageError(`invalid ${flag}: no user or password in the URL`);
  }
  if (!/^https?:$/.test(url.protocol)) {
    throw new UsageError(`invalid ${flag}: scheme ${url.protocol.slice(0, -1)}, want http://host:port`);
  }
  return value.replace(/\/+$/, "");
}

/** Parses a port number 0–65535. */
export function parsePort(value: string, flag = "--port"): number {
  const port = /^\d{1,5}$/.test(value) ? Number(value) : NaN;
  if (!(port <= 65535)) throw new UsageError(`invalid ${flag} "${value}": want a number from 0 to 65535`);
  return port;
}

/** Parses a positive number (e.g. a rate). */
export function parsePositive(value: string, flag: string): number {
  const number = /^\d+(\.\d+)?$/.test(value) ? Number(value) : NaN;
  if (!(number > 0)) throw new UsageError(`invalid ${flag} "${value}": want a positive number`);
  return number;
}

/** The longest timer: beyond 2³¹−1 ms, Deno's timers fire after 1 ms instead. */
export const MAX_TIMEOUT_SECONDS: number = Math.floor((2 ** 31 - 1) / 1000);

/**
 * Parses a duration in seconds (a timeout, an interval) as milliseconds:
 * positive, at least 1 ms, and at most {@linkcode MAX_TIMEOUT_SECONDS}
 * (a longer one would make its timer fire at once).
 */
export function parseSeconds(value: string, flag: string): number {
  const seconds = parsePositive(value, flag);
  if (seconds > MAX_TIMEOUT_SECONDS) {
    throw new UsageError(`invalid ${flag} "${value}": at most ${MAX_TIMEOUT_SECONDS} seconds`);
  }
  const ms = Math.round(seconds * 1000);
  if (ms < 1) throw new UsageError(`invalid ${flag} "${value}": at least 0.001 seconds`);
  return ms;
}

/**
 * The largest count a flag takes: 2³² − 1, the range of HTTP/2's settings
 * (a larger `--max-streams-per-connection` made node:http2 throw on the first
 * connection), and far beyond any count a process can hold.
 */
export const MAX_COUNT = 2 ** 32 - 1;

/** Parses a positive whole number (e.g. a count), at most {@linkcode MAX_COUNT}. */
export function parseCount(value: string, flag: string): number {
  const number = parsePositive(value, flag);
  if (!Number.isInteger(number)) throw new UsageError(`invalid ${flag} "${value}": want a whole number`);
  return atMostMaxCount(number, value, flag);
}

/** Parses a whole number, 0 or more (e.g. a count that may be none), at most {@linkcode MAX_COUNT}. */
export function parseWholeNumber(value: string, flag: string): number {
  if (!/^\d+$/.test(value)) {
    throw new UsageError(`invalid ${flag} "${value}": want a whole number, 0 or more`);
  }
  return atMostMaxCount(Number(value), value, flag);
}

function atMostMaxCount(number: number, value: string, flag: string): number {
  if (number > MAX_COUNT) throw new UsageError(`invalid ${flag} "${value}": at most ${MAX_COUNT}`);
  return number;
}

/**
 * Parses an address to listen on: an IPv4 or IPv6 address (binding needs an
 * address; a host name is refused rather than resolved).
 */
export function parseListenAddress(value: string, flag: string): string {
  if (ipVersion(value) === 0) {
    throw new UsageError(`invalid ${flag} "${value}": want an IP address, e.g. 0.0.0.0, 127.0.0.1 or ::`);
  }
  return value;
}

/**
 * Checks a "host:port" value (see {@linkcode parseEndpoint}); returns it
 * unchanged. `example` shows a good value in the error.
 */
export function parseEndpointFlag(value: string, flag: string, example: string): string {
  try {
    parseEndpoint(value);
  } catch (err) {
    if (!(err instanceof EndpointError)) throw err;
    throw new UsageError(`invalid ${flag} "${value}": ${err.message} (want host:port, e.g. ${example})`);
  }
  return value;
}

/** Turns node:util's parse errors (long, Node-specific) into one short line. */
function describeParseError(err: unknown, component: string): string {
  const { code, message } = err as { code?: string; message?: string };
  const option = /'(-[^']*)'/.exec(message ?? "")?.[1];
  switch (code) {
    case "ERR_PARSE_ARGS_UNKNOWN_OPTION":
      return `unknown flag ${option}`;
    case "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL":
      return `unexpected argument ${
        /'([^']*)'/.exec(message ?? "")?.[1] ?? ""
      }: the ${component} takes only flags`;
    case "ERR_PARSE_ARGS_INVALID_OPTION_VALUE": {
      if (!option) return message ?? "invalid flag value";
      const flag = option.split(" ")[0];
      // A value given to a boolean flag (--print-hex=false).
      if ((message ?? "").includes("does not take an argument")) return `flag ${flag} takes no value`;
      return (message ?? "").includes("ambiguous")
        ? `flag ${flag} needs a value (write ${flag}=<value> for one starting with "-")`
        : `flag ${flag} needs a value`;
    }
    default:
      return message ?? String(err);
  }
}

/**
 * Parses `--log-level`.
 *
 * @throws {UsageError} naming the levels.
 */
export function parseLogLevelFlag(value: string): LogLevel {
  try {
    return parseLogLevel(value);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** Exit status of a bad command line. */
export const EXIT_USAGE = 2;

/**
 * Runs a component's flag parser: returns its flags, or the exit status
 * after printing the usage (`--help`, status 0) or a one-line error
 * (status {@linkcode EXIT_USAGE}).
 */
export function commandLine<T>(
  args: string[],
  options: { component: string; usage: string; parse: (args: string[]) => T | "help" },
): T | number {
  const encoder = new TextEncoder();
  let flags;
  try {
    flags = options.parse(args);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    Deno.stderr.writeSync(encoder.encode(`${options.component}: ${err.message} (see --help)\n`));
    return EXIT_USAGE;
  }
  if (flags === "help") {
    Deno.stdout.writeSync(encoder.encode(options.usage));
    return 0;
  }
  return flags;
}
