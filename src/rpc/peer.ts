/**
 * The remote peer of an RPC, as a Connect context value.
 *
 * @module
 */
import { type ContextKey, createContextKey } from "@connectrpc/connect";

/** Remote address ("ip" or "unknown") of the call, set by serveRpc for every request. */
export const peerAddressKey: ContextKey<string> = createContextKey<string>("unknown", {
  description: "remote peer address",
});
