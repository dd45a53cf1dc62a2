/**
 * A value someone else sent, quoted for an error message: as JSON with every
 * control character escaped (C1 and DEL too, which `JSON.stringify` leaves
 * as they are: the one-byte CSI `\u009b` starts an escape sequence), so none
 * reaches a terminal, and cut short (so a megabyte of it is not logged on
 * every retry).
 *
 * @module
 */
import { escapeControlCharacters } from "./escape_control.ts";

/** `value` as JSON, control characters escaped, cut to `max` characters with "…" when longer. */
export function quoted(value: unknown, max = 64): string {
  const text = escapeControlCharacters(JSON.stringify(value) ?? String(value));
  return text.length > max ? text.slice(0, max) + "…" : text;
}
