/**
 * A failed call from the page to a node's or join service's browser port,
 * in words the operator can act on.
 *
 * A browser does not tell a page why a request failed: an address nobody
 * answers on and a service that refuses the page's origin (CORS) both end in
 * the same `TypeError: Failed to fetch`. So after such a failure the page
 * asks once more without CORS (`mode: "no-cors"`): the browser then hides
 * the answer but reports whether one came. An answer means the service is
 * there and refused this page's origin; none means it cannot be reached.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";

/** How long the reachability probe waits. */
const PROBE_TIMEOUT_MS = 3_000;

/** What kind of failure a call had. */
export type CallFailure =
  | "unreachable" // nothing answers at the address
  | "cors-refused" // the service answers but does not allow this page's origin
  | "timeout" // no answer before the deadline
  | "wrong-port" // something answers but does not serve the RPC there
  | "refused"; // the service answered with an error

/** A failed call, described. */
export interface CallError {
  /** What kind of failure. */
  failure: CallFailure;
  /** The failure in words, naming the address and what to check. */
  message: string;
}

/** What was called, for the words. */
export interface CallTarget {
  /** E.g. "node", "join service". */
  what: string;
  /** The base URL called, e.g. "http://10.42.0.3:9001". */
  baseUrl: string;
  /** The RPC, e.g. "init.API/GetAttestation". */
  rpc: string;
  /** The component and flag to name in the CORS advice, e.g. "the bootstrapper". */
  component: string;
}

/** Describes `error`, a failed call to `target` (probing the address when the browser hid the cause). */
export async function describeCallError(error: unknown, target: CallTarget): Promise<CallError> {
  const connectError = ConnectError.from(error);
  const at = `the ${target.what} at ${target.baseUrl}`;
  switch (connectError.code) {
    case Code.DeadlineExceeded:
      return {
        failure: "timeout",
        message: `No answer from ${at} in time: check the address and that ${target.component} is running.`,
      };
    case Code.Unimplemented:
      return {
        failure: "wrong-port",
        message:
          `Something answers at ${target.baseUrl}, but it does not serve ${target.rpc} there: give the browser port of ${target.component} (--browser-port).`,
      };
    case Code.Unknown:
      if (connectError.cause instanceof TypeError) return await networkFailure(at, target);
  }
  return {
    failure: "refused",
    message: `${capitalize(at)} refused: ${connectError.rawMessage} (${Code[connectError.code]}).`,
  };
}

async function networkFailure(at: string, target: CallTarget): Promise<CallError> {
  const origin = globalThis.location.origin;
  if (await answers(target.baseUrl)) {
    return {
      failure: "cors-refused",
      message:
        `CORS refused: ${at} answers, but does not allow calls from this page's origin ${origin}. Start ${target.component} with --cors-allow-origin ${origin}.`,
    };
  }
  return {
    failure: "unreachable",
    message:
      `Cannot reach ${at}: nothing answers there. Check the address and port (the browser port, --browser-port), and that ${target.component} is running.`,
  };
}

/** Whether anything answers HTTP at `baseUrl` (the answer itself stays hidden from the page). */
async function answers(baseUrl: string): Promise<boolean> {
  try {
    await fetch(`${baseUrl}/`, {
      mode: "no-cors",
      cache: "no-store",
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
    });
    return true;
  } catch {
    return false;
  }
}

function capitalize(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/**
 * The base URL for an address the operator typed: "host:port" (an IPv6
 * host in brackets), or "http(s)://host[:port]" (without a port the
 * scheme's: 80 or 443, e.g. a TLS proxy in front of a browser port). Throws
 * an Error in words for anything else, e.g. a bare host: a browser port has
 * no usual number, so a missing port is a mistake, not port 80.
 */
export function baseUrlOf(address: string, example: string): string {
  const trimmed = address.trim();
  if (trimmed === "") throw new Error(`Enter an address, e.g. ${example}.`);
  const scheme = /^https?:\/\//i.exec(trimmed)?.[0];
  const withScheme = scheme ? trimmed : `http://${trimmed}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new Error(`"${trimmed}" is not an address: want host:port, e.g. ${example}.`);
  }
  // Whether the text names a port is read from the text itself: the parser drops a scheme's default port
  // (url.port is "" for "http://host:80"), so its port cannot tell "host:80" from "host".
  const authority = withScheme.slice(withScheme.indexOf("//") + 2).split(/[/?#]/, 1)[0];
  const hasPort = /:\d+$/.test(authority);
  if (
    (!scheme && !hasPort) || url.username !== "" || url.password !== "" ||
    (url.pathname !== "/" && url.pathname !== "") || url.search || url.hash
  ) {
    throw new Error(`"${trimmed}" is not host:port: want e.g. ${example}.`);
  }
  return url.origin;
}
