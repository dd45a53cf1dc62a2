/**
 * A TCP port that is free on 127.0.0.1 right now: for a server that must be
 * named before it starts (a join service started late, a refused
 * connection). Another process may take it in between; callers are local
 * tools and tests.
 *
 * @module
 */

/** A TCP port free right now on 127.0.0.1. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}
