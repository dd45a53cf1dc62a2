/**
 * Attested join requests built as a joining node builds them (the
 * bootstrapper's `AttestedTicketSource`, src/bootstrapper/join_ticket_source.ts,
 * and docs/attested-exchange.md §6.2): a challenge from the join service, a
 * fresh HPKE key, evidence from the node's issuer over the report data that
 * binds the nonce, that key and the digest of the request's fields exactly as
 * they are sent, and the sealed ticket opened with that key.
 *
 * Shared by the join service process tests (`join_cluster.ts`) and the
 * end-to-end tests (`tests/e2e/`), which change or resend a built request to
 * make a moved, forged or replayed one.
 *
 * @module
 */
import { create, fromBinary } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import type { Issuer } from "../../src/attestation/attestation.ts";
import {
  type AttestedRequestBundle,
  createAttestedRequest,
  openSealedResponse,
} from "../../src/atls/attester.ts";
import { joinRequestDigest } from "../../src/atls/reportdata.ts";
import {
  type API,
  type IssueJoinTicketRequest,
  IssueJoinTicketRequestSchema,
  type IssueJoinTicketResponse,
  IssueJoinTicketResponseSchema,
} from "../../src/gen/join/join_pb.ts";

/** The fields of a join request besides its attestation. */
export interface JoinRequestFields {
  /** The state disk UUID, sent as is. */
  diskUuid: string;
  /** DER PKCS#10 CSR of the kubelet key. */
  certificateRequest: Uint8Array;
  /** Whether the node asks to join as a control plane; default false. */
  isControlPlane?: boolean;
  /** SSH host key to certify: OpenSSH wire-format public key and principals; default none. */
  hostKey?: { publicKey: Uint8Array; principals: string[] };
}

/** Options of {@linkcode attestedJoinRequest}. */
export interface AttestedJoinRequestOptions extends JoinRequestFields {
  /** The node's evidence issuer (e.g. a `TpmIssuer` on the node's TPM). */
  issuer: Issuer;
  /** The join service the challenge comes from. */
  client: Pick<Client<typeof API>, "getChallenge">;
}

/** A join request ready to send, and what its node keeps to read the answer. */
export interface AttestedJoinRequest {
  /** The request; change it to make a malformed or malicious one. */
  request: IssueJoinTicketRequest;
  /** The HPKE key pair and report data that open the sealed ticket. */
  bundle: AttestedRequestBundle;
}

/**
 * Gets a challenge from `options.client` and builds the attested
 * `IssueJoinTicket` request for the given fields, with evidence from
 * `options.issuer` bound to them.
 */
export async function attestedJoinRequest(options: AttestedJoinRequestOptions): Promise<AttestedJoinRequest> {
  const fields = {
    diskUuid: options.diskUuid,
    certificateRequest: options.certificateRequest,
    isControlPlane: options.isControlPlane ?? false,
    hostPublicKey: options.hostKey?.publicKey ?? new Uint8Array(),
    hostCertificatePrincipals: options.hostKey?.principals ?? [],
  };
  const { nonce } = await options.client.getChallenge({});
  const bundle = await createAttestedRequest({
    issuer: options.issuer,
    nonce,
    purpose: "join",
    requestDigest: await joinRequestDigest(fields),
  });
  return {
    request: create(IssueJoinTicketRequestSchema, { ...fields, attestation: bundle.attestation }),
    bundle,
  };
}

/**
 * Opens the sealed ticket of a join response with the request's `bundle`.
 * Throws the attester's `ExchangeError` "open-failed" when it does not open.
 */
export async function openJoinTicket(
  response: IssueJoinTicketResponse,
  bundle: AttestedRequestBundle,
): Promise<IssueJoinTicketResponse> {
  return fromBinary(
    IssueJoinTicketResponseSchema,
    await openSealedResponse({ sealed: response.sealed, bundle, purpose: "join" }),
  );
}
