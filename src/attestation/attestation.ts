/**
 * The issuer/validator contract every attestation variant implements.
 *
 * An issuer (on the attesting node) turns 32 bytes of report data into an
 * attestation document; a validator (on the verifier) checks a document
 * against the report data it expects and the expected measurements, and
 * either returns a {@linkcode Verification} or throws an
 * {@linkcode AttestationError} naming every reason.
 *
 * @module
 */

/** Length of the report data bound into evidence (TPM `extraData`). */
export const REPORT_DATA_LENGTH = 32;

/**
 * Largest attestation document of any variant (64 KiB): the verifier rejects
 * larger ones before looking at them, validators refuse to parse them, and
 * issuers keep what they send within it.
 */
export const MAX_EVIDENCE_DOCUMENT_BYTES = 64 * 1024;

/** Produces evidence. */
export interface Issuer {
  /** Variant name, e.g. "qemu-vtpm". */
  readonly variant: string;
  /** Produces an attestation document whose report data is `reportData` (32 bytes). */
  issue(reportData: Uint8Array, options?: { signal?: AbortSignal }): Promise<Uint8Array>;
  /** Releases what the issuer holds (a TPM issuer's key contexts in a temporary directory), if anything. */
  close?(): Promise<void>;
}

/** Verifies evidence. */
export interface Validator {
  /** Variant name, e.g. "qemu-vtpm". */
  readonly variant: string;
  /**
   * Verifies `document` against the expected `reportData` and this
   * validator's expected measurements. Throws {@linkcode AttestationError}.
   */
  validate(
    document: Uint8Array,
    reportData: Uint8Array,
    options?: { signal?: AbortSignal },
  ): Promise<Verification>;
}

/** One expected measurement (a PCR for TPM variants). */
export interface Measurement {
  /** Expected value, 32 (TPM PCR) or 48 (TDX) bytes. */
  expected: Uint8Array;
  /** A mismatch is only warned about, not rejected. */
  warnOnly: boolean;
}

/** Expected measurements by index. */
export type Measurements = ReadonlyMap<number, Measurement>;

/** A measurement that did not match. */
export interface MeasurementMismatch {
  /** The measurement index (a PCR for TPM variants). */
  index: number;
  /** Lower-case hex of the expected value. */
  expected: string;
  /** Lower-case hex of the reported value, or null when the evidence lacks it. */
  actual: string | null;
  /** Enforced mismatches reject; warn-only ones are reported as warnings. */
  enforced: boolean;
}

/** A successful verification. */
export interface Verification {
  /** Variant that verified the evidence. */
  variant: string;
  /** Warn-only mismatches (the evidence passed with them). */
  warnings: MeasurementMismatch[];
  /** Reported measurement values by index (hex), for audit and status output. */
  measurements: Record<number, string>;
  /** Hex SHA-256 identifying the attestation key, when the variant has one. */
  keyDigest?: string;
}

/** Why evidence was rejected. Each reason is distinct so callers and logs can tell them apart. */
export type AttestationFailure =
  | "malformed" // the document cannot be parsed
  | "wrong-variant" // evidence of another variant than the validator's
  | "untrusted-key" // the attestation key is not trusted
  | "signature-invalid" // the quote signature does not verify
  | "report-data-mismatch" // the evidence is bound to other report data
  | "pcr-digest-mismatch" // reported PCR values do not match the signed digest
  | "measurement-mismatch" // enforced measurements differ
  | "unavailable"; // the attester could not produce evidence (TPM down, tool failed)

/** Evidence was rejected or could not be produced. Never carries secrets. */
export class AttestationError extends Error {
  /** The reason, machine-readable. */
  readonly reason: AttestationFailure;
  /** Every measurement mismatch found (enforced and warn-only). */
  readonly mismatches: MeasurementMismatch[];
  /**
   * Hex SHA-256 identifying the attestation key of the rejected evidence,
   * when the variant has one and the document was parsed far enough to know
   * it (see {@linkcode Verification.keyDigest}); for audit lines.
   */
  readonly keyDigest?: string;

  /** Rejected evidence for `reason`, with every mismatch found and the attestation key digest when known. */
  constructor(
    reason: AttestationFailure,
    message: string,
    mismatches: MeasurementMismatch[] = [],
    options: { keyDigest?: string } = {},
  ) {
    super(message);
    this.name = "AttestationError";
    this.reason = reason;
    this.mismatches = mismatches;
    this.keyDigest = options.keyDigest;
  }
}

/**
 * Which attestation keys a TPM validator trusts: an allow-list of key
 * digests (lower-case hex SHA-256, see the TPM variant's docs), or any key,
 * which is an explicit, logged choice (the original's QEMU behaviour) and
 * insecure: the key's TPM attributes are self-declared, so any software key
 * can then sign evidence that passes, without a TPM.
 */
export type AkTrust =
  | { kind: "allow-list"; keyDigests: ReadonlySet<string> }
  | { kind: "any" };

/** Whether `trust` covers the attestation key `keyDigest` (evidence without a key is covered only by "any"). */
export function trusts(trust: AkTrust, keyDigest: string | undefined): boolean {
  return trust.kind === "any" || (keyDigest !== undefined && trust.keyDigests.has(keyDigest));
}
