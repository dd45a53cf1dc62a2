/**
 * The operator's side of an exchange with a node, shared by the init
 * client and the recovery client: the node's evidence for a fresh nonce,
 * verified before anything is sent, and its attestation key checked to be a
 * control plane's (docs/attested-exchange.md §7.4 and §7.7, steps 1-2), and
 * one error type for every way such an exchange fails.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";
import {
  type AkTrust,
  AttestationError,
  MAX_EVIDENCE_DOCUMENT_BYTES,
  type MeasurementMismatch,
  trusts,
  type Validator,
} from "../attestation/attestation.ts";
import { CONTROL_PLANE_ANY_KEY_WARNING } from "../attestation/watcher.ts";
import { ExchangeError, exchangeRejection } from "../atls/errors.ts";
import { initAttestationRequestDigest } from "../atls/reportdata.ts";
import { validateAttestedRequest } from "../atls/verifier.ts";
import type { GetAttestationResponse } from "../gen/init/init_pb.ts";
import { escapeControlCharacters } from "../json/escape_control.ts";
import type { Logger } from "../log/logger.ts";
import { ReasonError } from "../reason_error.ts";
import {
  INIT_NONCE_LENGTH,
  isPublicKeyLength,
  NODE_READ_MAX_BYTES,
  type NodeExchangePurpose,
} from "./protocol.ts";

/** Why an exchange with a node failed. */
export type NodeExchangeFailure =
  | "attestation-rejected" // the node's evidence did not verify (every measurement mismatch is named)
  | "refused" // the node refused (`code`, `serverMessage`; an init's failure also `logs`)
  | "open-failed" // the node's answer does not open with this exchange's client key
  | "unavailable" // the node could not be reached, or its attestation could not be produced now
  | "protocol" // the node answered something the protocol does not allow
  | "canceled"; // the caller's signal aborted the exchange

/**
 * The `attestationReason` of evidence that verified from a key the config
 * does not name as a control plane's: the join service's reason for the same
 * refusal.
 */
export const CONTROL_PLANE_NOT_ALLOWED = "control-plane-not-allowed";

/**
 * An exchange with a node failed; `reason` says how. Carries no secret. Its
 * message and `serverMessage` are printable text: the node's own words
 * reach them, unauthenticated, so their control characters are escaped
 * (`\u00XX`) here, the one place every such message passes.
 */
export class NodeExchangeError extends ReasonError<NodeExchangeFailure> {
  /** The node's logs streamed after an init's failure (empty when none). */
  readonly logs: Uint8Array;
  /** The Connect code the node refused with, when it did. */
  readonly code?: Code;
  /** The node's own failure text (`init_failure.error` or the status message), for "refused"; escaped. */
  readonly serverMessage?: string;
  /** Every measurement mismatch, for "attestation-rejected". */
  readonly mismatches: readonly MeasurementMismatch[];
  /**
   * The attestation or exchange reason, for "attestation-rejected" (e.g.
   * "measurement-mismatch", or {@linkcode CONTROL_PLANE_NOT_ALLOWED}).
   */
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
    super(reason, escapeControlCharacters(message), options);
    this.logs = options.logs ?? new Uint8Array(0);
    this.code = options.code;
    this.serverMessage = options.serverMessage === undefined
      ? undefined
      : escapeControlCharacters(options.serverMessage);
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
  /** The warn-only measurement mismatches the evidence passed with (the operator is told each). */
  warnings: readonly MeasurementMismatch[];
}

/** Options of {@linkcode attestNode}. */
export interface AttestNodeOptions {
  /** Validator of the node's attestation variant, holding the expected measurements. */
  validator: Validator;
  /**
   * The attestation keys that may be control planes: the attestation
   * config's `controlPlanes` (`akTrust.controlPlaneKeyDigests`, or any key
   * with `controlPlaneAnyKey`). Both exchanges send the master secret, and
   * both go to a control plane (the init makes the first one, a recovery
   * brings one back), so a node whose key is not one gets nothing, as the
   * join service refuses it the role.
   */
  controlPlanes: AkTrust;
  /** Receives the warning that a control plane was accepted only through `controlPlaneAnyKey`. */
  logger?: Logger;
  /** Aborts the call and the validation. */
  signal?: AbortSignal;
  /** Source of the nonce; default 32 bytes from `crypto.getRandomValues` (tests pin it). */
  nonce?: () => Uint8Array;
}

