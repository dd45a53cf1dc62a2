/**
 * The operator's exchanges with a node (docs/attested-exchange.md §7 and
 * §7.7): the CLI verifies the node's evidence for a nonce it chose, seals its
 * request to the node's attested HPKE key, and the node seals its answer to
 * the CLI's key carried inside that request. The init (`init.API`, first
 * node) and the recovery (`recoverproto.API`, a rebooting control plane)
 * differ only in their purpose and messages.
 *
 * ```text
 * report_data = computeReportData(purpose, client nonce (32 bytes), node public key, SHA-256(""))
 * request:  Seal(node public key,   info(purpose, "request"),  aad = report_data, InitRequest | RecoverRequest)
 * response: Seal(client public key, info(purpose, "response"), aad = report_data, InitSuccessResponse | RecoverResponse)
 * ```
 *
 * Both sides use these functions; they take and return generated messages
 * and reuse `src/atls/` (WebCrypto and `@hpke/core` only, no Deno APIs).
 *
 * @module
 */
import {
  create,
  type DescField,
  type DescMessage,
  fromBinary,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import { type HpkeKeyPair, open, PUBLIC_KEY_LENGTH, seal } from "../atls/hpke.ts";
import {
  computeReportData,
  initAttestationRequestDigest,
  type Purpose,
  sealInfo,
} from "../atls/reportdata.ts";
import { type Sealed, SealedSchema } from "../gen/atls/v1/atls_pb.ts";
import {
  InitRequestSchema,
  type InitSuccessResponse,
  InitSuccessResponseSchema,
} from "../gen/init/init_pb.ts";

/** The purpose of the init exchange, in its report data and HPKE info. */
export const INIT_PURPOSE = "init-attestation" satisfies Purpose;

/** The purpose of the recovery exchange, in its report data and HPKE info. */
export const RECOVER_PURPOSE = "recover-attestation" satisfies Purpose;

/** Length of the client's nonce in `GetAttestation` (init and recovery). */
export const INIT_NONCE_LENGTH = 32;

/**
 * Largest message the operator's clients read from a node (1 MiB), where
 * Connect's default is 4 GiB per message. The node's legitimate messages
 * are far smaller: evidence of at most 64 KiB (`MAX_EVIDENCE_DOCUMENT_BYTES`),
 * log chunks of 64 KiB, a sealed kubeconfig of a few KiB, a failure's text.
 */
export const NODE_READ_MAX_BYTES = 1024 * 1024;

/** Length of the measurement salt an `InitRequest` carries. */
export const MEASUREMENT_SALT_LENGTH = 32;

/** HPKE info of the sealed `InitRequest` (CLI → node). */
export const INIT_REQUEST_INFO: Uint8Array<ArrayBuffer> = sealInfo(INIT_PURPOSE, "request");

/** HPKE info of the sealed `InitSuccessResponse` (node → CLI). */
export const INIT_RESPONSE_INFO: Uint8Array<ArrayBuffer> = sealInfo(INIT_PURPOSE, "response");

/**
 * The purposes of the operator's exchanges with a node: the init (§7) and
 * the recovery (§7.7). Both run `GetAttestation` for the client's nonce, then
 * one request sealed to the node's key and one answer sealed to the client's.
 */
export type NodeExchangePurpose = Extract<Purpose, "init-attestation" | "recover-attestation">;

/** The report data of `GetAttestation` for `purpose`, the client's `nonce` and the node's `publicKey`. */
export async function nodeReportData(
  purpose: NodeExchangePurpose,
  nonce: Uint8Array,
  publicKey: Uint8Array,
): Promise<Uint8Array<ArrayBuffer>> {
  return await computeReportData({
    purpose,
    nonce,
    publicKey,
    requestDigest: await initAttestationRequestDigest(),
  });
}

/** The report data of `init.API/GetAttestation` for the client's `nonce` and the node's `publicKey`. */
export function initReportData(nonce: Uint8Array, publicKey: Uint8Array): Promise<Uint8Array<ArrayBuffer>> {
  return nodeReportData(INIT_PURPOSE, nonce, publicKey);
}

/** The wire-only fields of a request the client seals to the node. */
export type WireFields = "sealed" | "attestationNonce";

/** A request message with the sealed request and its nonce (fields 100-101) and the client's key (sealed). */
export type SealableRequest = DescMessage & {
  field: Record<"sealed" | "attestationNonce" | "clientPublicKey", DescField>;
};

/** The fields of a sealed request that travel sealed (everything but `sealed` and `attestation_nonce`). */
export type RequestPlaintext<D extends DescMessage> = Omit<MessageShape<D>, WireFields>;

/** The attested key of an exchange and the report data binding it. */
export interface AttestedKey {
  /** The node's X25519 public key from `GetAttestation`. */
  publicKey: Uint8Array;
  /** The exchange's report data (also the AAD of both sealed messages). */
  reportData: Uint8Array<ArrayBuffer>;
}

/**
 * Seals a request's plaintext fields (`sealed` and `attestation_nonce`
 * cleared) to the node's attested key, bound to the exchange's report data.
 * Throws when the key is not a usable X25519 key.
 */
export async function sealNodeRequest<D extends SealableRequest>(
  purpose: NodeExchangePurpose,
  schema: D,
  request: Omit<MessageInitShape<D>, WireFields>,
  attested: AttestedKey,
): Promise<Sealed> {
  // Cleared at run time too: a whole message (wire fields set) is assignable to the plaintext type.
  const cleared = { ...request, sealed: undefined, attestationNonce: new Uint8Array(0) };
  const plaintext = toBinary(schema, create(schema, cleared as unknown as MessageInitShape<D>));
  const sealed = await seal(new Uint8Array(attested.publicKey), plaintext, {
    info: sealInfo(purpose, "request"),
    aad: attested.reportData,
  });
  return create(SealedSchema, sealed);
}

/**
 * Opens a sealed request with the node's key pair for this exchange and
 * decodes it. Throws when it does not open (other key, report data or
 * purpose, or tampered) or does not decode; a plaintext that itself carries
 * `sealed` or `attestation_nonce` is refused as malformed.
 */
export async function openNodeRequest<D extends SealableRequest>(
  purpose: NodeExchangePurpose,
  schema: D,
  keyPair: HpkeKeyPair,
  sealed: Sealed,
  reportData: Uint8Array<ArrayBuffer>,
): Promise<RequestPlaintext<D>> {
  const plaintext = await open(keyPair, toSealedBytes(sealed), {
    info: sealInfo(purpose, "request"),
    aad: reportData,
  });
  const request = fromBinary(schema, plaintext) as MessageShape<D> & Partial<Record<WireFields, unknown>>;
  if (request.sealed !== undefined || (request.attestationNonce as Uint8Array).length > 0) {
    throw new TypeError(`the sealed ${schema.name} itself carries sealed or attestation_nonce`);
  }
  return request;
}

/**
 * Seals an answer (its plaintext fields) to the client's `clientPublicKey`
 * (from the opened request), bound to the exchange's `reportData`. Throws
 * when the key is not a usable X25519 key.
 */
export async function sealNodeResponse<D extends DescMessage>(
  purpose: NodeExchangePurpose,
  schema: D,
  response: MessageInitShape<D>,
  clientPublicKey: Uint8Array,
  reportData: Uint8Array<ArrayBuffer>,
): Promise<Sealed> {
  const plaintext = toBinary(schema, create(schema, response));
  const sealed = await seal(new Uint8Array(clientPublicKey), plaintext, {
    info: sealInfo(purpose, "response"),
    aad: reportData,
  });
  return create(SealedSchema, sealed);
}

/** Opens a sealed answer with the client's key pair. Throws when it does not open or decode. */
export async function openNodeResponse<D extends DescMessage>(
  purpose: NodeExchangePurpose,
  schema: D,
  keyPair: HpkeKeyPair,
  sealed: Sealed,
  reportData: Uint8Array<ArrayBuffer>,
): Promise<MessageShape<D>> {
  const plaintext = await open(keyPair, toSealedBytes(sealed), {
    info: sealInfo(purpose, "response"),
    aad: reportData,
  });
  return fromBinary(schema, plaintext);
}

/** The fields of an `InitRequest` that travel sealed (everything but `sealed` and `attestation_nonce`). */
export type InitRequestPlaintext = RequestPlaintext<typeof InitRequestSchema>;

/** Seals an `InitRequest`'s plaintext fields to the node's attested key ({@linkcode sealNodeRequest}). */
export function sealInitRequest(request: InitRequestPlaintext, attested: AttestedKey): Promise<Sealed> {
  return sealNodeRequest(INIT_PURPOSE, InitRequestSchema, request, attested);
}

/** Opens a sealed `InitRequest` ({@linkcode openNodeRequest}). */
export function openInitRequest(
  keyPair: HpkeKeyPair,
  sealed: Sealed,
  reportData: Uint8Array<ArrayBuffer>,
): Promise<InitRequestPlaintext> {
  return openNodeRequest(INIT_PURPOSE, InitRequestSchema, keyPair, sealed, reportData);
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

/** Seals the init's success message to the client's key ({@linkcode sealNodeResponse}). */
export function sealInitSuccess(
  fields: InitSuccessFields,
  clientPublicKey: Uint8Array,
  reportData: Uint8Array<ArrayBuffer>,
): Promise<Sealed> {
  return sealNodeResponse(
    INIT_PURPOSE,
    InitSuccessResponseSchema,
    {
      kubeconfig: fields.kubeconfig,
      clusterId: fields.clusterId,
      ownerId: fields.ownerId ?? new Uint8Array(0),
    },
    clientPublicKey,
    reportData,
  );
}

/** Opens the init's sealed success message with the client's key pair ({@linkcode openNodeResponse}). */
export function openInitSuccess(
  keyPair: HpkeKeyPair,
  sealed: Sealed,
  reportData: Uint8Array<ArrayBuffer>,
): Promise<InitSuccessResponse> {
  return openNodeResponse(INIT_PURPOSE, InitSuccessResponseSchema, keyPair, sealed, reportData);
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
