import assert from "node:assert/strict";
import { fromBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import type { Measurements } from "../../src/attestation/attestation.ts";
import { TpmIssuer } from "../../src/attestation/tpm/issuer.ts";
import { TpmValidator } from "../../src/attestation/tpm/validator.ts";
import { openSealedResponse } from "../../src/atls/attester.ts";
import { IssueRejoinTicketResponseSchema } from "../../src/gen/join/join_pb.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { startSwtpm } from "../../src/localcluster/swtpm.ts";
import {
  attestedRejoinRequest,
  type JoinFixture,
  startJoinFixture,
  stateDiskKeyFor,
} from "./join_fixture.ts";
import { expectConnectError } from "../support/connect_error.ts";

const DISK = "3b7e9c41-8a2d-4f6e-b5c0-7d1a9e2f4c68";
const zero = new Uint8Array(32);

async function rejoin(fixture: JoinFixture, issuer: TpmIssuer) {
  const { bundle, request } = await attestedRejoinRequest({ issuer, fixture, diskUuid: DISK });
  return { bundle, response: fixture.client.issueRejoinTicket(request) };
}

Deno.test("rejoin over TLS with qemu-vtpm evidence from swtpm", async (t) => {
  const tpm = await startSwtpm();
  try {
    const issuer = await TpmIssuer.create({ tcti: tpm.tcti, logger: silentLogger, eventLogPath: null });
    try {
      const akTrust = { kind: "allow-list" as const, keyDigests: new Set([issuer.keyDigest]) };

      await t.step("matching measurements: the sealed ticket opens", async () => {
        // A fresh swtpm has never been extended: PCRs 0-15 are zero.
        const measurements: Measurements = new Map([
          [0, { expected: zero, warnOnly: false }],
          [15, { expected: zero, warnOnly: false }],
        ]);
        await using fixture = await startJoinFixture(
          new TpmValidator({ measurements, akTrust, logger: silentLogger }),
        );
        const { bundle, response } = await rejoin(fixture, issuer);
        const sealed = (await response).sealed;
        const ticket = fromBinary(
          IssueRejoinTicketResponseSchema,
          await openSealedResponse({ sealed, bundle, purpose: "rejoin" }),
        );
        assert.deepEqual(ticket.stateDiskKey, await stateDiskKeyFor(DISK));
        assert.deepEqual(fixture.verified, [{ purpose: "rejoin", diskUuid: DISK }]);
      });

      await t.step("mismatching measurements: PermissionDenied naming every mismatch", async () => {
        const measurements: Measurements = new Map([
          [4, { expected: new Uint8Array(32).fill(0xaa), warnOnly: false }],
          [9, { expected: new Uint8Array(32).fill(0xbb), warnOnly: false }],
          [15, { expected: zero, warnOnly: false }],
        ]);
        await using fixture = await startJoinFixture(
          new TpmValidator({ measurements, akTrust, logger: silentLogger }),
        );
        const { response } = await rejoin(fixture, issuer);
        const err = await expectConnectError(response, Code.PermissionDenied, /\(measurement-mismatch\)/);
        assert.ok(
          err.rawMessage.includes(`PCR[4] expected ${"aa".repeat(32)}, got ${"00".repeat(32)} (enforced)`),
        );
        assert.ok(
          err.rawMessage.includes(`PCR[9] expected ${"bb".repeat(32)}, got ${"00".repeat(32)} (enforced)`),
        );
        assert.ok(!err.rawMessage.includes("PCR[15]"));
        assert.equal(fixture.verified.length, 0);
      });
    } finally {
      await issuer.close();
    }
  } finally {
    await tpm.stop();
  }
});
