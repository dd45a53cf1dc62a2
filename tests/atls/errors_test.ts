import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";
import { AttestationError } from "../../src/attestation/attestation.ts";
import { connectCodeFor, ExchangeError, exchangeRejection } from "../../src/atls/errors.ts";
import { toConnectError } from "../../src/rpc/rejection.ts";

Deno.test("nonce and attestation failures are PermissionDenied, malformed input InvalidArgument", () => {
  for (const reason of ["nonce-bad-mac", "nonce-expired", "nonce-replayed", "variant-mismatch"] as const) {
    assert.equal(exchangeRejection(new ExchangeError(reason, "x")).code, Code.PermissionDenied, reason);
  }
  for (const reason of ["nonce-malformed", "evidence-missing", "evidence-malformed", "malformed"] as const) {
    assert.equal(connectCodeFor(reason), Code.InvalidArgument, reason);
  }
  assert.equal(connectCodeFor("nonce-capacity"), Code.ResourceExhausted);
  assert.equal(connectCodeFor("unavailable"), Code.Unavailable);
  assert.equal(connectCodeFor("signature-invalid"), Code.PermissionDenied);
});

Deno.test("the message names the reason and every measurement mismatch", () => {
  const err = new AttestationError("measurement-mismatch", "2 measurements differ", [
    { index: 4, expected: "aa".repeat(32), actual: "bb".repeat(32), enforced: true },
    { index: 9, expected: "cc".repeat(32), actual: null, enforced: true },
    { index: 12, expected: "dd".repeat(32), actual: "ee".repeat(32), enforced: false },
  ]);
  const rejection = exchangeRejection(ExchangeError.fromAttestation(err));
  assert.equal(rejection.code, Code.PermissionDenied);
  assert.equal(rejection.reason, "measurement-mismatch");
  assert.match(
    rejection.message,
    /^attested exchange rejected \(measurement-mismatch\): measurements differ: PCR\[4\]/,
  );
  assert.match(
    rejection.message,
    new RegExp(`PCR\\[4\\] expected ${"aa".repeat(32)}, got ${"bb".repeat(32)} \\(enforced\\)`),
  );
  assert.match(
    rejection.message,
    new RegExp(`PCR\\[9\\] expected ${"cc".repeat(32)}, got nothing \\(enforced\\)`),
  );
  assert.match(rejection.message, /PCR\[12\] expected d+, got e+ \(warn-only\)/);
  // An AttestationError converts the same way without wrapping first.
  assert.equal(exchangeRejection(err).message, rejection.message);
});

Deno.test("other reasons keep the validator's message", () => {
  const err = new AttestationError("signature-invalid", "quote signature does not verify under key 1a2b");
  assert.equal(
    exchangeRejection(err).message,
    "attested exchange rejected (signature-invalid): quote signature does not verify under key 1a2b",
  );
});

Deno.test("an attestation rejection's key digest is carried to the rejection, not to the client", () => {
  const keyDigest = "3d".repeat(32);
  const mismatch = { index: 4, expected: "aa".repeat(32), actual: "bb".repeat(32), enforced: true };
  const rejected = ExchangeError.fromAttestation(
    new AttestationError("measurement-mismatch", "1 measurement differs", [mismatch], { keyDigest }),
  );
  assert.equal(rejected.reason, "measurement-mismatch");
  assert.equal(rejected.keyDigest, keyDigest);
  assert.deepEqual(rejected.mismatches, [mismatch]);
  // The digest names a public key: it may appear in audit lines, but the client's message is unchanged.
  const rejection = exchangeRejection(rejected);
  assert.equal(rejection.keyDigest, keyDigest);
  assert.ok(!toConnectError(rejection).rawMessage.includes(keyDigest));

  const malformed = ExchangeError.fromAttestation(new AttestationError("malformed", "not JSON"));
  assert.equal(malformed.keyDigest, undefined);
  assert.equal(new ExchangeError("nonce-expired", "expired").keyDigest, undefined);
});
