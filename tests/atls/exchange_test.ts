import assert from "node:assert/strict";
import { create, fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { DummyIssuer, DummyValidator } from "../../src/attestation/dummy.ts";
import { createAttestedRequest, openSealedResponse } from "../../src/atls/attester.ts";
import { ExchangeError } from "../../src/atls/errors.ts";
import { generateKeyPair } from "../../src/atls/hpke.ts";
import { ChallengeNonces, DEFAULT_NONCE_LIFETIME_MS } from "../../src/atls/nonce.ts";
import { joinRequestDigest, type JoinRequestFields } from "../../src/atls/reportdata.ts";
import type { AttestedRequest } from "../../src/gen/atls/v1/atls_pb.ts";
import {
  IssueJoinTicketRequestSchema,
  IssueJoinTicketResponseSchema,
  IssueRejoinTicketRequestSchema,
  IssueRejoinTicketResponseSchema,
} from "../../src/gen/join/join_pb.ts";
import { silentLogger } from "../../src/log/logger.ts";
import {
  attestedRejoinRequest,
  type JoinFixture,
  MEASUREMENT_SECRET,
  startJoinFixture,
  stateDiskKeyFor,
} from "./join_fixture.ts";
import { expectConnectError } from "../support/connect_error.ts";

const issuer = new DummyIssuer(silentLogger);
const validator = new DummyValidator(silentLogger);
const DISK = "6f0d8e2a-3c1b-4a5e-9f7d-2b8c4e6a1d3f";

/** Fetches a challenge and builds an attested rejoin request for `diskUuid`. */
function attestedRejoin(fixture: JoinFixture, diskUuid = DISK) {
  return attestedRejoinRequest({ issuer, fixture, diskUuid });
}

/** Asserts that `call` fails with `code`, naming `reason` in the message. */
async function rejectsWith(call: Promise<unknown>, code: Code, reason: string): Promise<ConnectError> {
  return await expectConnectError(call, code, new RegExp(`\\(${reason}\\)`));
}

Deno.test("rejoin over TLS: the ticket arrives sealed and opens only for the attested key", async () => {
  await using fixture = await startJoinFixture(validator);
  const { bundle, request } = await attestedRejoin(fixture);
  const response = await fixture.client.issueRejoinTicket(request);
  // On the wire only `sealed` is set.
  assert.equal(response.stateDiskKey.length, 0);
  assert.equal(response.measurementSecret.length, 0);
  assert.ok(response.sealed);

  const plaintext = await openSealedResponse({ sealed: response.sealed, bundle, purpose: "rejoin" });
  const ticket = fromBinary(IssueRejoinTicketResponseSchema, plaintext);
  assert.deepEqual(ticket.stateDiskKey, await stateDiskKeyFor(DISK));
  assert.deepEqual(ticket.measurementSecret, MEASUREMENT_SECRET);
  assert.deepEqual(fixture.verified, [{ purpose: "rejoin", diskUuid: DISK }]);
});

const joinFields: JoinRequestFields = {
  diskUuid: DISK,
  certificateRequest: new Uint8Array([0x30, 0x82, 0x01, 0x0a]),
  isControlPlane: false,
  hostPublicKey: new TextEncoder().encode("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5"),
  hostCertificatePrincipals: ["worker-1", "10.0.0.7"],
};

function joinRequest(fields: JoinRequestFields, attestation: AttestedRequest) {
  return create(IssueJoinTicketRequestSchema, {
    ...fields,
    hostCertificatePrincipals: [...fields.hostCertificatePrincipals],
    attestation,
  });
}

Deno.test("join over TLS: the ticket arrives sealed; the evidence does not carry over to another role", async () => {
  await using fixture = await startJoinFixture(validator);
  const { nonce } = await fixture.client.getChallenge({});
  const bundle = await createAttestedRequest({
    issuer,
    nonce,
    purpose: "join",
    requestDigest: await joinRequestDigest(joinFields),
  });

  // A relay flips the role to obtain the control-plane keys with a worker's evidence.
  const promoted = joinRequest({ ...joinFields, isControlPlane: true }, bundle.attestation);
  await rejectsWith(fixture.client.issueJoinTicket(promoted), Code.PermissionDenied, "report-data-mismatch");

  // The honest node retries with a fresh challenge.
  const { nonce: fresh } = await fixture.client.getChallenge({});
  const retry = await createAttestedRequest({
    issuer,
    nonce: fresh,
    purpose: "join",
    requestDigest: await joinRequestDigest(joinFields),
  });
  const response = await fixture.client.issueJoinTicket(
    joinRequest(joinFields, retry.attestation),
  );
  const ticket = fromBinary(
    IssueJoinTicketResponseSchema,
    await openSealedResponse({ sealed: response.sealed, bundle: retry, purpose: "join" }),
  );
  assert.deepEqual(ticket.stateDiskKey, await stateDiskKeyFor(DISK));
  assert.equal(ticket.controlPlaneFiles.length, 0);
  assert.deepEqual(fixture.verified, [{ purpose: "join", diskUuid: DISK }]);
});

Deno.test("a replayed request is rejected: its nonce was used", async () => {
  await using fixture = await startJoinFixture(validator);
  const { request } = await attestedRejoin(fixture);
  await fixture.client.issueRejoinTicket(request);
  await rejectsWith(fixture.client.issueRejoinTicket(request), Code.PermissionDenied, "nonce-replayed");
  assert.equal(fixture.verified.length, 1);
});

Deno.test("a request with an expired nonce is rejected", async () => {
  await using fixture = await startJoinFixture(validator);
  const { request } = await attestedRejoin(fixture);
  fixture.clock.time += DEFAULT_NONCE_LIFETIME_MS;
  await rejectsWith(fixture.client.issueRejoinTicket(request), Code.PermissionDenied, "nonce-expired");
  assert.equal(fixture.verified.length, 0);
});

Deno.test("evidence moved to a request for another disk is rejected", async () => {
  await using fixture = await startJoinFixture(validator);
  const { bundle } = await attestedRejoin(fixture, DISK);
  const moved = create(IssueRejoinTicketRequestSchema, {
    diskUuid: "00000000-0000-4000-8000-00000000beef",
    attestation: bundle.attestation,
  });
  await rejectsWith(fixture.client.issueRejoinTicket(moved), Code.PermissionDenied, "report-data-mismatch");
  assert.equal(fixture.verified.length, 0);
});

Deno.test("evidence made for one purpose is rejected for another", async () => {
  await using fixture = await startJoinFixture(validator);
  // Rejoin-shaped digest, but attested for "join": the verifier recomputes with "rejoin".
  const { request } = await attestedRejoinRequest({ issuer, fixture, diskUuid: DISK, purpose: "join" });
  await rejectsWith(fixture.client.issueRejoinTicket(request), Code.PermissionDenied, "report-data-mismatch");
});

Deno.test("evidence bound to another key is rejected: a relay cannot substitute its own key", async () => {
  await using fixture = await startJoinFixture(validator);
  const { request } = await attestedRejoin(fixture);
  const relayKey = await generateKeyPair();
  request.attestation!.publicKey = relayKey.publicKey;
  await rejectsWith(fixture.client.issueRejoinTicket(request), Code.PermissionDenied, "report-data-mismatch");
  assert.equal(fixture.verified.length, 0);
});

Deno.test("a relay that forwards the honest request cannot open the sealed response", async () => {
  await using fixture = await startJoinFixture(validator);
  const { bundle, request } = await attestedRejoin(fixture);
  const response = await fixture.client.issueRejoinTicket(request);
  const relay = { keyPair: await generateKeyPair(), reportData: bundle.reportData };
  await assert.rejects(
    openSealedResponse({ sealed: response.sealed, bundle: relay, purpose: "rejoin" }),
    (err: unknown) => err instanceof ExchangeError && err.reason === "open-failed",
  );
  // Nor does the honest key open it as the answer to another exchange or purpose.
  const otherExchange = { keyPair: bundle.keyPair, reportData: new Uint8Array(32) };
  await assert.rejects(
    openSealedResponse({ sealed: response.sealed, bundle: otherExchange, purpose: "rejoin" }),
    (err: unknown) => err instanceof ExchangeError && err.reason === "open-failed",
  );
  await assert.rejects(
    openSealedResponse({ sealed: response.sealed, bundle, purpose: "join" }),
    (err: unknown) => err instanceof ExchangeError && err.reason === "open-failed",
  );
  await assert.rejects(
    openSealedResponse({ sealed: undefined, bundle, purpose: "rejoin" }),
    (err: unknown) => err instanceof ExchangeError && err.reason === "open-failed",
  );
});

Deno.test("a request without attestation or evidence is rejected as invalid", async () => {
  await using fixture = await startJoinFixture(validator);
  await rejectsWith(
    fixture.client.issueRejoinTicket({ diskUuid: DISK }),
    Code.InvalidArgument,
    "evidence-missing",
  );
  const { request } = await attestedRejoin(fixture);
  request.attestation!.evidence = undefined;
  await rejectsWith(fixture.client.issueRejoinTicket(request), Code.InvalidArgument, "evidence-missing");
});

Deno.test("garbage in the attested request is rejected for the right reason", async () => {
  await using fixture = await startJoinFixture(validator);
  const cases: { mutate: (attestation: AttestedRequest) => void; code: Code; reason: string }[] = [
    {
      mutate: (a) => a.publicKey = new Uint8Array(5),
      code: Code.InvalidArgument,
      reason: "evidence-malformed",
    },
    { mutate: (a) => a.nonce = new Uint8Array(0), code: Code.InvalidArgument, reason: "nonce-malformed" },
    { mutate: (a) => a.nonce = new Uint8Array(10), code: Code.InvalidArgument, reason: "nonce-malformed" },
    { mutate: (a) => a.nonce = new Uint8Array(4096), code: Code.InvalidArgument, reason: "nonce-malformed" },
    {
      mutate: (a) => a.nonce = Uint8Array.of(2, ...crypto.getRandomValues(new Uint8Array(88))),
      code: Code.PermissionDenied,
      reason: "nonce-bad-mac",
    },
    {
      mutate: (a) => a.evidence!.document = new TextEncoder().encode("not a document"),
      code: Code.InvalidArgument,
      reason: "malformed",
    },
    {
      mutate: (a) => a.evidence!.document = new Uint8Array(64 * 1024 + 1),
      code: Code.InvalidArgument,
      reason: "evidence-malformed",
    },
    {
      mutate: (a) => a.evidence!.document = new Uint8Array(0),
      code: Code.InvalidArgument,
      reason: "evidence-malformed",
    },
    {
      mutate: (a) => a.evidence!.variant = "qemu-vtpm",
      code: Code.PermissionDenied,
      reason: "variant-mismatch",
    },
  ];
  for (const { mutate, code, reason } of cases) {
    const { request } = await attestedRejoin(fixture);
    mutate(request.attestation!);
    await rejectsWith(fixture.client.issueRejoinTicket(request), code, reason);
  }
  assert.equal(fixture.verified.length, 0);
});

Deno.test("a challenge from one replica is refused by another of the same cluster (same nonce key)", async () => {
  await using issuing = await startJoinFixture(validator);
  await using other = await startJoinFixture(validator);
  const { request } = await attestedRejoinRequest({ issuer, fixture: issuing, diskUuid: DISK });
  await rejectsWith(other.client.issueRejoinTicket(request), Code.PermissionDenied, "nonce-other-replica");
  assert.deepEqual(other.verified, []);
  await issuing.client.issueRejoinTicket(request);
  assert.equal(issuing.verified.length, 1, "the replica that issued the challenge accepts it");
});

Deno.test("a nonce from another verifier is rejected", async () => {
  await using fixture = await startJoinFixture(validator);
  const foreign = new ChallengeNonces({
    key: crypto.getRandomValues(new Uint8Array(32)),
    clock: fixture.clock,
  });
  const { nonce } = await foreign.issue();
  const { request } = await attestedRejoinRequest({ issuer, nonce, diskUuid: DISK });
  await rejectsWith(fixture.client.issueRejoinTicket(request), Code.PermissionDenied, "nonce-bad-mac");
});

Deno.test("a challenge expires at the advertised time", async () => {
  await using fixture = await startJoinFixture(validator);
  const challenge = await fixture.client.getChallenge({});
  assert.equal(challenge.expiresAtUnixMs, BigInt(fixture.clock.time + DEFAULT_NONCE_LIFETIME_MS));
  assert.equal(challenge.nonce.length, 89);
});
