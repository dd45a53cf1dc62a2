/**
 * A JSON parse error in words fit for one line of an error message: V8's
 * `SyntaxError` message without the excerpt of the text it may quote
 * (`…, "<text>" is not valid JSON`: the text of a file that may hold a
 * secret, or escape sequences that would reach the operator's terminal).
 *
 * @module
 */

/** `error`'s message (from `JSON.parse`) without quoted text, on one line, control characters escaped. */
export function jsonSyntaxError(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message
    // The excerpt, shortened with "..." on either side for a longer text.
    .replace(/,? (\.\.\.)?".*"(\.\.\.)? is not valid JSON$/s, "")
    // deno-lint-ignore no-control-regex
    .replace(/[\x00-\x1f\x7f-\x9f]/g, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
