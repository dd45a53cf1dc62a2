/**
 * A failed call to a node in the operator's words: unreachable (connection
 * refused, timeout, TLS or HTTP/2 failure: check the address and that the
 * node's bootstrapper runs), or a refusal with the node's own message.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";
import {
  CONTROL_PLANE_NOT_ALLOWED,
  isReadLimitError,
  type NodeExchangeError,
} from "../init/node_exchange.ts";
import { NODE_READ_MAX_BYTES } from "../init/protocol.ts";
import { escapeControlCharacters } from "../json/escape_control.ts";
import { CliError, errorLine } from "./errors.ts";

/** Which of a node's servers a call went to, for the hint of an unreachable node. */
export interface NodeServer {
  /** e.g. "init server". */
  name: string;
  /** Its port on nodes. */
  defaultPort: number;
  /** What must run on the node for it to answer. */
  runs: string;
}

/** The init server (`init.API`), which `cli init` and `cli verify` call. */
export const INIT_SERVER: NodeServer = {
  name: "init server",
  defaultPort: 9000,
  runs: "the node's bootstrapper is running",
};

/**
 * What to add to a refusal with `code`: a server that does not know the
 * method (Unimplemented: HTTP 404) is another server than `server`, e.g. the
 * init port given to `cli recover`.
 */
export function wrongServerHint(code: Code | undefined, server: NodeServer): string {
  if (code !== Code.Unimplemented) return "";
  return `; this is not the ${server.name}: check --node (its port is ${server.defaultPort} by default, and ${server.runs})`;
}

/**
 * What to add to a rejected attestation (`error`, "attestation-rejected"),
 * checked against the config file `attestationConfig`: nothing was sent, and
 * which part of the config to look at.
 */
export function attestationRejectedHint(error: NodeExchangeError, attestationConfig: string): string {
  if (error.attestationReason === CONTROL_PLANE_NOT_ALLOWED) {
    return `. Nothing was sent. If the node is to be a control plane, name its attestation key in akTrust.controlPlaneKeyDigests of ${attestationConfig}`;
  }
  return `. Nothing was sent. If the node runs the image you expect, the measurements in ${attestationConfig} are wrong (compare with cli verify)`;
}

/**
 * Turns an error of a call to `node`'s `server` into a {@linkcode CliError}.
 * The node's own text in it is escaped: it is anyone's until attested.
 */
export function describeNodeCallError(
  error: unknown,
  node: string,
  signal?: AbortSignal,
  server: NodeServer = INIT_SERVER,
): CliError {
  const hint =
    `check --node (host and ${server.name} port, default ${server.defaultPort}) and that ${server.runs}`;
  // AbortSignal.timeout's reason: the node did not answer in time, nobody canceled anything.
  if (signal?.aborted && signal.reason instanceof DOMException && signal.reason.name === "TimeoutError") {
    return new CliError(
      "unreachable",
      `node ${node} did not answer within --timeout: ${hint}`,
      { cause: error },
    );
  }
  if (signal?.aborted || (error instanceof ConnectError && error.code === Code.Canceled)) {
    return new CliError("canceled", `the call to node ${node} was canceled`, { cause: error });
  }
  if (isReadLimitError(error)) {
    return new CliError(
      "protocol",
      `node ${node} sent a message larger than the ${NODE_READ_MAX_BYTES} bytes the CLI reads`,
      { cause: error },
    );
  }
  if (
    error instanceof ConnectError && error.code !== Code.Unavailable && error.code !== Code.DeadlineExceeded
  ) {
    return new CliError(
      "refused",
      `node ${node} refused: ${escapeControlCharacters(error.rawMessage)}${
        wrongServerHint(error.code, server)
      }`,
      { cause: error },
    );
  }
  const detail = escapeControlCharacters(error instanceof ConnectError ? error.rawMessage : errorLine(error));
  return new CliError(
    "unreachable",
    `node ${node} is unreachable (${detail}): ${hint}`,
    { cause: error },
  );
}
