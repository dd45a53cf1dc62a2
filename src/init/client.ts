/**
 * The init client: initializes a cluster on its first node
 * (docs/attested-exchange.md §7). The operator CLI wraps it; tests use it.
 *
 * 1. `GetAttestation(nonce)` with 32 fresh random bytes;
 * 2. the evidence is validated against the report data recomputed from
 *    that nonce and the node's returned public key (purpose
 *    "init-attestation"); a rejection names every measurement mismatch;
 *    its attestation key must be a control plane's (`controlPlanes`);
 * 3. the `InitRequest`, with a fresh `client_public_key`, is sealed to the
 *    attested key and sent with `attestation_nonce`;
 * 4. the `Init` stream: log chunks (passed to `onLog`), then either the
 *    sealed `InitSuccessResponse` (opened with the client key) or
 *    `init_failure` followed by the node's logs. Once the success opened,
 *    it is the result whatever follows: the node has finished, and its
 *    kubeconfig cannot be had again (a failing stream end is a warning).
 *
 * ```ts
 * const { kubeconfig, clusterId } = await initCluster(parameters, { transport, validator, controlPlanes });
 * ```
 *
 * Nothing secret is logged or put into an error: the request's secrets
 * (init secret, KMS URI with the master secret) travel only sealed.
 *
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { ConnectError, createClient, type Transport } from "@connectrpc/connect";
import type { MeasurementMismatch } from "../attestation/attestation.ts";
import { generateKeyPair } from "../atls/hpke.ts";
import { concatBytes } from "../bytes/concat.ts";
import { API, InitRequestSchema } from "../gen/init/init_pb.ts";
import {
  attestNode,
  type AttestNodeOptions,
  callErrorText,
  nodeCallError,
  NodeExchangeError,
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

/**
 * Options for {@linkcode initCluster}: the attestation's
 * ({@linkcode AttestNodeOptions}: validator, control-plane keys; its
 * `signal` aborts the whole exchange and cancels the Init stream; its
 * `logger` also receives the warning of a stream that failed after the
 * success), and the transport.
 */
export interface InitClientOptions extends AttestNodeOptions {
  /** A transport to the node's init server (e.g. `connectRpc(...).transport`). */
  transport: Transport;
  /** Receives every log chunk the node streams (progress, and its logs after a failure). */
  onLog?(chunk: Uint8Array): void;
}

/** A successfully initialized cluster. */
export interface InitResult {
  /** The admin kubeconfig the node's kubeadm wrote. */
  kubeconfig: Uint8Array;
  /** The cluster ID the node extended into PCR 15. */
  clusterId: Uint8Array;
  /** Owner ID; empty (the design defines none). */
  ownerId: Uint8Array;
  /** The warn-only measurement mismatches the node's evidence passed with. */
  warnings: readonly MeasurementMismatch[];
}

/** Largest amount of node logs kept ({@linkcode NodeExchangeError.logs}, {@linkcode LogBuffer}). */
export const MAX_KEPT_LOG_BYTES = 16 * 1024 * 1024;

/**
 * Initializes the cluster on the node behind `options.transport`. Resolves
 * with the opened kubeconfig and cluster ID; rejects with
 * {@linkcode NodeExchangeError} (`node_exchange.ts`).
 */