/**
 * Steps 1-2 of the operator's exchanges: `getAttestation` for a fresh
 * nonce, the answer's evidence validated against the report data
 * recomputed from that nonce and the node's key for `purpose`, and its
 * attestation key checked against `options.controlPlanes`. Rejects with
 * {@linkcode NodeExchangeError} (a rejection names every measurement
 * mismatch, or the key that is no control plane's).
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
  // The verifier's own limit (the join service refuses such evidence unread): no validator parses more.
  if (evidence.document.length > MAX_EVIDENCE_DOCUMENT_BYTES) {
    throw new NodeExchangeError(
      "protocol",
      `the node's evidence document is ${evidence.document.length} bytes, more than the ${MAX_EVIDENCE_DOCUMENT_BYTES} any variant's may have`,
    );
  }
  if (!isPublicKeyLength(publicKey)) {
    throw new NodeExchangeError(
      "protocol",
      `the node's public key is ${publicKey.length} bytes, want 32 (X25519)`,
    );
  }
  let verified;
  try {
    verified = await validateAttestedRequest(
      { nonce, publicKey: new Uint8Array(publicKey), variant: evidence.variant, document: evidence.document },
      { purpose, requestDigest: await initAttestationRequestDigest(), validator: options.validator, signal },
    );
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
  const { keyDigest, warnings } = verified.verification;
  // The join service's rule for the role (JoinService.authorize): a worker's key would otherwise get the master
  // secret, and with it every key of the cluster.
  if (!trusts(options.controlPlanes, keyDigest)) throw controlPlaneNotAllowed(keyDigest);
  if (options.controlPlanes.kind === "any") {
    options.logger?.warn(CONTROL_PLANE_ANY_KEY_WARNING, { event: "control-plane role granted", keyDigest });
  }
  return { nonce, publicKey, reportData: verified.reportData, warnings };
}

/** The refusal of evidence that verified from a key that is no control plane's (`keyDigest`, when it has one). */
function controlPlaneNotAllowed(keyDigest: string | undefined): NodeExchangeError {
  const why = keyDigest === undefined
    ? "its evidence names no attestation key, so it is a control plane only with akTrust.controlPlaneAnyKey"
    : `its attestation key ${keyDigest} is trusted but not a control plane's (akTrust.controlPlaneKeyDigests)`;
  return new NodeExchangeError(
    "attestation-rejected",
    `the node's attestation was rejected (${CONTROL_PLANE_NOT_ALLOWED}): ${why}; only a control plane receives the master secret`,
    { attestationReason: CONTROL_PLANE_NOT_ALLOWED },
  );
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
    throw nodeCallError(error, name, action, signal);
  }
}

/**
 * The failure of call `step` (to `action`, e.g. "initialize") as a
 * {@linkcode NodeExchangeError}: an answer over the client's read limit is
 * "protocol", a refusal code "refused" with the node's text, the rest
 * {@linkcode asNodeExchangeError}.
 */
export function nodeCallError(
  error: unknown,
  step: string,
  action: string,
  signal?: AbortSignal,
): NodeExchangeError {
  if (error instanceof NodeExchangeError) return error;
  if (isReadLimitError(error)) {
    return new NodeExchangeError(
      "protocol",
      `${step}: the node sent a message larger than the ${NODE_READ_MAX_BYTES} bytes a client reads`,
      { cause: error },
    );
  }
  if (error instanceof ConnectError && REFUSAL_CODES.has(error.code)) {
    return refusedBy(action, error.rawMessage, { code: error.code, cause: error });
  }
  return asNodeExchangeError(error, step, signal);
}

/**
 * Whether `error` is the client's own read limit on a node's message
 * (Connect's `readMaxBytes`, raised as ResourceExhausted): no refusal of the
 * node's, but a message the protocol does not allow.
 */
export function isReadLimitError(error: unknown): boolean {
  return error instanceof ConnectError && error.code === Code.ResourceExhausted &&
    /larger than configured readMaxBytes/.test(error.rawMessage);
}

/** A transport failure or an abort during `step` as a {@linkcode NodeExchangeError}. */
export function asNodeExchangeError(error: unknown, step: string, signal?: AbortSignal): NodeExchangeError {
  if (signal?.aborted) return new NodeExchangeError("canceled", `${step}: canceled`, { cause: error });
  if (error instanceof ConnectError && error.code === Code.Canceled) {
    return new NodeExchangeError("canceled", `${step}: canceled`, { cause: error });
  }
  return new NodeExchangeError("unavailable", `${step}: the node is unavailable: ${callErrorText(error)}`, {
    cause: error,
  });
}

/** A failed call's text (a status's own message, else the error's), control characters escaped. */
export function callErrorText(error: unknown): string {
  const text = error instanceof ConnectError ? error.rawMessage : (error as Error)?.message ?? String(error);
  return escapeControlCharacters(text);
}
