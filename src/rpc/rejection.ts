/**
 * A request a service refuses: one error type carrying a machine-readable
 * `reason` (for audit lines and metrics), the Connect code the client gets,
 * and, when attestation got far enough to know it, the attestation key's
 * digest; and the one conversion to the {@linkcode ConnectError} a handler
 * returns.
 *
 * Each service names its reasons and their codes in one compiler-checked
 * table and builds its rejections from it (the join service:
 * `src/joinservice/rejections.ts`). Three reasons every service shares are
 * made here, from errors no service threw on purpose.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";

/** Reasons every service shares: the caller canceled, its deadline passed, or an unexpected error (a bug). */
export type CommonReason = "canceled" | "deadline" | "internal";

/** The codes of the {@linkcode CommonReason}s, for a service's table of reasons and codes. */
export const COMMON_REASON_CODES: Readonly<Record<CommonReason, Code>> = {
  "canceled": Code.Canceled,
  "deadline": Code.DeadlineExceeded,
  "internal": Code.Internal,
};

/** Options for {@linkcode Rejection}. */
export interface RejectionOptions {
  /** Hex SHA-256 of the attestation key of the refused request, for audit lines (never sent to the client). */
  keyDigest?: string;
  /** The underlying error, for the service's own log (never sent to the client). */
  cause?: unknown;
}

/**
 * A refused request. Its message is what the client reads: it names what
 * was wrong and never holds a secret. An "internal" rejection's message is
 * only "internal error"; its cause goes to the service's log.
 */
export class Rejection extends Error {
  /** Why, machine-readable (a service's reason, or a {@linkcode CommonReason}). */
  readonly reason: string;
  /** The Connect code the client gets. */
  readonly code: Code;
  /** Hex SHA-256 of the attestation key, when known. */
  readonly keyDigest?: string;
  /** The step that failed, when {@linkcode during} named it. */
  readonly step?: string;

  /** A rejection for `reason` with Connect `code`; `message` is what the client reads. */
  constructor(
    reason: string,
    code: Code,
    message: string,
    options: RejectionOptions & { step?: string } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "Rejection";
    this.reason = reason;
    this.code = code;
    this.keyDigest = options.keyDigest;
    this.step = options.step;
  }

  /**
   * The same rejection, its message preceded by the step that failed
   * (`"getting components: API server unavailable: …"`). An internal
   * error keeps its bare message and only records the step for the log.
   */
  during(step: string): Rejection {
    const message = this.reason === "internal" ? this.message : `${step}: ${this.message}`;
    return new Rejection(this.reason, this.code, message, {
      keyDigest: this.keyDigest,
      cause: this.cause,
      step,
    });
  }
}

/**
 * Any error as a {@linkcode Rejection}: a rejection as it is, an aborted or
 * timed-out call as "canceled" or "deadline", anything else as "internal"
 * with the original as its cause.
 */
export function asRejection(error: unknown): Rejection {
  if (error instanceof Rejection) return error;
  if (error instanceof ConnectError && error.code === Code.Canceled) {
    return new Rejection("canceled", Code.Canceled, "request canceled", { cause: error });
  }
  if (error instanceof ConnectError && error.code === Code.DeadlineExceeded) {
    return new Rejection("deadline", Code.DeadlineExceeded, "request timed out", { cause: error });
  }
  if (error instanceof DOMException && error.name === "AbortError") {
    return new Rejection("canceled", Code.Canceled, "request canceled", { cause: error });
  }
  if (error instanceof DOMException && error.name === "TimeoutError") {
    return new Rejection("deadline", Code.DeadlineExceeded, "request timed out", { cause: error });
  }
  return new Rejection("internal", Code.Internal, "internal error", { cause: error });
}

/** The error a handler returns for a rejection: its code and message, nothing else (no key digest, no cause). */
export function toConnectError(rejection: Rejection): ConnectError {
  return new ConnectError(rejection.message, rejection.code);
}
