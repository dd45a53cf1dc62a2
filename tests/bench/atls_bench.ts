/**
 * Cost of the attested exchange (docs/attested-exchange.md), with the dummy
 * variant so the numbers show the protocol's own overhead, not a TPM's.
 * Run: `deno bench --no-prompt tests/bench/atls_bench.ts`.
 *
 * @module
 */
import { DummyIssuer, DummyValidator } from "../../src/attestation/dummy.ts";
import { createAttestedRequest, openSealedResponse } from "../../src/atls/attester.ts";
import { generateKeyPair, seal } from "../../src/atls/hpke.ts";
import { ChallengeNonces } from "../../src/atls/nonce.ts";
import { rejoinRequestDigest, sealInfo, sha256 } from "../../src/atls/reportdata.ts";
import { sealResponse, verifyAttestedRequest } from "../../src/atls/verifier.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { ManualClock } from "../support/manual_clock.ts";

const issuer = new DummyIssuer(silentLogger);
const validator = new DummyValidator(silentLogger);
// The clock advances 5 ms per nonce issued, so nonces expire during the run and
// the single-use set is pruned in steady state instead of filling up.
const clock = new ManualClock(Date.now());
const nonces = new ChallengeNonces({ key: crypto.getRandomValues(new Uint8Array(32)), clock });
/** About the size of a rejoin ticket with certificates: 2 KiB. */
const ticket = crypto.getRandomValues(new Uint8Array(2048));
const requestDigest = await rejoinRequestDigest({ diskUuid: "6f0d8e2a-3c1b-4a5e-9f7d-2b8c4e6a1d3f" });
const recipient = await generateKeyPair();
const binding = { info: sealInfo("rejoin", "response"), aad: crypto.getRandomValues(new Uint8Array(32)) };
const hmacKey = await crypto.subtle.importKey(
  "raw",
  crypto.getRandomValues(new Uint8Array(32)),
  { name: "HMAC", hash: "SHA-256" },
  false,
  ["sign"],
);
const reportDataInput = crypto.getRandomValues(new Uint8Array(200));
/** What the nonce tag covers: version, expiry, replica ID, random part. */
const nonceBody = crypto.getRandomValues(new Uint8Array(57));

Deno.bench(
  "full exchange: nonce, attest, verify, seal 2 KiB, open",
  { group: "exchange", baseline: true },
  async () => {
    clock.advance(5);
    const { nonce } = await nonces.issue();
    const bundle = await createAttestedRequest({ issuer, nonce, purpose: "rejoin", requestDigest });
    const verified = await verifyAttestedRequest({
      attestation: bundle.attestation,
      purpose: "rejoin",
      requestDigest,
      validator,
      nonces,
    });
    const sealed = await sealResponse({ verified, purpose: "rejoin", plaintext: ticket });
    await openSealedResponse({ sealed, bundle, purpose: "rejoin" });
  },
);

Deno.bench("HPKE seal 2 KiB (incl. encapsulation)", { group: "exchange" }, async () => {
  await seal(recipient.publicKey, ticket, binding);
});

Deno.bench("HPKE key pair generation", { group: "exchange" }, async () => {
  await generateKeyPair();
});

Deno.bench("nonce issue + consume", { group: "exchange" }, async () => {
  clock.advance(5);
  await nonces.consume((await nonces.issue()).nonce);
});

Deno.bench(
  "baseline: SHA-256 of 200 bytes (report data)",
  { group: "baseline", baseline: true },
  async () => {
    await sha256(reportDataInput);
  },
);

Deno.bench("baseline: HMAC-SHA256 of 57 bytes (nonce tag)", { group: "baseline" }, async () => {
  await crypto.subtle.sign("HMAC", hmacKey, nonceBody);
});
