/**
 * The node's half of the operator's exchanges (docs/attested-exchange.md §7
 * and §7.7), shared by the init server and the recovery server:
 * `GetAttestation` makes a fresh HPKE key pair per client nonce and evidence
 * over the exchange's report data, and holds the key pair for
 * {@linkcode DEFAULT_ATTESTATION_KEY_LIFETIME_MS}, for one use, in a bounded
 * map; {@linkcode AttestedKeys.open} takes it again to open the sealed
 * request that follows.
 *
 * @module
 */
import { create, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import type { Issuer } from "../attestation/attestation.ts";
import { connectCodeFor, type ExchangeFailure } from "../atls/errors.ts";
import { generateKeyPair, type HpkeKeyPair } from "../atls/hpke.ts";
import type { Clock } from "../clock.ts";
import type { Sealed } from "../gen/atls/v1/atls_pb.ts";
import {
  type GetAttestationRequest,
  type GetAttestationResponse,
  GetAttestationResponseSchema,
} from "../gen/init/init_pb.ts";
import {
  INIT_NONCE_LENGTH,
  isPublicKeyLength,
  type NodeExchangePurpose,
  nodeReportData,
  openNodeRequest,
  type RequestPlaintext,
  type SealableRequest,
} from "../init/protocol.ts";
import type { Logger } from "../log/logger.ts";
import { Rejection } from "../rpc/rejection.ts";

/** How long an attestation key is held after GetAttestation. */
export const DEFAULT_ATTESTATION_KEY_LIFETIME_MS = 60_000;
/** How many attestation keys are held at most. */
export const DEFAULT_MAX_ATTESTATION_KEYS = 64;

/** Why the exchange itself refused a call (before the service looked at the request). */
export type NodeExchangeReason =
  | "nonce-unknown" // no attestation key for this nonce: never issued, or already used
  | "nonce-reused" // GetAttestation for a nonce whose key is still held
  | "attestation-capacity" // too many attestation keys held; retry later
  | "attestation-unavailable" // the issuer could not produce evidence
  | "request-unsealed" // the request is not sealed, or carries plaintext fields on the wire
  | "malformed-request" // the opened request's client key is not 32 bytes
  | Extract<ExchangeFailure, "nonce-malformed" | "nonce-expired" | "open-failed">;

const codes: Record<Exclude<NodeExchangeReason, ExchangeFailure>, Code> = {
  "nonce-unknown": Code.PermissionDenied,
  "nonce-reused": Code.InvalidArgument,
  "attestation-capacity": Code.ResourceExhausted,
  "attestation-unavailable": Code.Unavailable,
  "request-unsealed": Code.InvalidArgument,
  "malformed-request": Code.InvalidArgument,
};

/** A rejection of the exchange for `reason`, with its code; `message` is what the client reads. */
export function rejectExchange(
  reason: NodeExchangeReason,
  message: string,
  options?: { cause?: unknown },
): Rejection {
  const code = Object.hasOwn(codes, reason)
    ? codes[reason as keyof typeof codes]
    : connectCodeFor(reason as ExchangeFailure);
  return new Rejection(reason, code, message, options);
}

/** What {@linkcode AttestedKeys} uses. */
export interface AttestedKeysDependencies {
  /** Produces this node's evidence. */
  issuer: Issuer;
  /** Time, for key expiry. */
  clock: Clock;
  /** Where an issuer failure is logged. */
  logger: Logger;
}

/** Options of {@linkcode AttestedKeys}. */
export interface AttestedKeysOptions {
  /** Default {@linkcode DEFAULT_ATTESTATION_KEY_LIFETIME_MS}. */
  lifetimeMs?: number;
  /** Default {@linkcode DEFAULT_MAX_ATTESTATION_KEYS}. */
  max?: number;
}

/** An opened request and what answering it needs. */
export interface OpenedRequest<D extends SealableRequest> {
  /** The request's plaintext fields. */
  request: RequestPlaintext<D>;
  /** The exchange's report data: the AAD of the sealed answer. */
  reportData: Uint8Array<ArrayBuffer>;
}

/** A held attestation key pair. */
interface HeldKey {
  keyPair: HpkeKeyPair;
  reportData: Uint8Array<ArrayBuffer>;
  expiresAt: number;
}

/** The attestation key pairs of one exchange purpose, per client nonce: short-lived, one use, bounded. */
export class AttestedKeys {
  readonly #entries = new Map<string, HeldKey>();
  readonly #pending = new Set<string>();
  readonly #deps: AttestedKeysDependencies;
  readonly #purpose: NodeExchangePurpose;
  readonly #lifetimeMs: number;
  readonly #max: number;

  /** Keys for `purpose`'s exchanges. */
  constructor(
    deps: AttestedKeysDependencies,
    purpose: NodeExchangePurpose,
    options: AttestedKeysOptions = {},
  ) {
    this.#deps = deps;
    this.#purpose = purpose;
    this.#lifetimeMs = options.lifetimeMs ?? DEFAULT_ATTESTATION_KEY_LIFETIME_MS;
    this.#max = options.max ?? DEFAULT_MAX_ATTESTATION_KEYS;
  }

  /** `GetAttestation`: a fresh key pair and evidence binding it to the client's nonce, held for one request. */
  async attest(
    request: GetAttestationRequest,
    options: { signal?: AbortSignal } = {},
  ): Promise<GetAttestationResponse> {
    const nonce = checkNonce(request);
    const id = nonce.toHex();
    this.#reserve(id);
    let held: HeldKey | undefined;
    try {
      const { keyPair, reportData, answer } = await this.#attest(nonce, options);
      held = { keyPair, reportData, expiresAt: this.#deps.clock.now() + this.#lifetimeMs };
      return answer;
    } finally {
      this.#pending.delete(id);
      if (held) this.#entries.set(id, held);
    }
  }

  /** The same evidence as {@linkcode attest}, bound to a key pair that is forgotten at once: no request can follow. */
  async show(
    request: GetAttestationRequest,
    options: { signal?: AbortSignal } = {},
  ): Promise<GetAttestationResponse> {
    return (await this.#attest(checkNonce(request), options)).answer;
  }

  /**
   * Checks a request's exchange (step 1 of §7.3 and §7.7): sealed, with no
   * plaintext field on the wire; its nonce names a held key pair, which is
   * taken (one use); it opens with that key pair; its client key is an
   * X25519 key. Throws a {@linkcode Rejection} for a
   * {@linkcode NodeExchangeReason}.
   */
  async open<D extends SealableRequest>(
    schema: D,
    request: { sealed?: Sealed; attestationNonce: Uint8Array },
  ): Promise<OpenedRequest<D>> {
    const name = schema.name;
    if (!request.sealed) {
      throw rejectExchange("request-unsealed", `${name} must be sealed to the key from GetAttestation`);
    }
    const onWire = { ...request, sealed: undefined, attestationNonce: new Uint8Array(0) };
    if (toBinary(schema, create(schema, onWire as unknown as MessageInitShape<D>)).length > 0) {
      throw rejectExchange(
        "request-unsealed",
        `${name} carries plaintext fields on the wire; only sealed and attestation_nonce may be set`,
      );
    }
    const nonce = request.attestationNonce;
    if (nonce.length !== INIT_NONCE_LENGTH) {
      throw rejectExchange(
        "nonce-malformed",
        `attestation_nonce must be ${INIT_NONCE_LENGTH} bytes, got ${nonce.length}`,
      );
    }
    const held = this.#take(nonce.toHex());
    let opened: RequestPlaintext<D>;
    try {
      opened = await openNodeRequest(this.#purpose, schema, held.keyPair, request.sealed, held.reportData);
    } catch (error) {
      throw rejectExchange(
        "open-failed",
        `${name} does not open with the attested key (sealed to another key, exchange or purpose, or tampered)`,
        { cause: error },
      );
    }
    const { clientPublicKey } = opened as unknown as { clientPublicKey: Uint8Array };
    if (!isPublicKeyLength(clientPublicKey)) {
      throw rejectExchange(
        "malformed-request",
        `client_public_key must be 32 bytes (X25519), got ${clientPublicKey.length}`,
      );
    }
    return { request: opened, reportData: held.reportData };
  }

  /** A fresh key pair and this node's evidence binding it to `nonce`. */
  async #attest(
    nonce: Uint8Array,
    options: { signal?: AbortSignal },
  ): Promise<{ keyPair: HpkeKeyPair; reportData: Uint8Array<ArrayBuffer>; answer: GetAttestationResponse }> {
    const keyPair = await generateKeyPair();
    const reportData = await nodeReportData(this.#purpose, nonce, keyPair.publicKey);
    let document: Uint8Array;
    try {
      document = await this.#deps.issuer.issue(reportData, options);
    } catch (error) {
      this.#deps.logger.warn("cannot produce attestation evidence", { error });
      throw rejectExchange(
        "attestation-unavailable",
        "this node cannot produce attestation evidence now; retry",
        { cause: error },
      );
    }
    const answer = create(GetAttestationResponseSchema, {
      publicKey: keyPair.publicKey,
      evidence: { variant: this.#deps.issuer.variant, document },
    });
    return { keyPair, reportData, answer };
  }

  /** Reserves a slot for `id` while its evidence is produced; throws when reused or full. */
  #reserve(id: string): void {
    const now = this.#deps.clock.now();
    for (const [held, entry] of this.#entries) if (now >= entry.expiresAt) this.#entries.delete(held);
    if (this.#entries.has(id) || this.#pending.has(id)) {
      throw rejectExchange(
        "nonce-reused",
        "an attestation key for this nonce is already held: use a fresh nonce",
      );
    }
    if (this.#entries.size + this.#pending.size >= this.#max) {
      throw rejectExchange(
        "attestation-capacity",
        `too many attestation keys held (${this.#max}); retry after ${this.#lifetimeMs / 1000} s`,
      );
    }
    this.#pending.add(id);
  }

  /** Takes the key of `id` (one use). */
  #take(id: string): HeldKey {
    const entry = this.#entries.get(id);
    if (!entry) {
      throw rejectExchange(
        "nonce-unknown",
        "no attestation key for this nonce (never issued, or already used): call GetAttestation again",
      );
    }
    this.#entries.delete(id);
    if (this.#deps.clock.now() >= entry.expiresAt) {
      throw rejectExchange(
        "nonce-expired",
        "the attestation key for this nonce expired: call GetAttestation again",
      );
    }
    return entry;
  }
}

/** The request's nonce, which must be {@linkcode INIT_NONCE_LENGTH} bytes; else a `nonce-malformed` rejection. */
export function checkNonce(request: GetAttestationRequest): Uint8Array {
  const { nonce } = request;
  if (nonce.length !== INIT_NONCE_LENGTH) {
    throw rejectExchange("nonce-malformed", `nonce must be ${INIT_NONCE_LENGTH} bytes, got ${nonce.length}`);
  }
  return nonce;
}
