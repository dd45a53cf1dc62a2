/**
 * The join and rejoin client's side of the attested exchange with a join
 * service (docs/attested-exchange.md §6.2): `GetChallenge`, a fresh HPKE key
 * and evidence bound to the request, `IssueJoinTicket` (or
 * `IssueRejoinTicket`), and the sealed ticket opened with that key.
 *
 * **Server verification.** A joining node has no way to know the join
 * service's certificate in advance: the service generates a self-signed
 * certificate at start unless one is configured, and the image carries no
 * cluster-specific pin. So by default this source accepts any server
 * certificate (`skipServerVerification`), as the original's aTLS client did
 * (it checked only that the certificate was validly self-signed and did not
 * verify the join service's attestation). This is sound for what the node
 * receives from a *real* cluster: every secret in the ticket is HPKE-sealed
 * to the key in the node's own evidence, so a man in the middle of the TLS
 * connection cannot read it, and changing the request breaks the evidence
 * (§9 "Relay"). It is **not** authentication of the join service
 * (§9 "Verifier authenticity"): anything that can answer on a control-plane
 * address can hand the node a ticket of its own making (its own disk key,
 * cluster CA pin, kubelet certificate) and so make the node join a cluster
 * it controls, never obtain the real cluster's secrets. Where the operator
 * can provision a CA or pin (`caCerts`), set it: TLS then authenticates the
 * service. Mutual attestation is future work.
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { create, fromBinary, type Message } from "@bufbuild/protobuf";
import type { GenMessage } from "@bufbuild/protobuf/codegenv2";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { AttestationError, type Issuer } from "../attestation/attestation.ts";
import { createAttestedRequest, openSealedResponse } from "../atls/attester.ts";
import { ExchangeError } from "../atls/errors.ts";
import { joinRequestDigest, type Purpose, rejoinRequestDigest } from "../atls/reportdata.ts";
import type { IssueJoinTicketResponse, IssueRejoinTicketResponse } from "../gen/join/join_pb.ts";
import {
  API,
  IssueJoinTicketRequestSchema,
  IssueJoinTicketResponseSchema,
  IssueRejoinTicketRequestSchema,
  IssueRejoinTicketResponseSchema,
} from "../gen/join/join_pb.ts";
import type { AttestedRequest, Sealed } from "../gen/atls/v1/atls_pb.ts";
import { ReasonError } from "../reason_error.ts";
import { connectRpc, type RpcProtocol } from "../rpc/client.ts";
import { isUnanswered } from "../rpc/unanswered.ts";

/**
 * Why a ticket request failed: a reason of the attested exchange as the
 * join service named it (e.g. "measurement-mismatch", "nonce-expired"),
 * "open-failed" when the sealed ticket does not open, an attestation
 * reason of this node's issuer (e.g. "unavailable"), or one of
 * "unreachable" (no connection, or the service answered Unavailable),
 * "deadline", "refused" (the service refused for a reason of its own: a
 * rate limit, a rejected CSR, ...) and "malformed" (the opened ticket does
 * not decode). "unreachable" includes a call whose connection was lost
 * before the answer (`src/rpc/unanswered.ts`).
 */
export type TicketFailure = string;

/** A ticket request failed. The message is the join service's own (it names mismatching PCRs) and holds no secret. */
export class TicketError extends ReasonError<TicketFailure> {
  /** The Connect code the service answered with, when it answered. */
  readonly code?: Code;
  /** The endpoint that was asked. */
  readonly endpoint: string;

  /** A failure of the request to `endpoint`. */
  constructor(
    endpoint: string,
    reason: TicketFailure,
    message: string,
    options: ErrorOptions & { code?: Code } = {},
  ) {
    super(reason, `join service ${endpoint}: ${message}`, options);
    this.code = options.code;
    this.endpoint = endpoint;
  }
}

/** What a node asks a join ticket for. */
export interface JoinTicketRequest {
  /** The state disk's LUKS UUID (lower-case). */
  diskUuid: string;
  /** DER PKCS#10 CSR of the kubelet key. */
  certificateRequest: Uint8Array;
  /** The node joins as a control plane. */
  isControlPlane: boolean;
}

/** Options of one ticket request. */
export interface TicketCallOptions {
  /** Cancels the request (the caller's deadline included). */
  signal?: AbortSignal;
}

/** Options for {@linkcode AttestedTicketSource}. */
export interface AttestedTicketSourceOptions {
  /** Produces this node's evidence. */
  issuer: Issuer;
  /**
   * PEM CA certificates that sign the join service's certificate. When
   * absent, any server certificate is accepted (see the module's "Server
   * verification").
   */
  caCerts?: string[];
  /** Wire protocol; default "grpc". */
  protocol?: RpcProtocol;
}

