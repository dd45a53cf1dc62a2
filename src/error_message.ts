/**
 * The message of a caught value, which need not be an `Error`.
 *
 * @module
 */

/** `error`'s message when it is an `Error`, else its string form. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The first line of {@linkcode errorMessage}: what fits one log line (a tool's stderr may follow). */
export function errorFirstLine(error: unknown): string {
  return errorMessage(error).split("\n")[0];
}
