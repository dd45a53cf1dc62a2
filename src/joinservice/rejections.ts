/**
 * Why the join service refuses a request: every reason, the Connect code a
 * node acts on for each (one compiler-checked table), and the constructor of
 * the service's {@linkcode Rejection}s.
 *
 * Codes tell a node what to do: PermissionDenied (attestation or role:
 * fix the node or the config), InvalidArgument (fix the request),
 * ResourceExhausted (retry later), Unavailable (a dependency is down:
 * retry), Internal (the service is misconfigured, named in the message, or
 * has a bug: the message is then only "internal error").
 *
 * @module
 */
import { Code } from "@connectrpc/connect";
import { connectCodeFor, type ExchangeErrorReason } from "../atls/errors.ts";
import { KubernetesError } from "../kubernetes/errors.ts";
import {
  asRejection,
  COMMON_REASON_CODES,
  type CommonReason,
  Rejection,
  type RejectionOptions,
} from "../rpc/rejection.ts";

/** The join service's own reasons. */
export type JoinServiceReason =
  | "rate-limit-peer" // the peer's group (its IPv4 address or IPv6 /64) is over its rate
  | "rate-limit-global" // attested nodes are getting tickets faster than the service's overall rate
  | "server-busy" // the RPC server's calls in progress and waiting are full (its maxCallsInProgress + maxCallsWaiting)
  | "verifier-pool-full" // too many attestation verifications waiting
  | "malformed-request" // the request's own fields are wrong (sizes, disk UUID, principals)
  | "control-plane-not-allowed" // the attestation key is not one the operator lets join as a control plane
  | "csr-rejected" // the CSR asks for what a kubelet certificate may not have
  | "reserved-node-name" // a worker asks for the name that marks a joining control plane
  | "ssh-host-key-rejected" // the SSH host key cannot be certified
  | "control-plane-busy" // another control plane is joining
  | "key-service-unavailable" // the key service cannot be reached
  | "api-server-unavailable" // the API server cannot be reached
  | "api-server-refused" // the API server refused a call (e.g. forbidden): misconfigured permissions
  | "metadata-unavailable" // the metadata API cannot be reached
  | "misconfigured" // a configured input (cluster CA, kubeconfig, PKI files, components) is unusable
  | "verifier-error"; // a validator failed unexpectedly (a bug)

/** Every reason a join-service rejection carries. */
export type JoinReason = JoinServiceReason | ExchangeErrorReason | CommonReason;

const codes: Record<JoinServiceReason | CommonReason, Code> = {
  "rate-limit-peer": Code.ResourceExhausted,
  "rate-limit-global": Code.ResourceExhausted,
  "server-busy": Code.ResourceExhausted,
  "verifier-pool-full": Code.ResourceExhausted,
  "malformed-request": Code.InvalidArgument,
  "control-plane-not-allowed": Code.PermissionDenied,
  "csr-rejected": Code.InvalidArgument,
  "reserved-node-name": Code.InvalidArgument,
  "ssh-host-key-rejected": Code.InvalidArgument,
  "control-plane-busy": Code.Unavailable,
  "key-service-unavailable": Code.Unavailable,
  "api-server-unavailable": Code.Unavailable,
  "api-server-refused": Code.Internal,
  "metadata-unavailable": Code.Unavailable,
  "misconfigured": Code.Internal,
  "verifier-error": Code.Internal,
  ...COMMON_REASON_CODES,
};

/** The Connect code of a join-service reason. */
export function codeOf(reason: JoinReason): Code {
  return isOwnReason(reason) ? codes[reason] : connectCodeFor(reason);
}

function isOwnReason(reason: JoinReason): reason is JoinServiceReason | CommonReason {
  return Object.hasOwn(codes, reason);
}

/** A rejection for `reason`, with its code from the table; `message` is what the node reads. */
export function reject(reason: JoinReason, message: string, options?: RejectionOptions): Rejection {
  return new Rejection(reason, codeOf(reason), message, options);
}

/**
 * A failed Kubernetes API call as a rejection: "api-server-unavailable"
 * when retrying may help (no answer, 5xx, 429, timeouts), otherwise
 * "api-server-refused" (e.g. forbidden: the service's permissions are
 * wrong). A rejection passes through; anything else is an internal error.
 */
export function apiServerRejection(error: unknown): Rejection {
  if (error instanceof KubernetesError) {
    return error.retryable
      ? reject("api-server-unavailable", `API server unavailable: ${error.message}`)
      : reject("api-server-refused", error.message);
  }
  return asRejection(error);
}

/** Runs a Kubernetes API call; its failure is an {@linkcode apiServerRejection}. */
export async function apiServerCall<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    throw apiServerRejection(error);
  }
}
