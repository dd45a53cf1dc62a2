/**
 * Why an attested exchange failed, and how each reason maps to a Connect
 * status code.
 *
 * Every failure of the exchange is an {@linkcode ExchangeError} with a
 * machine-readable `reason`: nonce failures, structural failures of the
 * attested request, and the {@linkcode AttestationFailure} reasons of the
 * validator passed through unchanged (with their measurement mismatches and
 * the attestation key's digest, for audit lines). {@linkcode exchangeRejection}
 * turns one into the rejection a handler returns. Messages name the reason
 * and never contain key material, nonces or plaintexts.
 *
 * @module
 */
import { Code } from "@connectrpc/connect";
import { Rejection } from "../rpc/rejection.ts";
import {
  AttestationError,
  type AttestationFailure,
  type MeasurementMismatch,
} from "../attestation/attestation.ts";

/** Failures of the exchange itself (as opposed to the evidence's verdict). */
export type ExchangeFailure =
  | "nonce-malformed" // wrong length or version: not a nonce of this protocol
  | "nonce-bad-mac" // the MAC does not verify: not issued under this verifier's nonce key
  | "nonce-other-replica" // issued by another replica, or by this one before it restarted
  | "nonce-expired" // past its expiry
  | "nonce-not-yet-valid" // its expiry lies further ahead than any nonce this verifier issues
  | "nonce-replayed" // already consumed by this replica
  | "nonce-capacity" // the single-use set is full of unexpired nonces; retry later
  | "evidence-missing" // the attestation or its evidence is absent
  | "evidence-malformed" // wrong sizes: public key, nonce or document
  | "variant-mismatch" // evidence of another variant than the verifier validates
  | "seal-failed" // the attested public key is not a usable X25519 key
  | "open-failed"; // a sealed payload does not open under this exchange's key, info and aad

/** Every reason an {@linkcode ExchangeError} can carry. */
export type ExchangeErrorReason = ExchangeFailure | AttestationFailure;

/** The attested exchange failed. Carries no secret. */
export class ExchangeError extends Error {
  /** The reason, machine-readable. */
  readonly reason: ExchangeErrorReason;
  /** Every measurement mismatch the validator found (enforced and warn-only). */
  readonly mismatches: readonly MeasurementMismatch[];
  /** Hex SHA-256 of the rejected evidence's attestation key, when the validator got far enough to know it. */
  readonly keyDigest?: string;

  /** An exchange failure for `reason`; the message names it and never holds a secret. */
  constructor(
    reason: ExchangeErrorReason,
    message: string,
    options: { mismatches?: readonly MeasurementMismatch[]; keyDigest?: string; cause?: unknown } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "ExchangeError";
    this.reason = reason;
    this.mismatches = options.mismatches ?? [];
    this.keyDigest = options.keyDigest;
  }

  /** Wraps a validator's verdict, keeping its reason, mismatch list and attestation key digest. */
  static fromAttestation(err: AttestationError): ExchangeError {
    return new ExchangeError(err.reason, err.message, {
      mismatches: err.mismatches,
      keyDigest: err.keyDigest,
      cause: err,
    });
  }
}

const codes: Record<ExchangeErrorReason, Code> = {
  "nonce-malformed": Code.InvalidArgument,
  "nonce-bad-mac": Code.PermissionDenied,
  "nonce-other-replica": Code.PermissionDenied,
  "nonce-expired": Code.PermissionDenied,
  "nonce-not-yet-valid": Code.PermissionDenied,
  "nonce-replayed": Code.PermissionDenied,
  "nonce-capacity": Code.ResourceExhausted,
  "evidence-missing": Code.InvalidArgument,
  "evidence-malformed": Code.InvalidArgument,
  "variant-mismatch": Code.PermissionDenied,
  "seal-failed": Code.InvalidArgument,
  "open-failed": Code.InvalidArgument,
  "malformed": Code.InvalidArgument,
  "wrong-variant": Code.PermissionDenied,
  "untrusted-key": Code.PermissionDenied,
  "signature-invalid": Code.PermissionDenied,
  "report-data-mismatch": Code.PermissionDenied,
  "pcr-digest-mismatch": Code.PermissionDenied,
  "measurement-mismatch": Code.PermissionDenied,
  "unavailable": Code.Unavailable,
};

/** The Connect status code for an exchange failure reason. */
export function connectCodeFor(reason: ExchangeErrorReason): Code {
  return codes[reason];
}

/**
 * One mismatch in the words of a rejection: `PCR[4] expected <hex>, got
 * <hex> (enforced)`, or `got nothing` when the evidence lacks it. The CLI
 * names a warn-only mismatch the evidence passed with in the same words.
 */
export function describeMismatch(m: MeasurementMismatch): string {
  return `PCR[${m.index}] expected ${m.expected}, got ${m.actual ?? "nothing"} (${
    m.enforced ? "enforced" : "warn-only"
  })`;
}

/** Every mismatch, `; `-separated ({@linkcode describeMismatch}). */
function describeMismatches(mismatches: readonly MeasurementMismatch[]): string {
  return mismatches.map(describeMismatch).join("; ");
}

/**
 * An exchange failure as the {@linkcode Rejection} a service returns (an
 * {@linkcode AttestationError} is taken as its {@linkcode ExchangeError}):
 * the code of its reason (PermissionDenied for nonce and attestation
 * failures, InvalidArgument for malformed input, ResourceExhausted for a
 * full nonce set, Unavailable when evidence could not be produced), a
 * message naming the reason (for a measurement mismatch, every mismatch,
 * enforced and warn-only, instead of the validator's own wording), and the
 * attestation key's digest for the audit line (never in the message).
 */
export function exchangeRejection(err: ExchangeError | AttestationError): Rejection {
  const exchange = err instanceof ExchangeError ? err : ExchangeError.fromAttestation(err);
  // For a measurement mismatch the list is the whole story, in one format whatever the variant.
  const detail = exchange.reason === "measurement-mismatch" && exchange.mismatches.length > 0
    ? `measurements differ: ${describeMismatches(exchange.mismatches)}`
    : exchange.message;
  return new Rejection(
    exchange.reason,
    connectCodeFor(exchange.reason),
    `attested exchange rejected (${exchange.reason}): ${detail}`,
    { keyDigest: exchange.keyDigest, cause: exchange },
  );
}
