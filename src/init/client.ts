/**
 * The init client: initializes a cluster on its first node
 * (docs/attested-exchange.md §7). The operator CLI wraps it; tests use it.
 *
 * 1. `GetAttestation(nonce)` with 32 fresh random bytes;
 * 2. the evidence is validated against the report data recomputed from
 *    that nonce and the node's returned public key (purpose
 *    "init-attestation"); a rejection names every measurement mismatch;
 * 3. the `InitRequest`, with a fresh `client_public_key`, is sealed to the
 *    attested key and sent with `attestation_nonce`;
 * 4. the `Init` stream: log chunks (passed to `onLog`), then either the
 *    sealed `InitSuccessResponse` (opened with the client key) or
 *    `init_failure` followed by the node's logs.
 *
 * ```ts
 * const { kubeconfig, clusterId } = await initCluster(parameters, { transport, validator });
 * ```
 *
 * Nothing secret is logged or put into an error: the request's secrets
 * (init secret, KMS URI with the master secret) travel only sealed.
 *
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { AttestationError, type MeasurementMismatch, type Validator } from "../attestation/attestation.ts";
import { ExchangeError, exchangeRejection } from "../atls/errors.ts";
import { generateKeyPair } from "../atls/hpke.ts";
import { initAttestationRequestDigest } from "../atls/reportdata.ts";
import { validateAttestedRequest } from "../atls/verifier.ts";
import { API, InitRequestSchema } from "../gen/init/init_pb.ts";
import { ReasonError } from "../reason_error.ts";
import {
  INIT_NONCE_LENGTH,
  INIT_PURPOSE,
  isPublicKeyLength,
  openInitSuccess,
  sealInitRequest,
} from "./protocol.ts";

/**
 * What the cluster is initialized with: the `InitRequest`'s plaintext
 * fields (`kmsUri`, `storageUri`, `initSecret`, `measurementSalt`,
 * `attestationConfig`, `kubernetesVersion`, `kubernetesComponents`,
 * `clusterName`, `apiserverCertSans`, `serviceCidr`, `conformanceMode`, …).
 * The client sets `client_public_key`, `sealed` and `attestation_nonce`.
 */
export type InitParameters = Omit<
  MessageInitShape<typeof InitRequestSchema>,
  "$typeName" | "clientPublicKey" | "sealed" | "attestationNonce"
>;

/** Options for {@linkcode initCluster}. */
export interface InitClientOptions {
  /** A transport to the node's init server (e.g. `connectRpc(...).transport`). */
  transport: Transport;
  /** Validator of the node's attestation variant, holding the expected measurements. */
  validator: Validator;
  /** Aborts the whole exchange; the Init stream is cancelled. */
  signal?: AbortSignal;
  /** Receives every log chunk the node streams (progress, and its logs after a failure). */
  onLog?(chunk: Uint8Array): void;
  /** Source of the nonce; default 32 bytes from `crypto.getRandomValues` (tests pin it). */
  nonce?: () => Uint8Array;
}

/** A successfully initialized cluster. */
export interface InitResult {
  /** The admin kubeconfig the node's kubeadm wrote. */
  kubeconfig: Uint8Array;
  /** The cluster ID the node extended into PCR 15. */
  clusterId: Uint8Array;
  /** Owner ID; empty (the design defines none). */
  ownerId: Uint8Array;
}

/** Why {@linkcode initCluster} failed. */
export type InitFailure =
  | "attestation-rejected" // the node's evidence did not verify (every measurement mismatch is named)
  | "refused" // the node answered init_failure or refused the call (`code`, `serverMessage`, `logs`)
  | "open-failed" // the success message does not open with this exchange's client key
  | "unavailable" // the node could not be reached, or its attestation could not be produced now
  | "protocol" // the node answered something the protocol does not allow
  | "canceled"; // the caller's signal aborted the exchange

/** Largest amount of node logs kept in {@linkcode InitError.logs}. */
export const MAX_KEPT_LOG_BYTES = 16 * 1024 * 1024;

/** The init failed; `reason` says how. Carries no secret. */
export class InitError extends ReasonError<InitFailure> {
  /** The node's logs streamed after its failure (empty when none; at most {@linkcode MAX_KEPT_LOG_BYTES}). */
  readonly logs: Uint8Array;
  /** The Connect code the node refused with, when it did. */
  readonly code?: Code;
  /** The node's own failure text (`init_failure.error` or the status message), for "refused". */
  readonly serverMessage?: string;
  /** Every measurement mismatch, for "attestation-rejected". */
  readonly mismatches: readonly MeasurementMismatch[];
  /** The attestation or exchange reason, for "attestation-rejected" (e.g. "measurement-mismatch"). */
  readonly attestationReason?: string;

