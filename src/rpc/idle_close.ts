/**
 * Closing idle HTTP/2 connections: a connection with no call open for a
 * while gets GOAWAY, and its socket is destroyed if the peer has not closed
 * it a grace period after that.
 *
 * @module
 */
import type { EventEmitter } from "node:events";
import { IDLE_CLOSE_GRACE_MS } from "./limits.ts";

/** What {@linkcode closeWhenIdle} uses of a `node:http2` server session. */
export interface IdleSession extends Pick<EventEmitter, "on" | "once"> {
  /** True once `close()` was called (GOAWAY sent, open streams may finish). */
  readonly closed: boolean;
  /** True once the session is gone. */
  readonly destroyed: boolean;
  /** Sends GOAWAY; open streams finish. */
  close(): void;
}

/** What {@linkcode closeWhenIdle} uses of the session's TCP socket. */
export interface IdleSocket extends Pick<EventEmitter, "once"> {
  /** Drops the connection. */
  destroy(): void;
}

/** Options for {@linkcode closeWhenIdle}. */
export interface CloseWhenIdleOptions {
  /** How long the session may have no stream open before GOAWAY. */
  idleMs: number;
  /** How long after GOAWAY, with no stream open, the socket is destroyed; default {@linkcode IDLE_CLOSE_GRACE_MS}. */
  graceMs?: number;
}

/**
 * Closes `session` (GOAWAY) once it has had no stream open for `idleMs`, and
 * destroys `socket` if it is still open `graceMs` later with no stream open
 * (a peer that never closes its side would otherwise keep it half-open).
 * Only calls count as activity: a peer that trickles PINGs, SETTINGS or an
 * unfinished header block is idle. A stream the session still accepts
 * after its GOAWAY (its headers were in the same read) runs to its end: the
 * grace period starts again when the last stream closes.
 */
export function closeWhenIdle(session: IdleSession, socket: IdleSocket, options: CloseWhenIdleOptions): void {
  const graceMs = options.graceMs ?? IDLE_CLOSE_GRACE_MS;
  let open = 0;
  let idle: ReturnType<typeof setTimeout> | undefined;
  let force: ReturnType<typeof setTimeout> | undefined;
  const destroyLater = () => {
    force = setTimeout(() => socket.destroy(), graceMs);
  };
  const arm = () => {
    idle = setTimeout(() => {
      session.close();
      destroyLater();
    }, options.idleMs);
  };
  session.on("stream", (stream: Pick<EventEmitter, "once">) => {
    open++;
    clearTimeout(idle);
    clearTimeout(force);
    stream.once("close", () => {
      open--;
      if (open > 0) return;
      // Destroyed: the peer reset the last stream after a GOAWAY; Deno then leaves the socket open.
      if (session.closed || session.destroyed) destroyLater();
      else arm();
    });
  });
  session.once("close", () => clearTimeout(idle));
  socket.once("close", () => {
    clearTimeout(idle);
    clearTimeout(force);
  });
  arm();
}
