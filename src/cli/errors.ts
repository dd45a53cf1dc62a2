/**
 * The CLI's error: one line for the operator naming what to fix (a file, a
 * flag, the node), never a secret and never a stack trace. `main.ts` prints
 * it as `cli: <message>` and exits 1.
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { ReasonError } from "../reason_error.ts";

/** What went wrong, machine-readable (tests and the JSON output branch on it). */
export type CliFailure =
  | "config" // the attestation config is unreadable or invalid
  | "master-secret" // the master secret file is malformed, unreadable or cannot be created
  | "input" // another input file (init secret, Kubernetes components) is unusable
  | "output" // an output file cannot be written (or already exists)
  | "unreachable" // the node did not answer before the deadline
  | "attestation" // the node's attestation was rejected
  | "init-secret" // the node refused the init secret
  | "refused" // the node refused or failed the init
  | "protocol" // the node answered something the protocol does not allow
  | "canceled"; // interrupted (Ctrl-C)

/** A failure the operator can act on; `message` says what to fix. */
export class CliError extends ReasonError<CliFailure> {}

/** The first line of an error's message (never its stack). */
export function errorLine(error: unknown): string {
  const text = errorMessage(error);
  return text.split("\n")[0];
}
