/**
 * The join service's real `join.API` handler over real TLS for the attested
 * exchange tests: the real exchange (nonces under a key from the key
 * source, the real verifier, sealing) with the given validator, `serveRpc`
 * and a connect-node gRPC client; every other dependency is a fake from
 * `tests/support/join_fakes.ts`, so tickets hold keys the tests can check
 * after opening them.
 *
 * @module
 */
import { type Client, createClient } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import type { Issuer, Validator } from "../../src/attestation/attestation.ts";
import { type AttestedRequestBundle, createAttestedRequest } from "../../src/atls/attester.ts";
import { type Purpose, rejoinRequestDigest } from "../../src/atls/reportdata.ts";
import {
  API,
  type IssueRejoinTicketRequest,
  IssueRejoinTicketRequestSchema,
} from "../../src/gen/join/join_pb.ts";
import { createAttestedExchange } from "../../src/joinservice/exchange.ts";
import { JoinService } from "../../src/joinservice/service.ts";
import { MEASUREMENT_SECRET_KEY_ID, stateDiskKeyId } from "../../src/kms/keys.ts";
import { fakeDependencies, fakeKey } from "../support/join_fakes.ts";
import type { ManualClock } from "../support/manual_clock.ts";
import { serveOverTls } from "../support/tls_rpc.ts";

/** The state disk key the fixture hands out for `diskUuid`. */
export function stateDiskKeyFor(diskUuid: string): Uint8Array<ArrayBuffer> {
  return fakeKey(stateDiskKeyId(diskUuid));
}

/** The measurement secret the fixture hands out. */
export const MEASUREMENT_SECRET: Uint8Array<ArrayBuffer> = fakeKey(MEASUREMENT_SECRET_KEY_ID);

/** A running fixture join service and a client for it. */
export interface JoinFixture extends AsyncDisposable {
  client: Client<typeof API>;
  /** The service's "host:port" (TLS with a test CA, see {@linkcode JoinFixture.caPem}). */
  endpoint: string;
  /** PEM of the CA that signed the service's certificate. */
  caPem: string;
  clock: ManualClock;
  /** Requests that were issued a ticket, in order. */
  readonly verified: { purpose: string; diskUuid: string }[];
}

/**
 * An attested rejoin request for `diskUuid` as a node builds it, with a
 * challenge from `fixture` (or `nonce`). A `purpose` other than "rejoin"
 * makes evidence for the wrong purpose.
 */
export async function attestedRejoinRequest(options: {
  issuer: Issuer;
  diskUuid: string;
  fixture?: JoinFixture;
  nonce?: Uint8Array;
  purpose?: Purpose;
}): Promise<{ bundle: AttestedRequestBundle; request: IssueRejoinTicketRequest }> {
  const { issuer, diskUuid } = options;
  const nonce = options.nonce ?? (await options.fixture!.client.getChallenge({})).nonce;
  const bundle = await createAttestedRequest({
    issuer,
    nonce,
    purpose: options.purpose ?? "rejoin",
    requestDigest: await rejoinRequestDigest({ diskUuid }),
  });
  return {
    bundle,
    request: create(IssueRejoinTicketRequestSchema, { diskUuid, attestation: bundle.attestation }),
  };
}

/** Starts the fixture with `validator`; dispose it to close client and server. */
export async function startJoinFixture(validator: Validator): Promise<JoinFixture> {
  const world = fakeDependencies({ config: { variant: validator.variant } });
  const state = world.deps.attestation.current();
  world.deps.attestation = { current: () => ({ ...state, validator }) };
  world.deps.exchange = createAttestedExchange({ keys: world.deps.keys, clock: world.clock });
  const service = new JoinService(world.deps);
  const tls = await serveOverTls(
    (router) => router.service(API, service.handlers()),
    { readMaxBytes: 256 * 1024 }, // as the join service: evidence over its own 64 KiB cap reaches the handler
  );
  const client = createClient(API, tls.transport);
  return {
    client,
    endpoint: tls.endpoint,
    caPem: tls.caPem,
    clock: world.clock,
    get verified() {
      return world.audit.filter((entry) => entry.outcome === "issued").map((entry) => ({
        purpose: entry.method === "IssueRejoinTicket" ? "rejoin" : "join",
        diskUuid: entry.diskUuid,
      }));
    },
    [Symbol.asyncDispose]: () => tls[Symbol.asyncDispose](),
  };
}
