/**
 * Quoting for POSIX shell scripts the project writes (launchers, the local
 * cluster's tool stand-ins): paths may hold spaces, quotes or `$`.
 *
 * @module
 */

/** `value` as one word of a POSIX shell command line, quoted only when it needs to be. */
export function shellQuote(value: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`;
}
