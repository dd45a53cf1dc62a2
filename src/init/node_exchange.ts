/**
 * The operator's side of an exchange with a node, shared by the init
 * client and the recovery client: the node's evidence for a fresh nonce,
 * verified before anything is sent (docs/attested-exchange.md §7.4 and
 * §7.7, steps 1-2), and one error type for every way such an exchange fails.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { AttestationError, type MeasurementMismatch, type Validator } from "../attestation/attestation.ts";
import { ExchangeError, exchangeRejection } from "../atls/errors.ts";
import { initAttestationRequestDigest } from "../atls/reportdata.ts";
import { validateAttestedRequest } from "../atls/verifier.ts";
import type { GetAttestationResponse } from "../gen/init/init_pb.ts";
import { ReasonError } from "../reason_error.ts";
import { INIT_NONCE_LENGTH, isPublicKeyLength, type NodeExchangePurpose } from "./protocol.ts";

/** Why an exchange with a node failed. */
export type NodeExchangeFailure =
  | "attestation-rejected" // the node's evidence did not verify (every measurement mismatch is named)
  | "refused" // the node refused (`code`, `serverMessage`; an init's failure also `logs`)
  | "open-failed" // the node's answer does not open with this exchange's client key
  | "unavailable" // the node could not be reached, or its attestation could not be produced now
  | "protocol" // the node answered something the protocol does not allow
  | "canceled"; // the caller's signal aborted the exchange

/** An exchange with a node failed; `reason` says how. Carries no secret. */
export class NodeExchangeError extends ReasonError<NodeExchangeFailure> {
  /** The node's logs streamed after an init's failure (empty when none). */
  readonly logs: Uint8Array;
  /** The Connect code the node refused with, when it did. */
  readonly code?: Code;
  /** The node's own failure text (`init_failure.error` or the status message), for "refused". */
  readonly serverMessage?: string;
  /** Every measurement mismatch, for "attestation-rejected". */
  readonly mismatches: readonly MeasurementMismatch[];
  /** The attestation or exchange reason, for "attestation-rejected" (e.g. "measurement-mismatch"). */
  readonly attestationReason?: string;

  /** A failure; `message` names what happened. */
  constructor(
    reason: NodeExchangeFailure,
    message: string,
    options: ErrorOptions & {
      logs?: Uint8Array;
      code?: Code;
      serverMessage?: string;
      mismatches?: readonly MeasurementMismatch[];
      attestationReason?: string;
    } = {},
  ) {
    super(reason, message, options);
    this.logs = options.logs ?? new Uint8Array(0);
    this.code = options.code;
    this.serverMessage = options.serverMessage;
    this.mismatches = options.mismatches ?? [];
    this.attestationReason = options.attestationReason;
  }
}

/** The node's key for this exchange, attested for the client's nonce. */
export interface AttestedNodeKey {
  /** The nonce the evidence was made for (the request carries it back). */
  nonce: Uint8Array;
  /** The node's X25519 public key. */
  publicKey: Uint8Array;
  /** The exchange's report data (the AAD of both sealed messages). */
  reportData: Uint8Array<ArrayBuffer>;
}

/** Options of {@linkcode attestNode}. */
export interface AttestNodeOptions {
  /** Validator of the node's attestation variant, holding the expected measurements. */
  validator: Validator;
  /** Aborts the call and the validation. */
  signal?: AbortSignal;
  /** Source of the nonce; default 32 bytes from `crypto.getRandomValues` (tests pin it). */
  nonce?: () => Uint8Array;
}

/**
 * Steps 1-2 of the operator's exchanges: `getAttestation` for a fresh
 * nonce, and the answer's evidence validated against the report data
 * recomputed from that nonce and the node's key for `purpose`. Rejects
 * with {@linkcode NodeExchangeError} (a rejection names every measurement
 * mismatch).
 */
