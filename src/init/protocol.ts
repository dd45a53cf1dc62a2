/**
 * The init exchange (docs/attested-exchange.md §7): the operator's CLI
 * verifies the first node's evidence for a nonce it chose, seals the
 * `InitRequest` to the node's attested HPKE key, and the node seals the
 * `InitSuccessResponse` to the CLI's key carried inside that request.
 *
 * ```text
 * report_data = computeReportData(purpose "init-attestation", client nonce (32 bytes),
 *                                 node public key, SHA-256(""))
 * request:  Seal(node public key,   info("init-attestation", "request"),  aad = report_data, InitRequest)
 * response: Seal(client public key, info("init-attestation", "response"), aad = report_data, InitSuccessResponse)
 * ```
 *
 * Both sides use these functions; they take and return generated messages
 * and reuse `src/atls/` (WebCrypto and `@hpke/core` only, no Deno APIs).
 *
 * @module
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { type HpkeKeyPair, open, PUBLIC_KEY_LENGTH, seal } from "../atls/hpke.ts";
import {
  computeReportData,
  initAttestationRequestDigest,
  type Purpose,
  sealInfo,
} from "../atls/reportdata.ts";
import { type Sealed, SealedSchema } from "../gen/atls/v1/atls_pb.ts";
import {
  type InitRequest,
  InitRequestSchema,
  type InitSuccessResponse,
  InitSuccessResponseSchema,
} from "../gen/init/init_pb.ts";

/** The purpose of the init exchange, in its report data and HPKE info. */
export const INIT_PURPOSE: Purpose = "init-attestation";

/** Length of the client's nonce in `GetAttestation`. */
export const INIT_NONCE_LENGTH = 32;

/** Length of the measurement salt an `InitRequest` carries. */
export const MEASUREMENT_SALT_LENGTH = 32;

/** HPKE info of the sealed `InitRequest` (CLI → node). */
export const INIT_REQUEST_INFO: Uint8Array<ArrayBuffer> = sealInfo(INIT_PURPOSE, "request");

/** HPKE info of the sealed `InitSuccessResponse` (node → CLI). */
export const INIT_RESPONSE_INFO: Uint8Array<ArrayBuffer> = sealInfo(INIT_PURPOSE, "response");

/** The report data of `GetAttestation` for the client's `nonce` and the node's `publicKey`. */
export async function initReportData(
  nonce: Uint8Array,
  publicKey: Uint8Array,
): Promise<Uint8Array<ArrayBuffer>> {
  return await computeReportData({
    purpose: INIT_PURPOSE,
    nonce,
    publicKey,
    requestDigest: await initAttestationRequestDigest(),
  });
}

/** The fields of an `InitRequest` that travel sealed (everything but `sealed` and `attestation_nonce`). */
export type InitRequestPlaintext = Omit<InitRequest, "sealed" | "attestationNonce">;

/**
 * Seals `request` (its plaintext fields; `sealed` and `attestation_nonce`
 * are cleared) to the node's attested `publicKey`, bound to `reportData`.
 * Throws when the key is not a usable X25519 key.
 */
export async function sealInitRequest(
  request: InitRequestPlaintext,
  attested: { publicKey: Uint8Array; reportData: Uint8Array<ArrayBuffer> },
): Promise<Sealed> {
  const plaintext = toBinary(
    InitRequestSchema,
    create(InitRequestSchema, { ...request, sealed: undefined, attestationNonce: new Uint8Array(0) }),
  );
  const sealed = await seal(new Uint8Array(attested.publicKey), plaintext, {
    info: INIT_REQUEST_INFO,
    aad: attested.reportData,
  });
  return create(SealedSchema, sealed);
}

/**
 * Opens a sealed `InitRequest` with the node's key pair for this exchange
 * and decodes it. Throws when it does not open (other key, report data or
 * info, or tampered) or does not decode; a plaintext that itself carries
 * `sealed` or `attestation_nonce` is refused as malformed.
 */
export async function openInitRequest(
  keyPair: HpkeKeyPair,
  sealed: Sealed,
  reportData: Uint8Array<ArrayBuffer>,
): Promise<InitRequestPlaintext> {
  const plaintext = await open(keyPair, toSealedBytes(sealed), { info: INIT_REQUEST_INFO, aad: reportData });
  const request = fromBinary(InitRequestSchema, plaintext);
  if (request.sealed !== undefined || request.attestationNonce.length > 0) {
    throw new TypeError("the sealed InitRequest itself carries sealed or attestation_nonce");
  }
  return request;
}

/** The plaintext fields of an `InitSuccessResponse`. */
export interface InitSuccessFields {
  /** The admin kubeconfig. */
  kubeconfig: Uint8Array;
  /** The cluster ID (PCR 15 was extended with it). */
  clusterId: Uint8Array;
  /** Owner ID; empty (the design defines none). */
  ownerId?: Uint8Array;
}

/**
 * Seals the success message to the client's `clientPublicKey` (from the
 * opened request), bound to the exchange's `reportData`. Throws when the key
 * is not a usable X25519 key.
 */
export async function sealInitSuccess(
  fields: InitSuccessFields,
  clientPublicKey: Uint8Array,
  reportData: Uint8Array<ArrayBuffer>,
): Promise<Sealed> {
  const plaintext = toBinary(
    InitSuccessResponseSchema,
    create(InitSuccessResponseSchema, {
      kubeconfig: fields.kubeconfig,
      clusterId: fields.clusterId,
      ownerId: fields.ownerId ?? new Uint8Array(0),
    }),
  );
  const sealed = await seal(new Uint8Array(clientPublicKey), plaintext, {
    info: INIT_RESPONSE_INFO,
    aad: reportData,
  });
  return create(SealedSchema, sealed);
}

/** Opens the sealed success message with the client's key pair. Throws when it does not open or decode. */
export async function openInitSuccess(
  keyPair: HpkeKeyPair,
  sealed: Sealed,
  reportData: Uint8Array<ArrayBuffer>,
): Promise<InitSuccessResponse> {
  const plaintext = await open(keyPair, toSealedBytes(sealed), { info: INIT_RESPONSE_INFO, aad: reportData });
  return fromBinary(InitSuccessResponseSchema, plaintext);
}

/** Whether `key` has the length of a serialized X25519 public key. */
export function isPublicKeyLength(key: Uint8Array): boolean {
  return key.length === PUBLIC_KEY_LENGTH;
}

function toSealedBytes(sealed: Sealed) {
  return {
    encapsulatedKey: new Uint8Array(sealed.encapsulatedKey),
    ciphertext: new Uint8Array(sealed.ciphertext),
  };
}
