/**
 * kubeadm's failures as the simulator reports them: the message kubeadm
 * would print, the exit code it would use (1 in general, 2 for a failed preflight
 * check, 3 for an invalid configuration) and a machine-readable `reason` for tests.
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { ReasonError } from "../reason_error.ts";

/** kubeadm's exit codes (`cmd/kubeadm/app/util/error.go`). */
export const EXIT = { error: 1, preflight: 2, validation: 3 } as const;

/** Why an invocation failed. */
export type KubeadmSimFailure =
  | "usage" // the command line is not one kubeadm (or the simulator) accepts
  | "config" // the configuration file does not parse or decode
  | "invalid" // kubeadm's validation refuses the configuration
  | "unsupported" // kubeadm would accept it, the simulator does not simulate it
  | "preflight" // a preflight check failed
  | "missing-file" // a file the phase needs (CA, control-plane certificates) is not there
  | "discovery" // token discovery failed: API server unreachable, unknown token, CA hash mismatch
  | "injected" // a failure the test asked for (see inject.ts)
  | "io"; // reading or writing the node's files failed

/** A failure kubeadm would report, with its message and exit code. Messages never hold a token. */
export class KubeadmSimError extends ReasonError<KubeadmSimFailure> {
  /** The process exit code. */
  readonly exitCode: number;

  /** A failure for `reason`; `exitCode` defaults to 3 for "invalid", 2 for "preflight" and 1 otherwise. */
  constructor(
    reason: KubeadmSimFailure,
    message: string,
    options: { exitCode?: number; cause?: unknown } = {},
  ) {
    super(reason, message, { cause: options.cause });
    this.exitCode = options.exitCode ??
      (reason === "invalid" ? EXIT.validation : reason === "preflight" ? EXIT.preflight : EXIT.error);
  }

  /** `error execution phase <phase>: <message>`, as kubeadm's phase runner wraps a phase's error. */
  static inPhase(phase: string, error: unknown): KubeadmSimError {
    if (error instanceof KubeadmSimError) {
      return new KubeadmSimError(error.reason, `error execution phase ${phase}: ${error.message}`, {
        exitCode: error.exitCode,
      });
    }
    const message = errorMessage(error);
    return new KubeadmSimError("io", `error execution phase ${phase}: ${message}`);
  }
}

/**
 * A configuration that kubeadm's validation refuses; several field errors
 * are joined as Kubernetes' error aggregate prints them (`[a, b]`).
 */
export function validationError(fieldErrors: string[]): KubeadmSimError {
  const message = fieldErrors.length === 1 ? fieldErrors[0] : `[${fieldErrors.join(", ")}]`;
  return new KubeadmSimError("invalid", message);
}
