/**
 * The attester's half of the attested exchange: produce an
 * {@linkcode AttestedRequest} bound to a fresh HPKE key, and open the sealed
 * response (docs/attested-exchange.md, "Attester").
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import type { Issuer } from "../attestation/attestation.ts";
import { type AttestedRequest, AttestedRequestSchema, type Sealed } from "../gen/atls/v1/atls_pb.ts";
import { ExchangeError } from "./errors.ts";
import { generateKeyPair, type HpkeKeyPair, open } from "./hpke.ts";
import { computeReportData, type Purpose, sealInfo } from "./reportdata.ts";

/** Options for {@linkcode createAttestedRequest}. */
export interface CreateAttestedRequestOptions {
  /** Produces the evidence. */
  issuer: Issuer;
  /** The verifier's nonce, exactly as received (e.g. from `join.API/GetChallenge`). */
  nonce: Uint8Array;
  /** What the request is for. */
  purpose: Purpose;
  /** Digest of the request's security-relevant fields as they will be sent (reportdata.ts). */
  requestDigest: Uint8Array;
  /** Aborts evidence generation. */
  signal?: AbortSignal;
}

/** An attested request and the secrets needed to read its response. */
export interface AttestedRequestBundle {
  /** The message to put in the request's `attestation` field. */
  attestation: AttestedRequest;
  /** The fresh key pair the response will be sealed to; keep it for {@linkcode openSealedResponse}. */
  keyPair: HpkeKeyPair;
  /** The report data bound into the evidence; the AAD of the sealed response. */
  reportData: Uint8Array<ArrayBuffer>;
}

/**
 * Generates a fresh HPKE key pair and evidence whose report data binds the
 * purpose, nonce, public key and request digest. Errors of the issuer
 * (e.g. an {@linkcode AttestationError} `unavailable`) propagate.
 */
export async function createAttestedRequest(
  options: CreateAttestedRequestOptions,
): Promise<AttestedRequestBundle> {
  const keyPair = await generateKeyPair();
  const nonce = new Uint8Array(options.nonce);
  const reportData = await computeReportData({
    purpose: options.purpose,
    nonce,
    publicKey: keyPair.publicKey,
    requestDigest: options.requestDigest,
  });
  const document = await options.issuer.issue(reportData, { signal: options.signal });
  const attestation = create(AttestedRequestSchema, {
    nonce,
    publicKey: keyPair.publicKey,
    evidence: { variant: options.issuer.variant, document },
  });
  return { attestation, keyPair, reportData };
}

/** Options for {@linkcode openSealedResponse}. */
export interface OpenSealedResponseOptions {
  /** The response's `sealed` field (absent when the verifier sent none). */
  sealed: Sealed | undefined;
  /** The key pair and report data from {@linkcode createAttestedRequest}. */
  bundle: Pick<AttestedRequestBundle, "keyPair" | "reportData">;
  /** The purpose the request was made for. */
  purpose: Purpose;
}

/**
 * Opens a sealed response and returns the serialized response message
 * (decode it with `fromBinary`). Throws {@linkcode ExchangeError}
 * `open-failed` when the response is missing or does not open under this
 * exchange's key, purpose and report data.
 */
export async function openSealedResponse(
  options: OpenSealedResponseOptions,
): Promise<Uint8Array<ArrayBuffer>> {
  if (!options.sealed) throw new ExchangeError("open-failed", "response carries no sealed payload");
  try {
    return await open(
      options.bundle.keyPair,
      {
        encapsulatedKey: new Uint8Array(options.sealed.encapsulatedKey),
        ciphertext: new Uint8Array(options.sealed.ciphertext),
      },
      { info: sealInfo(options.purpose, "response"), aad: options.bundle.reportData },
    );
  } catch (err) {
    throw new ExchangeError(
      "open-failed",
      "sealed response does not open with this exchange's key (wrong key, purpose or report data, or tampered)",
      { cause: err },
    );
  }
}