  /** An init failure; `message` names what happened. */
  constructor(
    reason: InitFailure,
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

/**
 * Initializes the cluster on the node behind `options.transport`. Resolves
 * with the opened kubeconfig and cluster ID; rejects with
 * {@linkcode InitError}.
 */
export async function initCluster(request: InitParameters, options: InitClientOptions): Promise<InitResult> {
  const { signal } = options;
  const client = createClient(API, options.transport);
  const nonce = options.nonce?.() ?? crypto.getRandomValues(new Uint8Array(INIT_NONCE_LENGTH));
  if (nonce.length !== INIT_NONCE_LENGTH) throw new RangeError(`nonce must be ${INIT_NONCE_LENGTH} bytes`);

  // 1-2: the node's evidence for our nonce.
  const attestation = await call(
    "GetAttestation",
    () => client.getAttestation({ nonce }, { signal }),
    signal,
  );
  const { publicKey, evidence } = attestation;
  if (!evidence || evidence.document.length === 0) {
    throw new InitError("protocol", "the node's GetAttestation answer carries no evidence");
  }
  if (!isPublicKeyLength(publicKey)) {
    throw new InitError("protocol", `the node's public key is ${publicKey.length} bytes, want 32 (X25519)`);
  }
  let reportData: Uint8Array<ArrayBuffer>;
  try {
    const verified = await validateAttestedRequest(
      { nonce, publicKey: new Uint8Array(publicKey), variant: evidence.variant, document: evidence.document },
      {
        purpose: INIT_PURPOSE,
        requestDigest: await initAttestationRequestDigest(),
        validator: options.validator,
        signal,
      },
    );
    reportData = verified.reportData;
  } catch (error) {
    if (error instanceof ExchangeError || error instanceof AttestationError) {
      const rejection = exchangeRejection(error);
      const exchange = rejection.cause as ExchangeError;
      throw new InitError(
        "attestation-rejected",
        `the node's attestation was rejected: ${rejection.message}`,
        {
          mismatches: exchange.mismatches,
          attestationReason: exchange.reason,
          cause: error,
        },
      );
    }
    throw asInitError(error, "validating the node's attestation", signal);
  }

  // 3: seal the request to the attested key; the answer comes sealed to ours.
  const clientKeys = await generateKeyPair();
  const plaintext = create(InitRequestSchema, { ...request, clientPublicKey: clientKeys.publicKey });
  const sealed = await sealInitRequest(plaintext, { publicKey, reportData }).catch((error) => {
    throw new InitError("protocol", "cannot seal the request to the node's public key", { cause: error });
  });

  // 4: the stream.
  const logs = new LogBuffer();
  let failure: string | undefined;
  let result: InitResult | undefined;
  try {
    // Read to the stream's end (not only to the success): the node learns its answer was taken.
    for await (const message of client.init({ sealed, attestationNonce: nonce }, { signal })) {
      const kind = message.kind;
      if (result) throw new InitError("protocol", "the node sent more after init_success");
      switch (kind.case) {
        case "log":
          logs.add(kind.value.log, failure !== undefined);
          options.onLog?.(kind.value.log);
          break;
        case "initFailure":
          if (failure !== undefined) throw new InitError("protocol", "the node sent init_failure twice");
          failure = kind.value.error;
          break;
        case "initSuccess": {
          if (failure !== undefined) {
            throw new InitError("protocol", "the node sent init_success after init_failure");
          }
          if (!kind.value.sealed) throw new InitError("protocol", "the node's init_success is not sealed");
          let success;
          try {
            success = await openInitSuccess(clientKeys, kind.value.sealed, reportData);
          } catch (error) {
            throw new InitError(
              "open-failed",
              "the node's init_success does not open with this exchange's client key (tampered, or not the answer to this request)",
              { cause: error },
            );
          }
          if (success.kubeconfig.length === 0) {
            throw new InitError("protocol", "the node sent an empty kubeconfig");
          }
          result = { kubeconfig: success.kubeconfig, clusterId: success.clusterId, ownerId: success.ownerId };
          break;
        }
        default:
          throw new InitError("protocol", "the node sent an empty or unknown Init message");
      }
    }
  } catch (error) {
    if (error instanceof InitError) throw error;
    const connectError = error instanceof ConnectError ? error : undefined;
    if (failure !== undefined) {
      throw refused(failure, await logs.kept(), connectError?.code, error);
    }
    if (connectError && refusalCodes.has(connectError.code)) {
      throw refused(connectError.rawMessage, new Uint8Array(0), connectError.code, error);
    }
    throw asInitError(error, "Init", signal);
  }
  if (result) return result;
  if (failure !== undefined) throw refused(failure, await logs.kept(), undefined, undefined);
  throw new InitError("protocol", "the node ended the Init stream without a result");
}

/** Codes with which the node refuses a request (as opposed to being unreachable). */
const refusalCodes: ReadonlySet<Code> = new Set([
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

function refused(serverMessage: string, logs: Uint8Array, code: Code | undefined, cause: unknown): InitError {
  return new InitError("refused", `the node refused to initialize: ${serverMessage}`, {
    logs,
    code,
    serverMessage,
    cause,
  });
}

/** Runs a unary call; its failure becomes an {@linkcode InitError}. */
async function call<T>(name: string, run: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof ConnectError && refusalCodes.has(error.code)) {
      throw refused(error.rawMessage, new Uint8Array(0), error.code, error);
    }
    throw asInitError(error, name, signal);
  }
}

/** A transport failure or an abort as an {@linkcode InitError}. */
function asInitError(error: unknown, step: string, signal?: AbortSignal): InitError {
  if (signal?.aborted) return new InitError("canceled", `${step}: canceled`, { cause: error });
  if (error instanceof ConnectError && error.code === Code.Canceled) {
    return new InitError("canceled", `${step}: canceled`, { cause: error });
  }
  const detail = error instanceof ConnectError
    ? error.rawMessage
    : (error as Error)?.message ?? String(error);
  return new InitError("unavailable", `${step}: the node is unavailable: ${detail}`, { cause: error });
}

/** The node's log chunks after a failure, up to {@linkcode MAX_KEPT_LOG_BYTES}. */
class LogBuffer {
  #chunks: Uint8Array[] = [];
  #length = 0;

  add(chunk: Uint8Array, keep: boolean): void {
    if (!keep || this.#length >= MAX_KEPT_LOG_BYTES) return;
    const part = chunk.subarray(0, MAX_KEPT_LOG_BYTES - this.#length);
    this.#chunks.push(part);
    this.#length += part.length;
  }

  async kept(): Promise<Uint8Array> {
    return await new Blob(this.#chunks as Uint8Array<ArrayBuffer>[]).bytes();
  }
}
