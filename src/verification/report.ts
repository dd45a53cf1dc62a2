/**
 * Verifying a node's attestation answer (`init.API/GetAttestation`) against
 * the operator's attestation config, and the report of it: one
 * implementation for `cli verify` (`src/cli/verify.ts`) and the browser
 * console's node inspector (`src/console/inspector.ts`). It uses WebCrypto
 * only, so it runs in Deno and in browsers alike, with the validators of
 * `src/attestation/registry.ts` (the join service's).
 *
 * Where the values in the report come from: a passing verification reports
 * every quoted PCR ({@linkcode Verification.measurements}); a rejection for
 * mismatching measurements names each mismatch with its reported value, and
 * every configured PCR it does not name equals its expected value (the
 * validator compares all of them, after the quote's signature and PCR digest
 * checked out). Evidence rejected before that (untrusted key, bad
 * signature, wrong report data) proves no value, so none is shown.
 *
 * @module
 */
import type { MeasurementMismatch, Verification } from "../attestation/attestation.ts";
import type { AttestationConfig } from "../attestation/config.ts";
import { createValidator } from "../attestation/registry.ts";
import { ExchangeError } from "../atls/errors.ts";
import { initAttestationRequestDigest } from "../atls/reportdata.ts";
import { validateAttestedRequest } from "../atls/verifier.ts";
import type { GetAttestationResponse } from "../gen/init/init_pb.ts";
import { INIT_NONCE_LENGTH, INIT_PURPOSE, isPublicKeyLength } from "../init/protocol.ts";
import type { Logger } from "../log/logger.ts";

/** One configured measurement and what the node reported. */
export interface PcrRow {
  /** The PCR index. */
  index: number;
  /** Expected value (lower-case hex). */
  expected: string;
  /** The node's value (lower-case hex), or null when the evidence proved none. */
  actual: string | null;
  /** Whether a mismatch rejects (false: warn-only). */
  enforced: boolean;
  /** Whether the values are equal, or null when unknown. */
  match: boolean | null;
}

/** The outcome of a verification. */
export interface VerifyResult {
  /** The node's "host:port". */
  node: string;
  /** The attestation variant of the config. */
  variant: string;
  /** True when the evidence passed (warn-only mismatches allowed). */
  passed: boolean;
  /** Why it was rejected (e.g. "measurement-mismatch", "untrusted-key"), when it was. */
  reason?: string;
  /** The rejection in words, when it was rejected. */
  message?: string;
  /** Every measurement of the config, by index. */
  pcrs: PcrRow[];
}

/** A node's answer to `GetAttestation`, with the nonce it was asked for. */
export interface NodeEvidence {
  /** The node's "host:port", as it was asked. */
  node: string;
  /** The 32-byte nonce the asker drew. */
  nonce: Uint8Array;
  /** The node's HPKE public key the evidence binds (32 bytes). */
  publicKey: Uint8Array;
  /** The evidence's attestation variant. */
  variant: string;
  /** The attestation document. */
  document: Uint8Array;
}

/** A node's answer that is no evidence at all (outside the protocol). */
export class EvidenceAnswerError extends Error {
  /** An answer of `node` outside the protocol, described by `message`. */
  constructor(message: string) {
    super(message);
    this.name = "EvidenceAnswerError";
  }
}

/** A fresh nonce for `GetAttestation` (32 random bytes). */
export function newAttestationNonce(): Uint8Array<ArrayBuffer> {
  return crypto.getRandomValues(new Uint8Array(INIT_NONCE_LENGTH));
}

/**
 * The evidence in `answer`, the node's answer to `GetAttestation(nonce)`.
 * Throws {@linkcode EvidenceAnswerError} when it carries no evidence or no
 * valid key.
 */
export function evidenceFromAnswer(
  node: string,
  nonce: Uint8Array,
  answer: GetAttestationResponse,
): NodeEvidence {
  const { publicKey, evidence } = answer;
  if (!evidence || evidence.document.length === 0 || !isPublicKeyLength(publicKey)) {
    throw new EvidenceAnswerError(
      `node ${node}: its GetAttestation answer carries no evidence or no valid key`,
    );
  }
  return { node, nonce, publicKey, variant: evidence.variant, document: evidence.document };
}

/** Options for {@linkcode verifyNodeEvidence}. */
export interface VerifyNodeEvidenceOptions {
  /** Receives the validator's warnings (e.g. an insecure AK trust). */
  logger: Logger;
  /** Aborts the validation. */
  signal?: AbortSignal;
}

/**
 * Verifies `evidence` against `config`: the evidence must be bound to the
 * nonce and the node's key (the init exchange's report data), signed by a
 * trusted attestation key, and carry every enforced measurement. Resolves
 * with the report, passed or not. Any error other than the evidence's
 * verdict (e.g. an aborted signal) is thrown unchanged.
 */
