/**
 * A {@linkcode JoinTicketSource} that sends every node's exchange over one
 * long-lived connection, for load with connection reuse beside the
 * bootstrapper's `AttestedTicketSource`, which opens a connection per
 * request. The exchange is the same (`join_request.ts`: challenge, evidence
 * bound to the request and a fresh HPKE key, the sealed ticket opened).
 *
 * @module
 */
import { createClient } from "@connectrpc/connect";
import type { Issuer } from "../../src/attestation/attestation.ts";
import type { JoinTicketSource } from "../../src/bootstrapper/joinclient.ts";
import { API } from "../../src/gen/join/join_pb.ts";
import { connectRpc, type RpcConnection } from "../../src/rpc/client.ts";
import { attestedJoinRequest, openJoinTicket } from "./join_request.ts";

/** A ticket source over one connection; dispose it to close the connection. */
export interface ReusedConnectionTickets extends JoinTicketSource, Disposable {}

/**
 * Tickets from the join service at `endpoint` ("host:port") over one
 * connection (opened on first use, reopened when it drops), with evidence
 * from `issuer`. Accepts any server certificate, as the bootstrapper does.
 */
export function reusedConnectionTickets(endpoint: string, issuer: Issuer): ReusedConnectionTickets {
  const connection: RpcConnection = connectRpc({
    baseUrl: `https://${endpoint}`,
    skipServerVerification: true,
  });
  const client = createClient(API, connection.transport);
  return {
    async joinTicket(_endpoint, request, options = {}) {
      const { request: attested, bundle } = await attestedJoinRequest({ issuer, client, ...request });
      const response = await client.issueJoinTicket(attested, { signal: options.signal });
      return await openJoinTicket(response, bundle);
    },
    [Symbol.dispose]: () => connection.close(),
  };
}
