/**
 * `cli verify`: asks a node's init server for evidence over a fresh nonce
 * (`GetAttestation`, as the init does first) and validates it against the
 * attestation config, without sending anything else. The result lists every
 * measurement of the config with the node's value.
 *
 * Where the values come from: a passing verification reports every quoted
 * PCR ({@linkcode Verification.measurements}); a rejection for
 * mismatching measurements names each mismatch with its reported value, and
 * every configured PCR it does not name equals its expected value (the
 * validator compares all of them, after the quote's signature and PCR
 * digest checked out). Evidence rejected before that (untrusted key, bad
 * signature, wrong report data) proves no value, so none is shown.
 *
 * @module
 */
import { createClient } from "@connectrpc/connect";
import type { MeasurementMismatch, Verification } from "../attestation/attestation.ts";
import { ExchangeError } from "../atls/errors.ts";
import { validateAttestedRequest } from "../atls/verifier.ts";
import { initAttestationRequestDigest } from "../atls/reportdata.ts";
import { API } from "../gen/init/init_pb.ts";
import { INIT_NONCE_LENGTH, INIT_PURPOSE, isPublicKeyLength } from "../init/protocol.ts";
import type { Logger } from "../log/logger.ts";
import { configValidator, type LoadedAttestationConfig } from "./attestation_config_file.ts";
import { CliError, errorLine } from "./errors.ts";
import { connectNode } from "./node_connection.ts";
import { describeNodeCallError } from "./node_errors.ts";

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

/** Options for {@linkcode verifyNode}. */
export interface VerifyNodeOptions {
  /** Receives the validator's warnings. */
  logger: Logger;
  /** Aborts the call. */
  signal?: AbortSignal;
}

/**
 * Verifies the node at `node` against `loaded`. Resolves with the result,
 * passed or not; throws {@linkcode CliError} when the node cannot be asked
 * ("unreachable") or answers outside the protocol ("protocol").
 */
export async function verifyNode(
  node: string,
  loaded: LoadedAttestationConfig,
  options: VerifyNodeOptions,
): Promise<VerifyResult> {
  const validator = configValidator(loaded, options.logger);
  using connection = connectNode(node);
  const client = createClient(API, connection.transport);
  const nonce = crypto.getRandomValues(new Uint8Array(INIT_NONCE_LENGTH));
  let answer;
  try {
    answer = await client.getAttestation({ nonce }, { signal: options.signal });
  } catch (error) {
    throw describeNodeCallError(error, node, options.signal);
  }
  const { publicKey, evidence } = answer;
  if (!evidence || evidence.document.length === 0 || !isPublicKeyLength(publicKey)) {
    throw new CliError(
      "protocol",
      `node ${node}: its GetAttestation answer carries no evidence or no valid key`,
    );
  }
  const base = { node, variant: loaded.config.variant };
  try {
    const verified = await validateAttestedRequest(
      { nonce, publicKey: new Uint8Array(publicKey), variant: evidence.variant, document: evidence.document },
      {
        purpose: INIT_PURPOSE,
        requestDigest: await initAttestationRequestDigest(),
        validator,
        signal: options.signal,
      },
    );
    return { ...base, passed: true, pcrs: rowsFromVerification(loaded, verified.verification) };
  } catch (error) {
    if (!(error instanceof ExchangeError)) {
      throw new CliError("protocol", `node ${node}: validating its evidence failed: ${errorLine(error)}`, {
        cause: error,
      });
    }
    const proven = error.reason === "measurement-mismatch";
    return {
      ...base,
      passed: false,
      reason: error.reason,
      message: error.message,
      pcrs: rowsFromMismatches(loaded, error.mismatches, proven),
    };
  }
}

/** Rows from a passing verification: every value as reported. */
export function rowsFromVerification(loaded: LoadedAttestationConfig, verification: Verification): PcrRow[] {
  return [...loaded.config.measurements].map(([index, measurement]) => {
    const expected = measurement.expected.toHex();
    const actual = verification.measurements[index]?.toLowerCase() ?? null;
    return {
      index,
      expected,
      actual,
      enforced: !measurement.warnOnly,
      match: actual === null ? null : actual === expected,
    };
  });
}

/**
 * Rows from a rejection: each mismatch with its reported value; with
 * `proven` (the validator compared every measurement) the others matched.
 */
export function rowsFromMismatches(
  loaded: LoadedAttestationConfig,
  mismatches: readonly MeasurementMismatch[],
  proven: boolean,
): PcrRow[] {
  const byIndex = new Map(mismatches.map((mismatch) => [mismatch.index, mismatch]));
  return [...loaded.config.measurements].map(([index, measurement]) => {
    const expected = measurement.expected.toHex();
    const enforced = !measurement.warnOnly;
    const mismatch = byIndex.get(index);
    if (mismatch) return { index, expected, actual: mismatch.actual, enforced, match: false };
    return proven
      ? { index, expected, actual: expected, enforced, match: true }
      : { index, expected, actual: null, enforced, match: null };
  });
}
