/**
 * A TCP port that is free on 127.0.0.1 right now: for a server that must be
 * named before it starts (a join service started late, a refused
 * connection). Another program may take it in between; callers are local
 * tools and tests.
 *
 * @module
 */

/**
 * Ports handed out: below Linux's default ephemeral range (32768–60999),
 * from which every port-0 listener and outgoing connection draws, so that
 * our own processes binding port 0 meanwhile cannot take it (they did: a
 * local cluster's join service found its port in use).
 */
const FIRST_PORT = 20_000;
const LAST_PORT = 32_767;
const ATTEMPTS = 100;
/** Ports this process handed out already: two servers named before either starts must not share one. */
const handedOut = new Set<number>();

/** A TCP port free right now on 127.0.0.1, outside the ephemeral range, never the same twice. */
export function freePort(): number {
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const port = FIRST_PORT + Math.floor(Math.random() * (LAST_PORT - FIRST_PORT + 1));
    if (handedOut.has(port)) continue;
    try {
      Deno.listen({ hostname: "127.0.0.1", port }).close();
      handedOut.add(port);
      return port;
    } catch (error) {
      if (!(error instanceof Deno.errors.AddrInUse)) throw error;
    }
  }
  throw new Error(`no free port on 127.0.0.1 in ${FIRST_PORT}–${LAST_PORT} after ${ATTEMPTS} attempts`);
}
