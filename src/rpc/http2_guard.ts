/**
 * A guard around Deno 2.9.6's `node:http2` that keeps one hostile peer from
 * crashing the whole process.
 *
 * Deno's `node:http2` parses incoming bytes with nghttp2 inside one native
 * call and calls back into JavaScript for every frame. Some of those
 * callbacks tear the session down on the spot: on a GOAWAY it calls
 * `session.close()` (NO_ERROR) or `session.destroy()` (any other code) while
 * nghttp2 still holds the rest of the buffer, and nghttp2 then goes on
 * parsing it against a torn-down session. One TCP write of preface,
 * SETTINGS, GOAWAY and a request killed our services with SIGSEGV within
 * two or three connections, and ordinary clients closing with a GOAWAY
 * tripped nghttp2's `find_stream_on_goaway_func` assertion. Deferring our
 * own reaction to a `goaway` event does not help: the runtime's own calls
 * are the problem.
 *
 * The guard makes every session's `close()` and `destroy()` run on a later
 * macrotask (`setImmediate`), after the native receive call has returned,
 * for server and client sessions alike. Nothing else changes: the same
 * methods run with the same arguments, one event-loop turn later. A
 * session being torn down still ignores further input, and the GOAWAY a
 * session sends on close is unchanged.
 *
 * It patches `Http2Session.prototype`, so it depends on the runtime's
 * internals: Deno is pinned (package.json), and the hostile-peer tests in
 * `tests/rpc/hostile_test.ts` are the regression check to run on every Deno
 * upgrade. {@linkcode guardHttp2Teardown} is idempotent; `serveRpc` and the
 * project's RPC clients call it before they create a session.
 *
 * @module
 */
import * as http2 from "node:http2";

type Teardown = (this: http2.Http2Session, ...args: unknown[]) => void;

const GUARDED = Symbol.for("constellation.http2TeardownGuard");

/** Defers every `node:http2` session teardown out of the runtime's receive call (see the module doc). */
export function guardHttp2Teardown(): void {
  // The class is exported at run time but missing from @types/node's declarations.
  const session = (http2 as unknown as { Http2Session?: { prototype: Record<string | symbol, unknown> } })
    .Http2Session;
  if (!session) {
    throw new Error("node:http2 has no Http2Session class: the teardown guard cannot be installed");
  }
  const prototype = session.prototype;
  if (prototype[GUARDED]) return;
  for (const name of ["close", "destroy"] as const) {
    const teardown = prototype[name] as Teardown;
    prototype[name] = function deferredTeardown(this: http2.Http2Session, ...args: unknown[]) {
      setImmediate(() => teardown.apply(this, args));
    };
  }
  prototype[GUARDED] = true;
}
