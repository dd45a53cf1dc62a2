/**
 * A minimal join.API over real TLS for the attested exchange tests: it
 * issues challenges and answers IssueJoinTicket and IssueRejoinTicket with
 * sealed tickets, using the real verifier code, `serveRpc` and a
 * connect-node gRPC client. Tickets hold per-disk values the tests can
 * check after opening them.
 *
 * @module
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { type Client, createClient } from "@connectrpc/connect";
import type { Validator } from "../../src/attestation/attestation.ts";
import { toConnectError } from "../../src/atls/errors.ts";
import { ChallengeNonces } from "../../src/atls/nonce.ts";
import { joinRequestDigest, rejoinRequestDigest, sha256 } from "../../src/atls/reportdata.ts";
import { sealResponse, verifyAttestedRequest } from "../../src/atls/verifier.ts";
import {
  API,
  IssueJoinTicketResponseSchema,
  IssueRejoinTicketResponseSchema,
} from "../../src/gen/join/join_pb.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import { serveRpc } from "../../src/rpc/server.ts";
import { createTestCa, issueLoopbackServerCert } from "../support/pki.ts";
import { ManualClock } from "./manual_clock.ts";

/** The state disk key the fixture hands out for `diskUuid`. */
export function stateDiskKeyFor(diskUuid: string): Promise<Uint8Array<ArrayBuffer>> {
  return sha256(new TextEncoder().encode(`state disk key of ${diskUuid}`));
}

/** The measurement secret the fixture hands out. */
export const MEASUREMENT_SECRET = new TextEncoder().encode("measurement secret of the test cluster");

/** A running fixture join service and a client for it. */
export interface JoinFixture extends AsyncDisposable {
  client: Client<typeof API>;
  clock: ManualClock;
  /** Successful verifications, in order. */
  verified: { purpose: string; diskUuid: string }[];
}

/** Starts the fixture with `validator`; dispose it to close client and server. */
export async function startJoinFixture(validator: Validator): Promise<JoinFixture> {
  const clock = new ManualClock(Date.now());
  const nonces = new ChallengeNonces({ key: crypto.getRandomValues(new Uint8Array(32)), clock });
  const verified: JoinFixture["verified"] = [];
  const ca = await createTestCa();
  const leaf = await issueLoopbackServerCert(ca);
  const server = await serveRpc({
    hostname: "127.0.0.1",
    port: 0,
    tls: { cert: leaf.certPem, key: leaf.keyPem },
    readMaxBytes: 256 * 1024, // as the join service: evidence over its own 64 KiB cap reaches the handler
    routes: (router) =>
      router.service(API, {
        async getChallenge() {
          const { nonce, expiresAt } = await nonces.issue();
          return { nonce, expiresAtUnixMs: BigInt(expiresAt) };
        },
        async issueRejoinTicket(req) {
          try {
            const result = await verifyAttestedRequest({
              attestation: req.attestation,
              purpose: "rejoin",
              requestDigest: await rejoinRequestDigest(req),
              validator,
              nonces,
            });
            verified.push({ purpose: "rejoin", diskUuid: req.diskUuid });
            const ticket = create(IssueRejoinTicketResponseSchema, {
              stateDiskKey: await stateDiskKeyFor(req.diskUuid),
              measurementSecret: MEASUREMENT_SECRET,
            });
            const plaintext = toBinary(IssueRejoinTicketResponseSchema, ticket);
            return { sealed: await sealResponse({ verified: result, purpose: "rejoin", plaintext }) };
          } catch (err) {
            throw toConnectError(err);
          }
        },
        async issueJoinTicket(req) {
          try {
            const result = await verifyAttestedRequest({
              attestation: req.attestation,
              purpose: "join",
              requestDigest: await joinRequestDigest(req),
              validator,
              nonces,
            });
            verified.push({ purpose: "join", diskUuid: req.diskUuid });
            const ticket = create(IssueJoinTicketResponseSchema, {
              stateDiskKey: await stateDiskKeyFor(req.diskUuid),
              measurementSecret: MEASUREMENT_SECRET,
              controlPlaneFiles: req.isControlPlane
                ? [{ name: "ca.key", data: new Uint8Array([1, 2, 3]) }]
                : [],
            });
            const plaintext = toBinary(IssueJoinTicketResponseSchema, ticket);
            return { sealed: await sealResponse({ verified: result, purpose: "join", plaintext }) };
          } catch (err) {
            throw toConnectError(err);
          }
        },
        getStatus() {
          return {};
        },
      }),
  });
  const baseUrl = `https://localhost:${server.address.port}`;
  const connection = connectRpc({ baseUrl, caCerts: [ca.certPem] });
  const client = createClient(API, connection.transport);
  return {
    client,
    clock,
    verified,
    async [Symbol.asyncDispose]() {
      connection.close();
      await server.shutdown(1000);
    },
  };
}