/** Reasons after which a new challenge may succeed at once (another replica, an expired nonce). */
const FRESH_CHALLENGE_HELPS = new Set([
  "nonce-expired",
  "nonce-replayed",
  "nonce-not-yet-valid",
  "nonce-bad-mac",
  "nonce-other-replica",
]);

/** Requests tickets from join services at "host:port" endpoints over HTTPS. */
export class AttestedTicketSource {
  readonly #options: AttestedTicketSourceOptions;

  /** A source attesting with `options.issuer`. */
  constructor(options: AttestedTicketSourceOptions) {
    this.#options = options;
  }

  /**
   * Requests and opens a join ticket from the join service at `endpoint`
   * ("host:port", IPv6 in brackets). Throws {@linkcode TicketError}.
   */
  async joinTicket(
    endpoint: string,
    request: JoinTicketRequest,
    options: TicketCallOptions = {},
  ): Promise<IssueJoinTicketResponse> {
    const fields = { ...request, hostPublicKey: new Uint8Array(), hostCertificatePrincipals: [] };
    const digest = await joinRequestDigest(fields);
    return await this.#exchange(
      endpoint,
      "join",
      digest,
      IssueJoinTicketResponseSchema,
      options,
      (client, attestation, signal) =>
        client.issueJoinTicket(create(IssueJoinTicketRequestSchema, { ...fields, attestation }), { signal }),
    );
  }

  /** Requests and opens a rejoin ticket for the disk `diskUuid`. Throws {@linkcode TicketError}. */
  async rejoinTicket(
    endpoint: string,
    diskUuid: string,
    options: TicketCallOptions = {},
  ): Promise<IssueRejoinTicketResponse> {
    const digest = await rejoinRequestDigest({ diskUuid });
    return await this.#exchange(
      endpoint,
      "rejoin",
      digest,
      IssueRejoinTicketResponseSchema,
      options,
      (client, attestation, signal) =>
        client.issueRejoinTicket(create(IssueRejoinTicketRequestSchema, { diskUuid, attestation }), {
          signal,
        }),
    );
  }

  /** Challenge, attested request, open; once more with a fresh challenge when the nonce was the problem. */
  async #exchange<T extends Message>(
    endpoint: string,
    purpose: Purpose,
    requestDigest: Uint8Array,
    schema: GenMessage<T>,
    options: TicketCallOptions,
    send: (
      client: ReturnType<typeof createClient<typeof API>>,
      attestation: AttestedRequest,
      signal: AbortSignal | undefined,
    ) => Promise<{ sealed?: Sealed }>,
  ): Promise<T> {
    const { signal } = options;
    const connection = connectRpc({
      baseUrl: `https://${endpoint}`,
      protocol: this.#options.protocol,
      ...(this.#options.caCerts ? { caCerts: this.#options.caCerts } : { skipServerVerification: true }),
    });
    try {
      const client = createClient(API, connection.transport);
      for (let attempt = 1;; attempt++) {
        try {
          const { nonce } = await client.getChallenge({}, { signal });
          const bundle = await createAttestedRequest({
            issuer: this.#options.issuer,
            nonce,
            purpose,
            requestDigest,
            signal,
          });
          const { sealed } = await send(client, bundle.attestation, signal);
          const plaintext = await openSealedResponse({ sealed, bundle, purpose });
          try {
            return fromBinary(schema, plaintext);
          } catch (error) {
            throw new TicketError(endpoint, "malformed", "the opened ticket does not decode", {
              cause: error,
            });
          }
        } catch (error) {
          signal?.throwIfAborted();
          const failure = ticketError(endpoint, error);
          if (attempt === 1 && FRESH_CHALLENGE_HELPS.has(failure.reason)) continue;
          throw failure;
        }
      }
    } finally {
      connection.close();
    }
  }
}

/** The exchange's reason in a join service's message: "attested exchange rejected (<reason>): ...". */
const EXCHANGE_REASON = /^attested exchange rejected \(([a-z-]+)\)/;

/** `error` as a {@linkcode TicketError} with the service's reason and message. */
function ticketError(endpoint: string, error: unknown): TicketError {
  if (error instanceof TicketError) return error;
  if (error instanceof ExchangeError || error instanceof AttestationError) {
    return new TicketError(endpoint, error.reason, error.message, { cause: error });
  }
  if (error instanceof ConnectError) {
    const exchangeReason = EXCHANGE_REASON.exec(error.rawMessage)?.[1];
    // A call that lost its connection (the service killed or restarted mid-call) was not refused.
    const reason = exchangeReason ??
      (isUnanswered(error) ? "unreachable" : error.code === Code.DeadlineExceeded ? "deadline" : "refused");
    return new TicketError(endpoint, reason, `${Code[error.code]}: ${error.rawMessage}`, {
      cause: error,
      code: error.code,
    });
  }
  const message = errorMessage(error);
  return new TicketError(endpoint, "unreachable", message, { cause: error });
}
