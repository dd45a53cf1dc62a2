/**
 * A {@linkcode Logger} for library code the CLI calls (validators warn
 * about insecure trust modes): warnings and errors become plain
 * `warning: <message>` lines on stderr, each printed once; debug and info
 * are dropped. The operator reads them, not a log collector.
 *
 * @module
 */
import type { MeasurementMismatch } from "../attestation/attestation.ts";
import { describeMismatch } from "../atls/errors.ts";
import type { LogFields, Logger } from "../log/logger.ts";

/** Creates the logger; `write` receives each line (default: stderr). */
export function createWarningLogger(write: (line: string) => void = writeStderr): Logger {
  const seen = new Set<string>();
  const warn = (msg: string, _fields?: LogFields) => {
    if (seen.has(msg)) return;
    seen.add(msg);
    write(`warning: ${msg}`);
  };
  const logger: Logger = {
    debug: () => {},
    info: () => {},
    warn,
    error: warn,
    with: () => logger,
  };
  return logger;
}

/**
 * Warns of each warn-only mismatch `node`'s evidence passed with, in the
 * words a rejection names a mismatch in: the validator's own warning is one
 * line for all of them, without their values.
 */
export function warnAcceptedMismatches(
  logger: Logger,
  node: string,
  mismatches: readonly MeasurementMismatch[],
): void {
  for (const mismatch of mismatches) {
    logger.warn(
      `node ${node}: its attestation passed with a warn-only mismatch: ${describeMismatch(mismatch)}`,
    );
  }
}

function writeStderr(line: string): void {
  Deno.stderr.writeSync(new TextEncoder().encode(`${line}\n`));
}
