/**
 * The verifier's half of the attested exchange: check an
 * {@linkcode AttestedRequest} and seal the response to its attested key
 * (docs/attested-exchange.md, "Verifier").
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { isLowOrderX25519 } from "./low_order.ts";
import {
  AttestationError,
  MAX_EVIDENCE_DOCUMENT_BYTES,
  type Validator,
  type Verification,
} from "../attestation/attestation.ts";
import { type AttestedRequest, type Sealed, SealedSchema } from "../gen/atls/v1/atls_pb.ts";
import { ExchangeError } from "./errors.ts";
import { PUBLIC_KEY_LENGTH, seal } from "./hpke.ts";
import { computeReportData, type Purpose, sealInfo } from "./reportdata.ts";

/** Largest nonce accepted before the nonce checker looks at it; larger input is malformed by any format. */
export const MAX_NONCE_BYTES = 256;

/** The single-use nonce check the verifier needs (e.g. {@linkcode ChallengeNonces}). */
export interface NonceConsumer {
  /** Accepts a nonce once, or throws an {@linkcode ExchangeError} with a `nonce-*` reason. */
  consume(nonce: Uint8Array): Promise<void>;
}

/** Options for {@linkcode admitAttestedRequest}. */
export interface AdmitAttestedRequestOptions {
  /** The request's `attestation` field (absent when the client sent none). */
  attestation: AttestedRequest | undefined;
  /** Checks and consumes the nonce. */
  nonces: NonceConsumer;
  /** Cap on the evidence document size; default {@linkcode MAX_EVIDENCE_DOCUMENT_BYTES} (64 KiB), which issuers stay within. */
  maxDocumentBytes?: number;
  /** Aborts the admission. */
  signal?: AbortSignal;
}

/** An attested request whose structure and nonce passed: what {@linkcode validateAttestedRequest} checks. */
export interface AdmittedRequest {
  /** The nonce the request was bound to (consumed). */
  nonce: Uint8Array;
  /** The attester's HPKE public key (32 bytes). */
  publicKey: Uint8Array<ArrayBuffer>;
  /** The evidence's variant. */
  variant: string;
  /** The evidence document (at most the size limit). */
  document: Uint8Array;
}

/**
 * The cheap half of verification, checks 1 and 2 of the verifier
 * (docs/attested-exchange.md): structure and sizes, then the nonce, which is
 * consumed, so a request cannot be replayed even if it fails later. A
 * service can spend its budgets between this and the expensive half, so that
 * requests failing here cost it nothing else. Throws
 * {@linkcode ExchangeError}.
 */
export async function admitAttestedRequest(options: AdmitAttestedRequestOptions): Promise<AdmittedRequest> {
  const { attestation, signal } = options;
  signal?.throwIfAborted();
  if (!attestation) throw new ExchangeError("evidence-missing", "request carries no attestation");
  const { evidence } = attestation;
  if (!evidence) throw new ExchangeError("evidence-missing", "attestation carries no evidence");
  if (attestation.nonce.length === 0 || attestation.nonce.length > MAX_NONCE_BYTES) {
    throw new ExchangeError(
      "nonce-malformed",
      `nonce must be 1 to ${MAX_NONCE_BYTES} bytes, got ${attestation.nonce.length}`,
    );
  }
  if (attestation.publicKey.length !== PUBLIC_KEY_LENGTH) {
    throw new ExchangeError(
      "evidence-malformed",
      `public key must be ${PUBLIC_KEY_LENGTH} bytes (X25519), got ${attestation.publicKey.length}`,
    );
  }
  if (isLowOrderX25519(attestation.publicKey)) {
    // Refused with the structure, before the service writes anything: the seal at the end would fail.
    throw new ExchangeError(
      "seal-failed",
      "the attested public key is a low-order X25519 point: nothing can be sealed to it",
    );
  }
  const maxDocumentBytes = options.maxDocumentBytes ?? MAX_EVIDENCE_DOCUMENT_BYTES;
  if (evidence.document.length === 0 || evidence.document.length > maxDocumentBytes) {
    throw new ExchangeError(
      "evidence-malformed",
      `evidence document must be 1 to ${maxDocumentBytes} bytes, got ${evidence.document.length}`,
    );
  }
  await options.nonces.consume(attestation.nonce);
  return {
    nonce: attestation.nonce,
    publicKey: new Uint8Array(attestation.publicKey),
    variant: evidence.variant,
    document: evidence.document,
  };
}

