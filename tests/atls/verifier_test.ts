import assert from "node:assert/strict";
import { DummyIssuer, DummyValidator } from "../../src/attestation/dummy.ts";
import { createAttestedRequest } from "../../src/atls/attester.ts";
import { ExchangeError } from "../../src/atls/errors.ts";
import { ChallengeNonces } from "../../src/atls/nonce.ts";
import { rejoinRequestDigest } from "../../src/atls/reportdata.ts";
import { sealResponse, verifyAttestedRequest } from "../../src/atls/verifier.ts";
import { systemClock } from "../../src/clock.ts";
import { silentLogger } from "../../src/log/logger.ts";

const issuer = new DummyIssuer(silentLogger);
const validator = new DummyValidator(silentLogger);

async function setup() {
  const nonces = new ChallengeNonces({ key: crypto.getRandomValues(new Uint8Array(32)), clock: systemClock });
  const requestDigest = await rejoinRequestDigest({ diskUuid: "disk" });
  const { nonce } = await nonces.issue();
  const bundle = await createAttestedRequest({ issuer, nonce, purpose: "rejoin", requestDigest });
  return { nonces, requestDigest, bundle };
}

Deno.test("verification returns the attested key and the report data the evidence carries", async () => {
  const { nonces, requestDigest, bundle } = await setup();
  const verified = await verifyAttestedRequest({
    attestation: bundle.attestation,
    purpose: "rejoin",
    requestDigest,
    validator,
    nonces,
  });
  assert.deepEqual(verified.publicKey, bundle.keyPair.publicKey);
  assert.deepEqual(verified.reportData, bundle.reportData);
  assert.equal(verified.verification.variant, "dummy");
  assert.equal(nonces.trackedCount, 1);
});

Deno.test("an aborted verification consumes nothing", async () => {
  const { nonces, requestDigest, bundle } = await setup();
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(
    verifyAttestedRequest({
      attestation: bundle.attestation,
      purpose: "rejoin",
      requestDigest,
      validator,
      nonces,
      signal: controller.signal,
    }),
    { name: "AbortError" },
  );
  assert.equal(nonces.trackedCount, 0);
});

Deno.test("structurally invalid requests are rejected before the nonce is consumed", async () => {
  const { nonces, requestDigest, bundle } = await setup();
  bundle.attestation.publicKey = new Uint8Array(33);
  await assert.rejects(
    verifyAttestedRequest({
      attestation: bundle.attestation,
      purpose: "rejoin",
      requestDigest,
      validator,
      nonces,
    }),
    (err: unknown) => err instanceof ExchangeError && err.reason === "evidence-malformed",
  );
  assert.equal(nonces.trackedCount, 0);
});

Deno.test("the document size cap is configurable", async () => {
  const { nonces, requestDigest, bundle } = await setup();
  const options = {
    attestation: bundle.attestation,
    purpose: "rejoin" as const,
    requestDigest,
    validator,
    nonces,
  };
  const size = bundle.attestation.evidence!.document.length;
  await assert.rejects(
    verifyAttestedRequest({ ...options, maxDocumentBytes: size - 1 }),
    (err: unknown) => err instanceof ExchangeError && err.reason === "evidence-malformed",
  );
  await verifyAttestedRequest({ ...options, maxDocumentBytes: size });
});

Deno.test("sealing to an unusable attested key fails as seal-failed", async () => {
  await assert.rejects(
    sealResponse({
      verified: { publicKey: new Uint8Array(32), reportData: new Uint8Array(32) },
      purpose: "rejoin",
      plaintext: new Uint8Array(8),
    }),
    (err: unknown) => err instanceof ExchangeError && err.reason === "seal-failed",
  );
});
