/**
 * The recovery client: brings back a control-plane node that cannot rejoin
 * because no join service runs (docs/attested-exchange.md §7.7). The operator
 * CLI wraps it (`cli recover --node`); tests use it.
 *
 * 1-2. `GetAttestation` for a fresh nonce; the evidence is validated for
 *    purpose "recover-attestation" (every measurement mismatch named), and
 *    its attestation key must be a control plane's (`controlPlanes`);
 * 3. the `RecoverRequest` (the master secret as `kms_uri`, a fresh
 *    `client_public_key`) is sealed to the attested key and sent;
 * 4. the answer, sealed to the client's key, names the disk and the cluster
 *    ID the node bound itself to again.
 *
 * The master secret travels only sealed; nothing secret is logged or put
 * into an error.
 *
 * @module
 */
import { createClient, type Transport } from "@connectrpc/connect";
import type { MeasurementMismatch } from "../attestation/attestation.ts";
import { generateKeyPair } from "../atls/hpke.ts";
import { API, RecoverRequestSchema, RecoverResponseSchema } from "../gen/recoverproto/recover_pb.ts";
import { attestNode, type AttestNodeOptions, callNode, NodeExchangeError } from "./node_exchange.ts";
import { openNodeResponse, RECOVER_PURPOSE, sealNodeRequest } from "./protocol.ts";

/** Options for {@linkcode recoverNode}. */
export interface RecoverClientOptions extends AttestNodeOptions {
  /** A transport to the node's recovery server. */
  transport: Transport;
}

/** A recovered node. */
export interface RecoverResult {
  /** The state disk's UUID, lower-case. */
  diskUuid: string;
  /** The cluster ID PCR 15 is bound to again. */
  clusterId: Uint8Array;
  /** The warn-only measurement mismatches the node's evidence passed with. */
  warnings: readonly MeasurementMismatch[];
}

/**
 * Sends the master secret (`kmsUri`, `storageUri`) to the node behind
 * `options.transport` once its attestation verified. Resolves with the
 * opened answer; rejects with {@linkcode NodeExchangeError}.
 */
export async function recoverNode(
  request: { kmsUri: string; storageUri: string },
  options: RecoverClientOptions,
): Promise<RecoverResult> {
  const { signal } = options;
  const client = createClient(API, options.transport);
  const { nonce, publicKey, reportData, warnings } = await attestNode(
    RECOVER_PURPOSE,
    (r, o) => client.getAttestation(r, o),
    options,
  );
  const clientKeys = await generateKeyPair();
  const sealed = await sealNodeRequest(
    RECOVER_PURPOSE,
    RecoverRequestSchema,
    { ...request, clientPublicKey: clientKeys.publicKey },
    { publicKey, reportData },
  ).catch((error) => {
    throw new NodeExchangeError("protocol", "cannot seal the request to the node's public key", {
      cause: error,
    });
  });
  const answer = await callNode(
    "Recover",
    "recover",
    () => client.recover({ sealed, attestationNonce: nonce }, { signal }),
    signal,
  );
  if (!answer.sealed) throw new NodeExchangeError("protocol", "the node's Recover answer is not sealed");
  let opened;
  try {
    opened = await openNodeResponse(
      RECOVER_PURPOSE,
      RecoverResponseSchema,
      clientKeys,
      answer.sealed,
      reportData,
    );
  } catch (error) {
    throw new NodeExchangeError(
      "open-failed",
      "the node's answer does not open with this exchange's client key (tampered, or not the answer to this request)",
      { cause: error },
    );
  }
  if (opened.clusterId.length === 0) {
    throw new NodeExchangeError("protocol", "the node's answer names no cluster ID");
  }
  return { diskUuid: opened.diskUuid, clusterId: opened.clusterId, warnings };
}
