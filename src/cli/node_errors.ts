/**
 * A failed call to a node in the operator's words: unreachable (connection
 * refused, timeout, TLS or HTTP/2 failure: check the address and that the
 * node's bootstrapper runs), or a refusal with the node's own message.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { CliError, errorLine } from "./errors.ts";

/** Turns an error of a call to `node` into a {@linkcode CliError}. */
export function describeNodeCallError(error: unknown, node: string, signal?: AbortSignal): CliError {
  // AbortSignal.timeout's reason: the node did not answer in time, nobody canceled anything.
  if (signal?.aborted && signal.reason instanceof DOMException && signal.reason.name === "TimeoutError") {
    return new CliError(
      "unreachable",
      `node ${node} did not answer within --timeout: check --node (host and init server port, default 9000) and that the node's bootstrapper is running`,
      { cause: error },
    );
  }
  if (signal?.aborted || (error instanceof ConnectError && error.code === Code.Canceled)) {
    return new CliError("canceled", `the call to node ${node} was canceled`, { cause: error });
  }
  if (
    error instanceof ConnectError && error.code !== Code.Unavailable && error.code !== Code.DeadlineExceeded
  ) {
    return new CliError("refused", `node ${node} refused: ${error.rawMessage}`, { cause: error });
  }
  const detail = error instanceof ConnectError ? error.rawMessage : errorLine(error);
  return new CliError(
    "unreachable",
    `node ${node} is unreachable (${detail}): check --node (host and init server port, default 9000) and that the node's bootstrapper is running`,
    { cause: error },
  );
}
