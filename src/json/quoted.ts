/**
 * A value someone else sent, quoted for an error message: as JSON (so
 * control characters reach no terminal) and cut short (so a megabyte of it
 * is not logged on every retry).
 *
 * @module
 */

/** `value` as JSON, cut to `max` characters with "…" when longer. */
export function quoted(value: unknown, max = 64): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > max ? text.slice(0, max) + "…" : text;
}
