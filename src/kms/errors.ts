/**
 * The error type of the key derivation library.
 *
 * @module
 */
import { ReasonError } from "../reason_error.ts";

/** What went wrong, machine-readable. */
export type KmsFailure =
  | "invalid-length" // a derived key length outside 1..8160 bytes
  | "missing-master-key" // an empty master secret
  | "missing-salt" // an empty salt
  | "short-master-secret" // a master secret or salt shorter than the key service accepts
  | "invalid-uri" // a KMS or storage URI that cannot be parsed
  | "unknown-backend" // a KMS or storage type this library does not know
  | "unsupported-backend"; // a known cloud backend the port does not implement

/**
 * A key derivation or KMS configuration failure. Messages never contain key
 * material: a URI's parameter values are never echoed.
 */
export class KmsError extends ReasonError<KmsFailure> {}
