/**
 * Text from elsewhere (a peer's error message, a parser's) made fit for one
 * line of an operator's terminal: every C0 control character (line breaks
 * included), DEL and every C1 control character becomes a JSON-style
 * `\u00XX` escape. Escape sequences (ESC, or the one-byte CSI `\u009b`) could
 * otherwise move the cursor, erase the line and print a forged verdict, and a
 * line break would start a line that looks like the program's own.
 *
 * @module
 */

// deno-lint-ignore no-control-regex
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/g;

/** `text` with its control characters (C0, DEL, C1) escaped as `\u00XX`; other text unchanged. */
export function escapeControlCharacters(text: string): string {
  return text.replace(CONTROL_CHARACTERS, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** Whether `text` holds a control character (C0, DEL, C1). */
export function hasControlCharacters(text: string): boolean {
  CONTROL_CHARACTERS.lastIndex = 0;
  return CONTROL_CHARACTERS.test(text);
}
