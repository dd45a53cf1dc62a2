/**
 * A logger for the validators in the page: it keeps their warnings (e.g.
 * "INSECURE: trusting any attestation key") to show beside the result, and
 * drops the rest.
 *
 * @module
 */
import type { LogFields, Logger } from "../../log/logger.ts";

/** A logger whose warnings and errors end up in `messages`. */
export function collectingLogger(messages: string[]): Logger {
  const keep = (msg: string, fields?: LogFields) => {
    const detail = fields?.error === undefined ? "" : `: ${String(fields.error)}`;
    messages.push(`${msg}${detail}`);
  };
  const logger: Logger = {
    debug: () => {},
    info: () => {},
    warn: keep,
    error: keep,
    with: () => logger,
  };
  return logger;
}
