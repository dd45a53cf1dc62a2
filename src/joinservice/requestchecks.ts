/**
 * The checks of a ticket request's own fields, before anything else looks
 * at it: sizes, the disk UUID's form, and SSH principals. They cost
 * nothing, need no attestation, and reject with "malformed-request"
 * (InvalidArgument).
 *
 * @module
 */
import { escapeControlCharacters } from "../json/escape_control.ts";
import { quoted } from "../json/quoted.ts";
import type { IssueJoinTicketRequest } from "../gen/join/join_pb.ts";
import type { Rejection } from "../rpc/rejection.ts";
import { reject } from "./rejections.ts";
import { checkHostPrincipals, SshCaError } from "./sshca.ts";

/** Request size limits (bytes or counts). */
export const REQUEST_LIMITS = {
  certificateRequest: 16 * 1024,
  hostPublicKey: 4 * 1024,
  principals: 16,
  principalLength: 253,
} as const;

/** A disk UUID: 8-4-4-4-12 hex digits, any case (the key ID is its lower-case form). */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Checks a rejoin request (its disk UUID). Throws a "malformed-request" {@linkcode Rejection}. */
export function checkRejoinRequest(request: { diskUuid: string }): void {
  if (!UUID.test(request.diskUuid)) {
    throw malformed(
      `disk_uuid must be a UUID like 0123abcd-0000-4000-8000-00000000cafe, got ${
        quoted(request.diskUuid, 80)
      }`,
    );
  }
}

/**
 * Checks a join request: its disk UUID, the CSR's size, the SSH host key's
 * size, and the principals (1 to 16 when a host key is given, each 1 to 253
 * characters naming one host: no whitespace, control or pattern
 * characters; none without a host key). Throws a "malformed-request"
 * {@linkcode Rejection}.
 */
export function checkJoinRequest(request: IssueJoinTicketRequest): void {
  checkRejoinRequest(request);
  const { certificateRequest, hostPublicKey, hostCertificatePrincipals: principals } = request;
  if (certificateRequest.length === 0) throw malformed("certificate_request is empty");
  if (certificateRequest.length > REQUEST_LIMITS.certificateRequest) {
    throw malformed(
      `certificate_request is ${certificateRequest.length} bytes; at most ${REQUEST_LIMITS.certificateRequest}`,
    );
  }
  if (hostPublicKey.length > REQUEST_LIMITS.hostPublicKey) {
    throw malformed(
      `host_public_key is ${hostPublicKey.length} bytes; at most ${REQUEST_LIMITS.hostPublicKey}`,
    );
  }
  if (hostPublicKey.length === 0) {
    if (principals.length > 0) throw malformed("host_certificate_principals given without host_public_key");
    return;
  }
  if (principals.length > REQUEST_LIMITS.principals) {
    throw malformed(`at most ${REQUEST_LIMITS.principals} host_certificate_principals`);
  }
  if (principals.some((principal) => principal.length > REQUEST_LIMITS.principalLength)) {
    throw malformed(
      `host certificate principals must be at most ${REQUEST_LIMITS.principalLength} characters`,
    );
  }
  try {
    checkHostPrincipals(principals);
  } catch (error) {
    if (error instanceof SshCaError) throw malformed(error.message);
    throw error;
  }
}

/** A request field made safe for logs and messages: its first 80 characters, control characters escaped. */
export function printable(value: string): string {
  return escapeControlCharacters(value.slice(0, 80));
}

function malformed(message: string): Rejection {
  return reject("malformed-request", message);
}
