/**
 * Structured JSON logging to stderr, one object per line.
 *
 * Callers pass only non-secret fields: keys, tokens and master secrets never
 * reach a logger. Errors are logged by message only, never with stacks of
 * request data. A line's `time`, `level` and `msg` are the logger's own: a
 * field of the same name does not replace them.
 *
 * @module
 */

/** Log levels in increasing severity. */
export type LogLevel = "debug" | "info" | "warn" | "error";

const severity: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** Extra structured fields of a log line. */
export type LogFields = Record<string, unknown>;

/** A structured logger. */
export interface Logger {
  /** Detail for debugging. */
  debug(msg: string, fields?: LogFields): void;
  /** Normal operation. */
  info(msg: string, fields?: LogFields): void;
  /** Something wrong that the service survives. */
  warn(msg: string, fields?: LogFields): void;
  /** Something failed. */
  error(msg: string, fields?: LogFields): void;
  /** A logger that adds `fields` to every line. */
  with(fields: LogFields): Logger;
}

/** Options for {@linkcode createLogger}. */
export interface LoggerOptions {
  /** Lowest level written; default "info". */
  level?: LogLevel;
  /** Where lines go; default stderr. */
  write?: (line: string) => void;
  /** Fields on every line, e.g. `{ component: "key-service" }`. */
  fields?: LogFields;
  /** Clock for timestamps; default `Date.now`. */
  now?: () => number;
}

const encoder = new TextEncoder();

function writeStderr(line: string): void {
  Deno.stderr.writeSync(encoder.encode(line + "\n"));
}

/** Creates a JSON-lines logger. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const min = severity[options.level ?? "info"];
  const write = options.write ?? writeStderr;
  const now = options.now ?? Date.now;
  const make = (base: LogFields): Logger => {
    const emit = (level: LogLevel, msg: string, fields?: LogFields) => {
      if (severity[level] < min) return;
      const time = new Date(now()).toISOString();
      // The line's own time, level and msg win over a field of the same name (a field must not make a
      // warning pass for an error); set again after the fields, they keep their place at the start.
      const line: LogFields = { time, level, msg, ...base, ...fields };
      Object.assign(line, { time, level, msg });
      write(JSON.stringify(line, replacer));
    };
    return {
      debug: (msg, fields) => emit("debug", msg, fields),
      info: (msg, fields) => emit("info", msg, fields),
      warn: (msg, fields) => emit("warn", msg, fields),
      error: (msg, fields) => emit("error", msg, fields),
      with: (fields) => make({ ...base, ...fields }),
    };
  };
  return make(options.fields ?? {});
}

/** Errors log as their message; bigints as strings. Byte arrays are never expected here. */
function replacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) return value.message;
  if (typeof value === "bigint") return value.toString();
  return value;
}

/** Parses a `--log-level` flag value, throwing a clear error for anything else. */
export function parseLogLevel(value: string): LogLevel {
  // Own keys only: `in` would take "toString" or "__proto__" for a level.
  if (Object.hasOwn(severity, value)) return value as LogLevel;
  throw new Error(`invalid log level "${value}": want one of debug, info, warn, error`);
}

/** A logger that drops everything (for tests that do not inspect logs). */
export const silentLogger: Logger = createLogger({ write: () => {} });
