/**
 * Where the browser console listens by default, and so the web origin the
 * local cluster's nodes and join services allow by default.
 *
 * @module
 */

/** The console's port when none is given. */
export const DEFAULT_CONSOLE_PORT = 9080;

/** The web origin of a console on 127.0.0.1 at `port`, as browsers send it. */
export function consoleOrigin(port: number = DEFAULT_CONSOLE_PORT): string {
  return `http://127.0.0.1:${port}`;
}
