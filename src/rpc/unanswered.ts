/**
 * Whether an RPC call failed without the server's answer: the connection
 * or the stream was lost on the way (the server restarted or was killed, a
 * stream reset), as opposed to an error the server sent. A caller retries
 * such a call as it retries an unreachable server: the error says nothing
 * about its request.
 *
 * `@connectrpc/connect-node` reports these as the runtime's error, wrapped
 * as the cause (code Unknown for "Premature close" when the server's
 * process ends mid-call, Internal for node's "Stream closed with error code
 * NGHTTP2_INTERNAL_ERROR", Unavailable for a refused connection), or as an
 * HTTP/2 stream reset mapped to a code ("http/2 stream closed with error
 * code CANCEL (0x8)": Canceled). A server's own error arrives in its
 * trailers or body and has neither such a cause nor such a message.
 *
 * Only for calls whose own signal did not abort: a call the caller cancelled
 * failed for that reason.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";

/** connect-node's message for a stream the peer or the session teardown reset. */
const STREAM_RESET = /^http\/2 stream closed with error code /;

/** Whether `error` (of a call not cancelled by its caller) is a lost call rather than the server's answer. */
export function isUnanswered(error: unknown): boolean {
  if (!(error instanceof ConnectError)) return false;
  if (error.code === Code.Unavailable) return true;
  if (STREAM_RESET.test(error.rawMessage)) return true;
  // A transport failure wrapped by connect-node (its cause the runtime's own error, e.g. "Premature
  // close" or node's ERR_HTTP2_STREAM_ERROR); an answer parsed from the server has no cause.
  return error.cause instanceof Error && !(error.cause instanceof ConnectError);
}
