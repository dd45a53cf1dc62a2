import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { AttestationError } from "../../src/attestation/attestation.ts";
import { connectCodeFor, ExchangeError, toConnectError } from "../../src/atls/errors.ts";

Deno.test("nonce and attestation failures are PermissionDenied, malformed input InvalidArgument", () => {
  for (const reason of ["nonce-bad-mac", "nonce-expired", "nonce-replayed", "variant-mismatch"] as const) {
    assert.equal(toConnectError(new ExchangeError(reason, "x")).code, Code.PermissionDenied, reason);
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
  const connect = toConnectError(ExchangeError.fromAttestation(err));
  assert.equal(connect.code, Code.PermissionDenied);
  assert.match(
    connect.rawMessage,
    /^attested exchange rejected \(measurement-mismatch\): measurements differ: PCR\[4\]/,
  );
  assert.match(
    connect.rawMessage,
    new RegExp(`PCR\\[4\\] expected ${"aa".repeat(32)}, got ${"bb".repeat(32)} \\(enforced\\)`),
  );
  assert.match(
    connect.rawMessage,
    new RegExp(`PCR\\[9\\] expected ${"cc".repeat(32)}, got nothing \\(enforced\\)`),
  );
  assert.match(connect.rawMessage, /PCR\[12\] expected d+, got e+ \(warn-only\)/);
  // An AttestationError converts the same way without wrapping first.
  assert.equal(toConnectError(err).rawMessage, connect.rawMessage);
});

Deno.test("other reasons keep the validator's message", () => {
  const err = new AttestationError("signature-invalid", "quote signature does not verify under key 1a2b");
  assert.equal(
    toConnectError(err).rawMessage,
    "attested exchange rejected (signature-invalid): quote signature does not verify under key 1a2b",
  );
});

Deno.test("unknown errors become Internal without their message", () => {
  const connect = toConnectError(new Error("open /var/secret/master-key: permission denied"));
  assert.equal(connect.code, Code.Internal);
  assert.equal(connect.rawMessage, "internal error");
  assert.equal(toConnectError("a string").code, Code.Internal);
});

Deno.test("Connect errors pass through; aborts map to Canceled and DeadlineExceeded", () => {
  const original = new ConnectError("busy", Code.ResourceExhausted);
  assert.equal(toConnectError(original), original);
  assert.equal(toConnectError(new DOMException("aborted", "AbortError")).code, Code.Canceled);
  assert.equal(toConnectError(new DOMException("timed out", "TimeoutError")).code, Code.DeadlineExceeded);
});

Deno.test("an attestation rejection's key digest is carried into the exchange error", () => {
  const keyDigest = "3d".repeat(32);
  const mismatch = { index: 4, expected: "aa".repeat(32), actual: "bb".repeat(32), enforced: true };
  const rejected = ExchangeError.fromAttestation(
    new AttestationError("measurement-mismatch", "1 measurement differs", [mismatch], { keyDigest }),
  );
  assert.equal(rejected.reason, "measurement-mismatch");
  assert.equal(rejected.keyDigest, keyDigest);
  assert.deepEqual(rejected.mismatches, [mismatch]);
  // The digest names a public key: it may appear in audit lines, but the client's message is unchanged.
  assert.ok(!toConnectError(rejected).rawMessage.includes(keyDigest));

  const malformed = ExchangeError.fromAttestation(new AttestationError("malformed", "not JSON"));
  assert.equal(malformed.keyDigest, undefined);
  assert.equal(new ExchangeError("nonce-expired", "expired").keyDigest, undefined);
});