export async function attestNode(
  purpose: NodeExchangePurpose,
  getAttestation: (
    request: { nonce: Uint8Array },
    options: { signal?: AbortSignal },
  ) => Promise<GetAttestationResponse>,
  options: AttestNodeOptions,
): Promise<AttestedNodeKey> {
  const { signal } = options;
  const nonce = options.nonce?.() ?? crypto.getRandomValues(new Uint8Array(INIT_NONCE_LENGTH));
  if (nonce.length !== INIT_NONCE_LENGTH) throw new RangeError(`nonce must be ${INIT_NONCE_LENGTH} bytes`);
  const action = purpose === "init-attestation" ? "initialize" : "recover";
  const attestation = await callNode(
    "GetAttestation",
    action,
    () => getAttestation({ nonce }, { signal }),
    signal,
  );
  const { publicKey, evidence } = attestation;
  if (!evidence || evidence.document.length === 0) {
    throw new NodeExchangeError("protocol", "the node's GetAttestation answer carries no evidence");
  }
  if (!isPublicKeyLength(publicKey)) {
    throw new NodeExchangeError(
      "protocol",
      `the node's public key is ${publicKey.length} bytes, want 32 (X25519)`,
    );
  }
  try {
    const verified = await validateAttestedRequest(
      { nonce, publicKey: new Uint8Array(publicKey), variant: evidence.variant, document: evidence.document },
      { purpose, requestDigest: await initAttestationRequestDigest(), validator: options.validator, signal },
    );
    return { nonce, publicKey, reportData: verified.reportData };
  } catch (error) {
    if (error instanceof ExchangeError || error instanceof AttestationError) {
      const rejection = exchangeRejection(error);
      const exchange = rejection.cause as ExchangeError;
      throw new NodeExchangeError(
        "attestation-rejected",
        `the node's attestation was rejected: ${rejection.message}`,
        {
          mismatches: exchange.mismatches,
          attestationReason: exchange.reason,
          cause: error,
        },
      );
    }
    throw asNodeExchangeError(error, "validating the node's attestation", signal);
  }
}

/** Codes with which the node refuses a request (as opposed to being unreachable). */
export const REFUSAL_CODES: ReadonlySet<Code> = new Set([
  Code.InvalidArgument,
  Code.FailedPrecondition,
  Code.PermissionDenied,
  Code.ResourceExhausted,
  Code.Internal,
  Code.Unknown,
  Code.Aborted,
  Code.AlreadyExists,
  Code.OutOfRange,
  Code.Unimplemented,
  Code.NotFound,
  Code.DataLoss,
]);

/** The node refused to do `action` ("initialize", "recover"): a "refused" error with its text and code. */
export function refusedBy(
  action: string,
  serverMessage: string,
  options: { logs?: Uint8Array; code?: Code; cause?: unknown } = {},
): NodeExchangeError {
  return new NodeExchangeError("refused", `the node refused to ${action}: ${serverMessage}`, {
    ...options,
    serverMessage,
  });
}

/** Runs the unary call `name`; its failure becomes a {@linkcode NodeExchangeError}. */
export async function callNode<T>(
  name: string,
  action: string,
  run: () => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof ConnectError && REFUSAL_CODES.has(error.code)) {
      throw refusedBy(action, error.rawMessage, { code: error.code, cause: error });
    }
    throw asNodeExchangeError(error, name, signal);
  }
}

/** A transport failure or an abort during `step` as a {@linkcode NodeExchangeError}. */
export function asNodeExchangeError(error: unknown, step: string, signal?: AbortSignal): NodeExchangeError {
  if (signal?.aborted) return new NodeExchangeError("canceled", `${step}: canceled`, { cause: error });
  if (error instanceof ConnectError && error.code === Code.Canceled) {
    return new NodeExchangeError("canceled", `${step}: canceled`, { cause: error });
  }
  const detail = error instanceof ConnectError
    ? error.rawMessage
    : (error as Error)?.message ?? String(error);
  return new NodeExchangeError("unavailable", `${step}: the node is unavailable: ${detail}`, {
    cause: error,
  });
}
