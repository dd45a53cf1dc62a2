/**
 * Cost of verifying a `qemu-vtpm` quote, next to the bare WebCrypto signature
 * check it contains, from the checked-in swtpm fixtures. Run with
 * `deno bench -P tests/bench/tpm_bench.ts`; the raw verify is each group's
 * baseline, so Deno prints the validator's overhead as a ratio.
 */
import type { Measurement } from "../../src/attestation/attestation.ts";
import { parsePublic, parseSignature } from "../../src/attestation/tpm/structures.ts";
import { TpmValidator } from "../../src/attestation/tpm/validator.ts";
import { silentLogger } from "../../src/log/logger.ts";
import eccFixture from "../fixtures/tpm/ecc.json" with { type: "json" };
import rsaFixture from "../fixtures/tpm/rsa.json" with { type: "json" };

type Fixture = typeof eccFixture;

/** The fixture's key, signature and signed bytes, ready for `crypto.subtle.verify`. */
async function rawInputs(fixture: Fixture) {
  const key = parsePublic(Uint8Array.fromBase64(fixture.document.akPublic)).key;
  const signature = parseSignature(Uint8Array.fromBase64(fixture.document.signature));
  const signed = Uint8Array.fromBase64(fixture.document.quote);
  const b64url = (bytes: Uint8Array) => bytes.toBase64({ alphabet: "base64url", omitPadding: true });
  if (key.type === "ecc" && signature.algorithm === "ecdsa") {
    const jwk = { kty: "EC", crv: "P-256", x: b64url(key.x), y: b64url(key.y) };
    const publicKey = await crypto.subtle.importKey(
      "jwk",
      jwk,
      { name: "ECDSA", namedCurve: "P-256" },
      false,
      [
        "verify",
      ],
    );
    const p1363 = new Uint8Array([...signature.r, ...signature.s]);
    return { algorithm: { name: "ECDSA", hash: "SHA-256" }, publicKey, signatureBytes: p1363, signed };
  }
  if (key.type === "rsa" && signature.algorithm === "rsassa") {
    const jwk = { kty: "RSA", n: b64url(key.modulus), e: "AQAB" };
    const algorithm = { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" };
    const publicKey = await crypto.subtle.importKey("jwk", jwk, algorithm, false, ["verify"]);
    return { algorithm, publicKey, signatureBytes: signature.signature, signed };
  }
  throw new Error("fixture key and signature do not match");
}

for (const [group, fixture] of [["ecdsa", eccFixture], ["rsassa", rsaFixture]] as const) {
  const raw = await rawInputs(fixture);
  const document = new TextEncoder().encode(JSON.stringify(fixture.document));
  const reportData = Uint8Array.fromHex(fixture.reportData);
  const measurements = new Map<number, Measurement>(
    Object.entries(fixture.pcrs).map(([index, hex]) => [Number(index), {
      expected: Uint8Array.fromHex(hex),
      warnOnly: false,
    }]),
  );
  const validator = new TpmValidator({
    measurements,
    akTrust: { kind: "allow-list", keyDigests: new Set([fixture.akDigest]) },
    logger: silentLogger,
  });
  if (!await crypto.subtle.verify(raw.algorithm, raw.publicKey, raw.signatureBytes, raw.signed)) {
    throw new Error(`${group} fixture signature does not verify`);
  }
  await validator.validate(document, reportData);

  Deno.bench(`${group}: crypto.subtle.verify of the quote signature`, { group, baseline: true }, async () => {
    await crypto.subtle.verify(raw.algorithm, raw.publicKey, raw.signatureBytes, raw.signed);
  });
  Deno.bench(`${group}: TpmValidator.validate (parse, key import, verify, PCRs)`, { group }, async () => {
    await validator.validate(document, reportData);
  });
}
