/**
 * The report data of the attested exchange and the request digests it
 * binds (docs/attested-exchange.md, "Report data").
 *
 * Report data is SHA-256 over a length-prefixed, domain-separated encoding
 * of the protocol label and version, the purpose, the verifier's nonce, the
 * attester's HPKE public key and a digest of the request's
 * security-relevant fields. Every field is a u32 big-endian length followed
 * by that many bytes; strings are UTF-8. The functions take plain values,
 * not generated messages, so the join service, the bootstrapper and browser
 * tooling share one implementation (WebCrypto only, no Deno APIs).
 *
 * @module
 */
import { primitives } from "../crypto/primitives.ts";

/** Domain-separation label of the protocol. */
export const EXCHANGE_LABEL = "constellation-ts attested exchange";

/** Protocol version, encoded as one byte. */
export const EXCHANGE_VERSION = 1;

/** Length of a request digest and of the report data (SHA-256). */
export const DIGEST_LENGTH = 32;

/** What an exchange is for; part of the report data and the HPKE info. */
export type Purpose = "join" | "rejoin" | "init-attestation" | "recover-attestation";

/** Which way a sealed payload travels, relative to the exchange. */
export type SealDirection = "request" | "response";

const encoder = new TextEncoder();

/** Builds a length-prefixed encoding: u32 BE length ‖ bytes per field. */
class FieldEncoder {
  readonly #parts: Uint8Array[] = [];
  #length = 0;

  /** Appends a u32 big-endian integer (no length prefix). */
  u32(value: number): this {
    if (!Number.isInteger(value) || value < 0 || value > 0xffff_ffff) {
      throw new RangeError(`value ${value} does not fit in a u32`);
    }
    const bytes = new Uint8Array(4);
    new DataView(bytes.buffer).setUint32(0, value);
    return this.#push(bytes);
  }

  /** Appends a field: its length as u32 big-endian, then its bytes. */
  field(bytes: Uint8Array): this {
    return this.u32(bytes.length).#push(bytes);
  }

  /** Appends a UTF-8 string field. */
  text(value: string): this {
    return this.field(encoder.encode(value));
  }

  /** The concatenated encoding. */
  finish(): Uint8Array<ArrayBuffer> {
    const out = new Uint8Array(this.#length);
    let offset = 0;
    for (const part of this.#parts) {
      out.set(part, offset);
      offset += part.length;
    }
    return out;
  }

  #push(bytes: Uint8Array): this {
    this.#parts.push(bytes);
    this.#length += bytes.length;
    return this;
  }
}

/** SHA-256 of `data` (`src/crypto/primitives.ts`). */
export function sha256(data: Uint8Array<ArrayBuffer>): Promise<Uint8Array<ArrayBuffer>> {
  return primitives.sha256(data);
}

/** The inputs bound into the report data. */
export interface ReportDataInput {
  /** What the exchange is for. */
  purpose: Purpose;
  /** The verifier's nonce, exactly as issued. */
  nonce: Uint8Array;
  /** The attester's serialized HPKE public key (32 bytes for X25519). */
  publicKey: Uint8Array;
  /** SHA-256 of the request's security-relevant fields (see the `*RequestDigest` functions). */
  requestDigest: Uint8Array;
}

/** The protocol's label and version, the common prefix of the report data and HPKE info encodings. */
function withProtocolHeader(): FieldEncoder {
  return new FieldEncoder().text(EXCHANGE_LABEL).field(Uint8Array.of(EXCHANGE_VERSION));
}

/**
 * The exact bytes whose SHA-256 is the report data:
 * label ‖ version ‖ purpose ‖ nonce ‖ public key ‖ request digest, each
 * length-prefixed. Exported for test vectors and interoperability checks.
 */
export function encodeReportDataInput(input: ReportDataInput): Uint8Array<ArrayBuffer> {
  if (input.requestDigest.length !== DIGEST_LENGTH) {
    throw new RangeError(`request digest must be ${DIGEST_LENGTH} bytes, got ${input.requestDigest.length}`);
  }
  return withProtocolHeader()
    .text(input.purpose)
    .field(input.nonce)
    .field(input.publicKey)
    .field(input.requestDigest)
    .finish();
}

/** The 32-byte report data the evidence must carry for `input`. */
export function computeReportData(input: ReportDataInput): Promise<Uint8Array<ArrayBuffer>> {
  return sha256(encodeReportDataInput(input));
}

/**
 * The security-relevant fields of a join request, named as in
 * `join.IssueJoinTicketRequest` so a generated message can be passed as is.
 */
export interface JoinRequestFields {
  /** State disk UUID exactly as sent (no case normalization). */
  diskUuid: string;
  /** DER PKCS#10 CSR for the kubelet certificate. */
  certificateRequest: Uint8Array;
  /** The node joins as a control-plane node. */
  isControlPlane: boolean;
  /** SSH host public key (OpenSSH wire format); empty when none. */
  hostPublicKey: Uint8Array;
  /** Principals for the SSH host certificate, in request order. */
  hostCertificatePrincipals: readonly string[];
}

/**
 * Request digest of a join: SHA-256 over disk_uuid ‖ certificate_request ‖
 * is_control_plane (one byte, 0x00 or 0x01) ‖ host_public_key, each
 * length-prefixed, then the principal count as u32 BE and each principal
 * length-prefixed.
 */
export function joinRequestDigest(fields: JoinRequestFields): Promise<Uint8Array<ArrayBuffer>> {
  const encoding = new FieldEncoder()
    .text(fields.diskUuid)
    .field(fields.certificateRequest)
    .field(Uint8Array.of(fields.isControlPlane ? 1 : 0))
    .field(fields.hostPublicKey)
    .u32(fields.hostCertificatePrincipals.length);
  for (const principal of fields.hostCertificatePrincipals) encoding.text(principal);
  return sha256(encoding.finish());
}

/** The security-relevant fields of a rejoin request (`join.IssueRejoinTicketRequest`). */
export interface RejoinRequestFields {
  /** State disk UUID exactly as sent. */
  diskUuid: string;
}

/** Request digest of a rejoin: SHA-256 over the length-prefixed disk_uuid. */
export function rejoinRequestDigest(fields: RejoinRequestFields): Promise<Uint8Array<ArrayBuffer>> {
  return sha256(new FieldEncoder().text(fields.diskUuid).finish());
}

/**
 * Request digest of `init.API/GetAttestation` and `recoverproto.API/GetAttestation`:
 * the request carries nothing but the nonce, so this is SHA-256 of the empty string.
 */
export function initAttestationRequestDigest(): Promise<Uint8Array<ArrayBuffer>> {
  return sha256(new Uint8Array(0));
}

/**
 * The HPKE `info` of a sealed payload: label ‖ version ‖ purpose ‖
 * direction, each length-prefixed. A payload sealed for one purpose or
 * direction does not open as another.
 */
export function sealInfo(purpose: Purpose, direction: SealDirection): Uint8Array<ArrayBuffer> {
  return withProtocolHeader().text(purpose).text(direction).finish();
}
