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
import { ConnectError, createClient, type Transport } from "@connectrpc/connect";
import type { Validator } from "../attestation/attestation.ts";
import { generateKeyPair } from "../atls/hpke.ts";
import { API, InitRequestSchema } from "../gen/init/init_pb.ts";
import {
  asNodeExchangeError,
  attestNode,
  NodeExchangeError,
  REFUSAL_CODES,
  refusedBy,
} from "./node_exchange.ts";
import { INIT_PURPOSE, openInitSuccess, sealInitRequest } from "./protocol.ts";

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

/** Largest amount of node logs kept in {@linkcode NodeExchangeError.logs}. */
export const MAX_KEPT_LOG_BYTES = 16 * 1024 * 1024;

/**
 * Initializes the cluster on the node behind `options.transport`. Resolves
 * with the opened kubeconfig and cluster ID; rejects with
 * {@linkcode NodeExchangeError} (`node_exchange.ts`).
 */
export async function initCluster(request: InitParameters, options: InitClientOptions): Promise<InitResult> {
  const { signal } = options;
  const client = createClient(API, options.transport);
  // 1-2: the node's evidence for our nonce.
  const { nonce, publicKey, reportData } = await attestNode(
    INIT_PURPOSE,
    (request, o) => client.getAttestation(request, o),
    options,
  );

  // 3: seal the request to the attested key; the answer comes sealed to ours.
  const clientKeys = await generateKeyPair();
  const plaintext = create(InitRequestSchema, { ...request, clientPublicKey: clientKeys.publicKey });
  const sealed = await sealInitRequest(plaintext, { publicKey, reportData }).catch((error) => {
    throw new NodeExchangeError("protocol", "cannot seal the request to the node's public key", {
      cause: error,
    });
  });

  // 4: the stream.
  const logs = new LogBuffer();
  let failure: string | undefined;
  let result: InitResult | undefined;
  try {
    // Read to the stream's end (not only to the success): the node learns its answer was taken.
    for await (const message of client.init({ sealed, attestationNonce: nonce }, { signal })) {
      const kind = message.kind;
      if (result) throw new NodeExchangeError("protocol", "the node sent more after init_success");
      switch (kind.case) {
        case "log":
          logs.add(kind.value.log, failure !== undefined);
          options.onLog?.(kind.value.log);
          break;
        case "initFailure":
          if (failure !== undefined) {
            throw new NodeExchangeError("protocol", "the node sent init_failure twice");
          }
          failure = kind.value.error;
          break;
        case "initSuccess": {
          if (failure !== undefined) {
            throw new NodeExchangeError("protocol", "the node sent init_success after init_failure");
          }
          if (!kind.value.sealed) {
            throw new NodeExchangeError("protocol", "the node's init_success is not sealed");
          }
          let success;
          try {
            success = await openInitSuccess(clientKeys, kind.value.sealed, reportData);
          } catch (error) {
            throw new NodeExchangeError(
              "open-failed",
              "the node's init_success does not open with this exchange's client key (tampered, or not the answer to this request)",
              { cause: error },
            );
          }
          if (success.kubeconfig.length === 0) {
            throw new NodeExchangeError("protocol", "the node sent an empty kubeconfig");
          }
          result = { kubeconfig: success.kubeconfig, clusterId: success.clusterId, ownerId: success.ownerId };
          break;
        }
        default:
          throw new NodeExchangeError("protocol", "the node sent an empty or unknown Init message");
      }
    }
  } catch (error) {
    if (error instanceof NodeExchangeError) throw error;
    const connectError = error instanceof ConnectError ? error : undefined;
    if (failure !== undefined) {
      throw refusedBy("initialize", failure, {
        logs: await logs.kept(),
        code: connectError?.code,
        cause: error,
      });
    }
    if (connectError && REFUSAL_CODES.has(connectError.code)) {
      throw refusedBy("initialize", connectError.rawMessage, { code: connectError.code, cause: error });
    }
    throw asNodeExchangeError(error, "Init", signal);
  }
  if (result) return result;
  if (failure !== undefined) throw refusedBy("initialize", failure, { logs: await logs.kept() });
  throw new NodeExchangeError("protocol", "the node ended the Init stream without a result");
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