export async function verifyNodeEvidence(
  evidence: NodeEvidence,
  config: AttestationConfig,
  options: VerifyNodeEvidenceOptions,
): Promise<VerifyResult> {
  const validator = createValidator(config, { logger: options.logger });
  const base = { node: evidence.node, variant: config.variant };
  try {
    const verified = await validateAttestedRequest(
      {
        nonce: evidence.nonce,
        publicKey: new Uint8Array(evidence.publicKey),
        variant: evidence.variant,
        document: evidence.document,
      },
      {
        purpose: INIT_PURPOSE,
        requestDigest: await initAttestationRequestDigest(),
        validator,
        signal: options.signal,
      },
    );
    return { ...base, passed: true, pcrs: rowsFromVerification(config, verified.verification) };
  } catch (error) {
    if (!(error instanceof ExchangeError)) throw error;
    const proven = error.reason === "measurement-mismatch";
    return {
      ...base,
      passed: false,
      reason: error.reason,
      message: error.message,
      pcrs: rowsFromMismatches(config, error.mismatches, proven),
    };
  }
}

/**
 * Rows from a passing verification: every value as reported. A warn-only
 * measurement the validator warned about is a mismatch, also when the
 * evidence lacks it (a quote that does not cover the PCR).
 */
export function rowsFromVerification(config: AttestationConfig, verification: Verification): PcrRow[] {
  const warned = new Set(verification.warnings.map((warning) => warning.index));
  return [...config.measurements].map(([index, measurement]) => {
    const expected = measurement.expected.toHex();
    const actual = verification.measurements[index]?.toLowerCase() ?? null;
    return {
      index,
      expected,
      actual,
      enforced: !measurement.warnOnly,
      match: warned.has(index) ? false : actual === null ? null : actual === expected,
    };
  });
}

/**
 * Rows from a rejection: each mismatch with its reported value; with
 * `proven` (the validator compared every measurement) the others matched.
 */
export function rowsFromMismatches(
  config: AttestationConfig,
  mismatches: readonly MeasurementMismatch[],
  proven: boolean,
): PcrRow[] {
  const byIndex = new Map(mismatches.map((mismatch) => [mismatch.index, mismatch]));
  return [...config.measurements].map(([index, measurement]) => {
    const expected = measurement.expected.toHex();
    const enforced = !measurement.warnOnly;
    const mismatch = byIndex.get(index);
    if (mismatch) return { index, expected, actual: mismatch.actual, enforced, match: false };
    return proven
      ? { index, expected, actual: expected, enforced, match: true }
      : { index, expected, actual: null, enforced, match: null };
  });
}

/** The JSON document of a result (one line): `{node, variant, passed, reason?, message?, pcrs: [...]}`. */
export function renderVerifyJson(result: VerifyResult): string {
  return `${JSON.stringify(result)}\n`;
}

/**
 * The verdict in words: "attestation OK" or "attestation FAILED (<reason>)";
 * a pass with enforced measurements the evidence did not prove (a `dummy`
 * config that lists some) says so.
 */
export function verdictText(result: VerifyResult): string {
  if (!result.passed) return `attestation FAILED (${result.reason ?? "rejected"})`;
  const unproven = result.pcrs.filter((row) => row.enforced && row.match === null).length;
  return unproven === 0
    ? "attestation OK"
    : `attestation OK, but ${unproven} enforced measurement(s) not proven: the ${result.variant} variant proves none`;
}

/** A row's policy in words: "enforced" or "warn-only". */
export function policyText(row: PcrRow): string {
  return row.enforced ? "enforced" : "warn-only";
}

/** A row's comparison in words: "ok", "MISMATCH", or "unknown" (the evidence proved no value). */
export function matchText(row: PcrRow): string {
  if (row.match === null) return "unknown";
  return row.match ? "ok" : "MISMATCH";
}

/**
 * Why a rejection happened, when the PCR rows do not say it (any reason but
 * a measurement mismatch): the validator's message.
 */
export function whyText(result: VerifyResult): string | undefined {
  return !result.passed && result.message && result.reason !== "measurement-mismatch"
    ? result.message
    : undefined;
}

/** The mismatching PCRs in words, e.g. "mismatching: PCR[4] (enforced)", or undefined when none. */
export function mismatchSummary(result: VerifyResult): string | undefined {
  const mismatched = result.pcrs.filter((row) => row.match === false);
  if (mismatched.length === 0) return undefined;
  return `mismatching: ${mismatched.map((row) => `PCR[${row.index}] (${policyText(row)})`).join(", ")}`;
}