export async function initCluster(request: InitParameters, options: InitClientOptions): Promise<InitResult> {
  const { signal } = options;
  const client = createClient(API, options.transport);
  // 1-2: the node's evidence for our nonce, from a control plane's key.
  const { nonce, publicKey, reportData, warnings } = await attestNode(
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
  const logs = new LogBuffer("head");
  let failure: string | undefined;
  let result: InitResult | undefined;
  try {
    // Read to the stream's end (not only to the success): the node learns its answer was taken.
    for await (const message of client.init({ sealed, attestationNonce: nonce }, { signal })) {
      const kind = message.kind;
      if (result) {
        // The kubeconfig is ours and sent only once: what follows cannot take it back.
        options.logger?.warn("the node sent more after init_success; ignored, the kubeconfig had arrived");
        break;
      }
      switch (kind.case) {
        case "log":
          if (failure !== undefined) logs.add(kind.value.log);
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
          result = {
            kubeconfig: success.kubeconfig,
            clusterId: success.clusterId,
            ownerId: success.ownerId,
            warnings,
          };
          break;
        }
        default:
          throw new NodeExchangeError("protocol", "the node sent an empty or unknown Init message");
      }
    }
  } catch (error) {
    if (error instanceof NodeExchangeError) throw error;
    if (result) {
      // The node has finished (its lock taken, the cluster made): a reset or premature close before the
      // stream's trailers must not throw away the kubeconfig, which the node sends only once.
      options.logger?.warn(
        `the node's Init stream failed after init_success; the kubeconfig had arrived: ${
          callErrorText(error)
        }`,
      );
      return result;
    }
    if (failure !== undefined) {
      throw refusedBy("initialize", failure, {
        logs: logs.kept(),
        code: error instanceof ConnectError ? error.code : undefined,
        cause: error,
      });
    }
    throw nodeCallError(error, "Init", "initialize", signal);
  }
  if (result) return result;
  if (failure !== undefined) throw refusedBy("initialize", failure, { logs: logs.kept() });
  throw new NodeExchangeError("protocol", "the node ended the Init stream without a result");
}

/** Size of the blocks a {@linkcode LogBuffer} copies chunks into (the node's own log chunk size). */
export const LOG_BLOCK_BYTES = 64 * 1024;

/**
 * A node's log chunks, at most {@linkcode MAX_KEPT_LOG_BYTES} of them,
 * however much it sends and in however small chunks: the first ones ("head":
 * the logs a node sends after its failure, the failure's own at their start)
 * or the last ones ("tail": logs streamed while it works, where the newest
 * say where it stopped). The bytes are copied into blocks of
 * {@linkcode LOG_BLOCK_BYTES}, so memory is the kept bytes and one block,
 * whatever the number of chunks, and no received message is held.
 */
export class LogBuffer {
  readonly #keep: "head" | "tail";
  readonly #limit: number;
  /** Full blocks, then the last one, filled to `#fill`. */
  readonly #blocks: Uint8Array<ArrayBuffer>[] = [];
  #fill = 0;
  /** Bytes in the blocks. */
  #held = 0;

  /** An empty buffer keeping the `keep` end, up to `limit` bytes (default {@linkcode MAX_KEPT_LOG_BYTES}). */
  constructor(keep: "head" | "tail", limit: number = MAX_KEPT_LOG_BYTES) {
    this.#keep = keep;
    this.#limit = limit;
  }

  /** Adds `chunk`; what falls outside the kept end is dropped. */
  add(chunk: Uint8Array): void {
    let rest = this.#keep === "head"
      ? chunk.subarray(0, Math.max(0, this.#limit - this.#held))
      : chunk.subarray(Math.max(0, chunk.length - this.#limit));
    while (rest.length > 0) {
      let last = this.#blocks.at(-1);
      if (last === undefined || this.#fill === last.length) {
        last = new Uint8Array(LOG_BLOCK_BYTES);
        this.#blocks.push(last);
        this.#fill = 0;
      }
      const part = rest.subarray(0, last.length - this.#fill);
      last.set(part, this.#fill);
      this.#fill += part.length;
      this.#held += part.length;
      rest = rest.subarray(part.length);
    }
    // The first block goes once the tail lies wholly after it.
    while (this.#blocks.length > 1 && this.#held - this.#blocks[0].length >= this.#limit) {
      this.#held -= this.#blocks.shift()!.length;
    }
  }

  /** The kept bytes, in order. */
  kept(): Uint8Array<ArrayBuffer> {
    const last = this.#blocks.length - 1;
    const all = concatBytes(
      ...this.#blocks.map((block, i) => i === last ? block.subarray(0, this.#fill) : block),
    );
    return all.length > this.#limit ? all.slice(all.length - this.#limit) : all;
  }
}
