/**
 * `cli verify`: asks a node's init server for evidence over a fresh nonce
 * (`GetAttestation`, as the init does first) and validates it against the
 * attestation config, without sending anything else; or validates evidence
 * saved to a file (`--evidence`, e.g. downloaded from the browser console).
 * The result lists every measurement of the config with the node's value.
 *
 * The verification and its report are `src/verification/report.ts`, which
 * the browser console runs too; this module adds the node connection and
 * the CLI's errors.
 *
 * @module
 */
import { createClient } from "@connectrpc/connect";
import { readRegularTextFile } from "../fs/read_regular_file.ts";
import { API } from "../gen/init/init_pb.ts";
import type { Logger } from "../log/logger.ts";
import { EvidenceFileError, parseEvidenceFile } from "../verification/evidence_file.ts";
import {
  EvidenceAnswerError,
  evidenceFromAnswer,
  newAttestationNonce,
  type NodeEvidence,
  verifyNodeEvidence,
  type VerifyResult,
} from "../verification/report.ts";
import type { LoadedAttestationConfig } from "./attestation_config_file.ts";
import { CliError, errorLine } from "./errors.ts";
import { connectNode } from "./node_connection.ts";
import { describeNodeCallError } from "./node_errors.ts";
import { describeFsError } from "./output_file.ts";

/** Options for {@linkcode verifyNode} and {@linkcode verifyEvidenceFile}. */
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
  using connection = connectNode(node);
  const client = createClient(API, connection.transport);
  const nonce = newAttestationNonce();
  let answer;
  try {
    answer = await client.getAttestation({ nonce }, { signal: options.signal });
  } catch (error) {
    throw describeNodeCallError(error, node, options.signal);
  }
  let evidence: NodeEvidence;
  try {
    evidence = evidenceFromAnswer(node, nonce, answer);
  } catch (error) {
    if (error instanceof EvidenceAnswerError) throw new CliError("protocol", error.message, { cause: error });
    throw error;
  }
  return await verify(evidence, loaded, options);
}

/**
 * Verifies the evidence saved in the file at `path` (see
 * `src/verification/evidence_file.ts`) against `loaded`. Throws
 * {@linkcode CliError} "input" for an unreadable or malformed file.
 */
export async function verifyEvidenceFile(
  path: string,
  loaded: LoadedAttestationConfig,
  options: VerifyNodeOptions,
): Promise<VerifyResult> {
  let text: string;
  try {
    text = await readRegularTextFile(path);
  } catch (error) {
    throw new CliError(
      "input",
      `cannot read evidence file ${path}: ${describeFsError(error, path, "read")}`,
      {
        cause: error,
      },
    );
  }
  let evidence: NodeEvidence;
  try {
    evidence = parseEvidenceFile(text, `evidence file ${path}`);
  } catch (error) {
    if (error instanceof EvidenceFileError) throw new CliError("input", error.message, { cause: error });
    throw error;
  }
  return await verify(evidence, loaded, options);
}

async function verify(
  evidence: NodeEvidence,
  loaded: LoadedAttestationConfig,
  options: VerifyNodeOptions,
): Promise<VerifyResult> {
  try {
    return await verifyNodeEvidence(evidence, loaded.config, options);
  } catch (error) {
    if (options.signal?.aborted) throw describeNodeCallError(error, evidence.node, options.signal);
    throw new CliError(
      "protocol",
      `node ${evidence.node}: validating its evidence failed: ${errorLine(error)}`,
      { cause: error },
    );
  }
}
