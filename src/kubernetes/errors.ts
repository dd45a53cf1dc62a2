/**
 * Errors of the Kubernetes client: API `Status` failures and transport
 * failures, in one class with a machine-readable reason.
 *
 * Messages name the request (verb, resource, namespace/name) and carry the
 * server's message; they never carry request or response bodies, which may
 * hold Secrets.
 *
 * @module
 */
import type { Status, StatusDetails } from "kubernetes-types/meta/v1.d.ts";

/**
 * Why a request failed. Everything but `Unavailable` and `Unknown` is a
 * Kubernetes `metav1.StatusReason` as the API server sends it.
 */
export type KubernetesErrorReason =
  | "BadRequest"
  | "Unauthorized"
  | "Forbidden"
  | "NotFound"
  | "MethodNotAllowed"
  | "NotAcceptable"
  | "AlreadyExists"
  | "Conflict"
  | "Gone"
  | "Expired"
  | "RequestEntityTooLarge"
  | "UnsupportedMediaType"
  | "Invalid"
  | "TooManyRequests"
  | "InternalError"
  | "ServiceUnavailable"
  | "ServerTimeout"
  | "Timeout"
  | "StoreReadError"
  /** No answer from the API server: connection or TLS failure, or the call's timeout ran out. */
  | "Unavailable"
  /** The server answered with an error that carries no known reason, or the request could not be built (code 0). */
  | "Unknown";

const statusReasons: ReadonlySet<string> = new Set<KubernetesErrorReason>([
  "BadRequest",
  "Unauthorized",
  "Forbidden",
  "NotFound",
  "MethodNotAllowed",
  "NotAcceptable",
  "AlreadyExists",
  "Conflict",
  "Gone",
  "Expired",
  "RequestEntityTooLarge",
  "UnsupportedMediaType",
  "Invalid",
  "TooManyRequests",
  "InternalError",
  "ServiceUnavailable",
  "ServerTimeout",
  "Timeout",
  "StoreReadError",
]);

/** The reason the API server implies by an HTTP status code when its body has none. */
const reasonByCode: Readonly<Record<number, KubernetesErrorReason>> = {
  400: "BadRequest",
  401: "Unauthorized",
  403: "Forbidden",
  404: "NotFound",
  405: "MethodNotAllowed",
  406: "NotAcceptable",
  409: "Conflict",
  410: "Gone",
  413: "RequestEntityTooLarge",
  415: "UnsupportedMediaType",
  422: "Invalid",
  429: "TooManyRequests",
  500: "InternalError",
  503: "ServiceUnavailable",
  504: "Timeout",
};

const retryableReasons: ReadonlySet<KubernetesErrorReason> = new Set<KubernetesErrorReason>([
  "Unavailable",
  "TooManyRequests",
  "InternalError",
  "ServiceUnavailable",
  "ServerTimeout",
  "Timeout",
]);

/** The longest server message kept in an error; the rest is cut. */
const maxServerMessage = 1000;

/** A failed Kubernetes API request. */
export class KubernetesError extends Error {
  /** HTTP status code, or 0 when no response arrived (`Unavailable`) or no request was sent. */
  readonly code: number;
  /** Machine-readable reason. */
  readonly reason: KubernetesErrorReason;
  /** The server's own message (from its `Status`), or the transport failure's. */
  readonly serverMessage: string;
  /** The `Status.details` the server sent, if any (name, kind, causes). */
  readonly details?: StatusDetails;

  /** An error of request `request` (verb, resource, name) with the server's code, reason and message. */
  constructor(
    reason: KubernetesErrorReason,
    code: number,
    message: string,
    options: { serverMessage?: string; details?: StatusDetails; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "KubernetesError";
    this.reason = reason;
    this.code = code;
    this.serverMessage = options.serverMessage ?? "";
    this.details = options.details;
  }

  /** Whether repeating the same request later may succeed (transport failures, overload, server errors). */
  get retryable(): boolean {
    // 5xx without a Status (a load balancer's 502, say) is as transient as the server's own.
    return retryableReasons.has(this.reason) || (this.code >= 500 && this.code !== 501);
  }
}

/** Whether `error` is a {@linkcode KubernetesError} with the given reason. */
export function isKubernetesError(error: unknown, reason?: KubernetesErrorReason): error is KubernetesError {
  return error instanceof KubernetesError && (reason === undefined || error.reason === reason);
}

/**
 * Builds the error for a non-2xx response. `request` names the call (e.g.
 * `get secrets kube-system/bootstrap-token-abcdef`); `body` is the response
 * text, used only if it is a Kubernetes `Status`.
 */
export function errorFromResponse(request: string, code: number, body: string): KubernetesError {
  const status = parseStatus(body);
  const reason = status.reason !== undefined && statusReasons.has(status.reason)
    ? status.reason as KubernetesErrorReason
    : reasonByCode[code] ?? "Unknown";
  const serverMessage = truncate(status.message ?? "");
  const text = serverMessage ? `: ${serverMessage}` : "";
  return new KubernetesError(reason, code, `kubernetes: ${request}: ${reason} (${code})${text}`, {
    serverMessage,
    details: status.details,
  });
}

/**
 * Builds the `Unavailable` error for a request that got no response. With
 * `usesClientCertificate`, a handshake the server broke off is explained:
 * TLS 1.3 servers reject a client certificate only after the client
 * considers the handshake done, so the transport error alone does not say so.
 */
export function unavailableError(
  request: string,
  what: string,
  cause?: unknown,
  options: { usesClientCertificate?: boolean } = {},
): KubernetesError {
  const serverMessage = truncate(describeCause(cause));
  let text = serverMessage ? `: ${serverMessage}` : "";
  if (options.usesClientCertificate && /close_notify|fatal alert/i.test(serverMessage)) {
    text +=
      " (the server ended the TLS handshake: is the client certificate issued by a CA the server trusts?)";
  }
  return new KubernetesError("Unavailable", 0, `kubernetes: ${request}: ${what}${text}`, {
    serverMessage,
    cause,
  });
}

/**
 * The fields of a `Status` body that are used, each only if of its type: the
 * body comes from whatever answered (a proxy, a broken server), and a
 * `message` that is not a string would break `truncate` or reach callers as
 * a `serverMessage` that is not one. Empty if the body is no `Status`.
 */
function parseStatus(body: string): Pick<Status, "reason" | "message" | "details"> {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    // Not JSON (e.g. a proxy's HTML page): the status code alone tells the reason.
    return {};
  }
  if (!isObject(value) || value.kind !== "Status") return {};
  return {
    reason: typeof value.reason === "string" ? value.reason : undefined,
    message: typeof value.message === "string" ? value.message : undefined,
    details: isObject(value.details) ? value.details as StatusDetails : undefined,
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Joins the messages of an error's cause chain: fetch puts the useful part (TLS alert, errno) in `cause`. */
function describeCause(cause: unknown): string {
  const parts: string[] = [];
  for (let e = cause, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e.message && !parts.includes(e.message)) parts.push(e.message);
  }
  return parts.join(": ");
}

function truncate(text: string): string {
  return text.length > maxServerMessage ? text.slice(0, maxServerMessage) + "…" : text;
}