/** Options for {@linkcode validateAttestedRequest}. */
export interface ValidateAttestedRequestOptions {
  /** What the request is for. */
  purpose: Purpose;
  /** Digest of the received request's security-relevant fields (reportdata.ts). */
  requestDigest: Uint8Array;
  /** Validator of the variant this verifier accepts, holding the expected measurements. */
  validator: Validator;
  /** Aborts a validation in progress. */
  signal?: AbortSignal;
}

/**
 * The expensive half of verification, checks 3 and 4: the evidence variant,
 * then the evidence itself against report data recomputed from the nonce,
 * public key and request digest. Throws {@linkcode ExchangeError}; an
 * {@linkcode AttestationError} from the validator is passed through as an
 * ExchangeError with the same reason, mismatch list and key digest.
 */
export async function validateAttestedRequest(
  admitted: AdmittedRequest,
  options: ValidateAttestedRequestOptions,
): Promise<VerifiedRequest> {
  const { validator, signal } = options;
  signal?.throwIfAborted();
  if (admitted.variant !== validator.variant) {
    throw new ExchangeError(
      "variant-mismatch",
      `evidence of variant ${JSON.stringify(admitted.variant.slice(0, 64))}, this verifier accepts ${
        JSON.stringify(validator.variant)
      }`,
    );
  }
  const { publicKey } = admitted;
  const reportData = await computeReportData({
    purpose: options.purpose,
    nonce: admitted.nonce,
    publicKey,
    requestDigest: options.requestDigest,
  });
  signal?.throwIfAborted();
  try {
    const verification = await validator.validate(admitted.document, reportData, { signal });
    return { verification, publicKey, reportData };
  } catch (err) {
    if (err instanceof AttestationError) throw ExchangeError.fromAttestation(err);
    throw err;
  }
}

/** Options for {@linkcode verifyAttestedRequest}: both halves' options. */
export type VerifyAttestedRequestOptions = AdmitAttestedRequestOptions & ValidateAttestedRequestOptions;

/** A verified attested request. */
export interface VerifiedRequest {
  /** The validator's verdict (warnings, reported measurements). */
  verification: Verification;
  /** The attester's HPKE public key, to seal the response to. */
  publicKey: Uint8Array<ArrayBuffer>;
  /** The report data the evidence was checked against; the AAD of the sealed response. */
  reportData: Uint8Array<ArrayBuffer>;
}

/**
 * Verifies an attested request, cheapest checks first:
 * {@linkcode admitAttestedRequest}, then {@linkcode validateAttestedRequest}.
 * Throws {@linkcode ExchangeError}.
 */
export async function verifyAttestedRequest(options: VerifyAttestedRequestOptions): Promise<VerifiedRequest> {
  return await validateAttestedRequest(await admitAttestedRequest(options), options);
}

/** Options for {@linkcode sealResponse}. */
export interface SealResponseOptions {
  /** The verified request's public key and report data. */
  verified: Pick<VerifiedRequest, "publicKey" | "reportData">;
  /** The purpose the request was verified for. */
  purpose: Purpose;
  /** The serialized response message, with its plaintext fields set. */
  plaintext: Uint8Array<ArrayBuffer>;
}

/**
 * Seals a serialized response to the attested public key, with the
 * purpose's "response" info and the report data as AAD, so it opens only
 * for the holder of the attested key and only as the answer to this
 * exchange. Throws {@linkcode ExchangeError} `seal-failed` when the key is
 * not a usable X25519 public key.
 */
export async function sealResponse(options: SealResponseOptions): Promise<Sealed> {
  try {
    const sealed = await seal(options.verified.publicKey, options.plaintext, {
      info: sealInfo(options.purpose, "response"),
      aad: options.verified.reportData,
    });
    return create(SealedSchema, sealed);
  } catch (err) {
    throw new ExchangeError("seal-failed", "cannot seal the response to the attested public key", {
      cause: err,
    });
  }
}
