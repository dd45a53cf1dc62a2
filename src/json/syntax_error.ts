/**
 * A JSON parse error in words fit for one line of an error message: V8's
 * `SyntaxError` message without the excerpt of the text it may quote
 * (`…, "<text>" is not valid JSON`: the text of a file that may hold a
 * secret, or escape sequences that would reach the operator's terminal).
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { escapeControlCharacters } from "./escape_control.ts";

/** `error`'s message (from `JSON.parse`) without quoted text, on one line, control characters escaped. */
export function jsonSyntaxError(error: unknown): string {
  const message = errorMessage(error);
  return escapeControlCharacters(
    message
      // The excerpt, shortened with "..." on either side for a longer text.
      .replace(/,? (\.\.\.)?".*"(\.\.\.)? is not valid JSON$/s, ""),
  );
}
