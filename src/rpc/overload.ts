/**
 * A unary call beyond the RPC server's bounds, as a Connect context value.
 *
 * `serveRpc` works on at most `maxCallsInProgress` unary calls at once and
 * lets at most `maxCallsWaiting` more wait their turn (`handler.ts`). A call
 * that arrives when both are full does not wait: it is answered at once.
 * For most methods the RPC layer answers it itself (ResourceExhausted,
 * {@linkcode serverBusyMessage}) and the service never sees it. A method
 * named in `serveRpc`'s `overloadRefusedByService` gets such a call at once
 * instead, with {@linkcode callOverloadedKey} set, and must refuse it
 * itself, cheaply (the call is outside the bound on calls in progress): the
 * join service does, so that every refused ticket has its audit entry.
 *
 * @module
 */
import { type ContextKey, createContextKey } from "@connectrpc/connect";

/**
 * Set on a call beyond the server's bounds, to the message its client should
 * read (see {@linkcode serverBusyMessage}); undefined for every other call.
 * Only methods named in `serveRpc`'s `overloadRefusedByService` ever see it
 * set.
 */
export const callOverloadedKey: ContextKey<string | undefined> = createContextKey<string | undefined>(
  undefined,
  { description: "call beyond the server's bounds" },
);

/** What a client refused for overload reads: the bounds that were full, and what to do. */
export function serverBusyMessage(bounds: { maxCallsInProgress: number; maxCallsWaiting: number }): string {
  return `server busy: ${bounds.maxCallsInProgress} calls in progress and ${bounds.maxCallsWaiting} waiting; retry later`;
}
