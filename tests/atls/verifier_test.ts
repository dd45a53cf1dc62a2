import assert from "node:assert/strict";
import { LOW_ORDER_POINTS } from "../support/low_order_points.ts";
import { DummyIssuer, DummyValidator } from "../../src/attestation/dummy.ts";
import { createAttestedRequest } from "../../src/atls/attester.ts";
import { ExchangeError } from "../../src/atls/errors.ts";
import { ChallengeNonces } from "../../src/atls/nonce.ts";
import { rejoinRequestDigest } from "../../src/atls/reportdata.ts";
import {
  admitAttestedRequest,
  sealResponse,
  validateAttestedRequest,
  verifyAttestedRequest,
} from "../../src/atls/verifier.ts";
import { systemClock } from "../../src/clock.ts";
import { silentLogger } from "../../src/log/logger.ts";

const issuer = new DummyIssuer(silentLogger);
const validator = new DummyValidator(silentLogger);

/** A verifier's nonces, and an attested rejoin request with the options that verify it. */
async function setup() {
  const nonces = new ChallengeNonces({ key: crypto.getRandomValues(new Uint8Array(32)), clock: systemClock });
  const requestDigest = await rejoinRequestDigest({ diskUuid: "disk" });
  const { nonce } = await nonces.issue();
  const bundle = await createAttestedRequest({ issuer, nonce, purpose: "rejoin", requestDigest });
  const options = {
    attestation: bundle.attestation,
    purpose: "rejoin" as const,
    requestDigest,
    validator,
    nonces,
  };
  return { nonces, bundle, options };
}

Deno.test("verification returns the attested key and the report data the evidence carries", async () => {
  const { nonces, bundle, options } = await setup();
  const verified = await verifyAttestedRequest(options);
  assert.deepEqual(verified.publicKey, bundle.keyPair.publicKey);
  assert.deepEqual(verified.reportData, bundle.reportData);
  assert.equal(verified.verification.variant, "dummy");
  assert.equal(nonces.trackedCount, 1);
});

Deno.test("an aborted verification consumes nothing", async () => {
  const { nonces, options } = await setup();
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(verifyAttestedRequest({ ...options, signal: controller.signal }), {
    name: "AbortError",
  });
  assert.equal(nonces.trackedCount, 0);
});

Deno.test("structurally invalid requests are rejected before the nonce is consumed", async () => {
  const { nonces, bundle, options } = await setup();
  bundle.attestation.publicKey = new Uint8Array(33);
  await assert.rejects(
    verifyAttestedRequest(options),
    (err: unknown) => err instanceof ExchangeError && err.reason === "evidence-malformed",
  );
  assert.equal(nonces.trackedCount, 0);
});

Deno.test("the document size cap is configurable", async () => {
  const { bundle, options } = await setup();
  const size = bundle.attestation.evidence!.document.length;
  await assert.rejects(
    verifyAttestedRequest({ ...options, maxDocumentBytes: size - 1 }),
    (err: unknown) => err instanceof ExchangeError && err.reason === "evidence-malformed",
  );
  await verifyAttestedRequest({ ...options, maxDocumentBytes: size });
});

Deno.test("admission alone consumes the nonce without validating; validation is the other half", async () => {
  const { nonces, bundle, options } = await setup();
  let validations = 0;
  const counting = {
    variant: "dummy",
    validate: (...args: Parameters<typeof validator.validate>) => {
      validations++;
      return validator.validate(...args);
    },
  };
  const admitted = await admitAttestedRequest(options);
  assert.equal(nonces.trackedCount, 1, "the nonce is consumed at admission");
  assert.equal(validations, 0);
  await assert.rejects(
    admitAttestedRequest(options),
    (err: unknown) => err instanceof ExchangeError && err.reason === "nonce-replayed",
  );
  const verified = await validateAttestedRequest(admitted, { ...options, validator: counting });
  assert.equal(validations, 1);
  assert.deepEqual(verified.reportData, bundle.reportData);
  await assert.rejects(
    validateAttestedRequest(admitted, { ...options, purpose: "join" }),
    (err: unknown) => err instanceof ExchangeError && err.reason === "report-data-mismatch",
  );
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

Deno.test("a low-order attested key is refused with the structure (seal-failed), before the nonce is spent", async () => {
  const points = LOW_ORDER_POINTS.map((hex) => Uint8Array.fromHex(hex));
  for (const publicKey of points) {
    const { nonces, options } = await setup();
    // The seal at the end would fail for this key: the early refusal says the same.
    await assert.rejects(
      sealResponse({
        verified: { publicKey, reportData: new Uint8Array(32) },
        purpose: "rejoin",
        plaintext: new Uint8Array(8),
      }),
      (err: unknown) => err instanceof ExchangeError && err.reason === "seal-failed",
    );
    const attestation = { ...options.attestation!, publicKey };
    await assert.rejects(
      admitAttestedRequest({ attestation, nonces }),
      (err: unknown) =>
        err instanceof ExchangeError && err.reason === "seal-failed" && /low-order/.test(err.message),
      publicKey.toHex(),
    );
    assert.equal(nonces.trackedCount, 0, "the nonce was not spent");
  }
  // An ordinary key is admitted.
  const { nonces, options } = await setup();
  await admitAttestedRequest({ attestation: options.attestation!, nonces });
  assert.equal(nonces.trackedCount, 1);
});
