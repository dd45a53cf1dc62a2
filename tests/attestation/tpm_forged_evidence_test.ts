/**
 * What `akTrust: {"trustAnyKey": true}` really accepts: `qemu-vtpm` evidence
 * forged entirely in software, with a WebCrypto P-256 key that declares the
 * TPM attributes (fixedTpm, restricted, sign) itself and signs a self-made
 * quote (`tests/support/software_tpm.ts`). No TPM is involved anywhere in this file.
 */
import assert from "node:assert/strict";
import { AttestationError } from "../../src/attestation/attestation.ts";
import { parseAttestationConfig } from "../../src/attestation/config.ts";
import { createValidator } from "../../src/attestation/registry.ts";
import { QEMU_VTPM_VARIANT, TRUST_ANY_KEY_WARNING } from "../../src/attestation/tpm/validator.ts";
import { createLogger, type Logger } from "../../src/log/logger.ts";
import { TpmAlg } from "../../src/attestation/tpm/structures.ts";
import { SoftwareTpmIssuer } from "../support/software_tpm.ts";

/** The forged PCR values: whatever the verifier wants to see. */
const CLAIMED_PCRS = new Map(
  Array.from({ length: 16 }, (_, index) => [index, new Uint8Array(32).fill(index === 15 ? 0 : 0xa0 + index)]),
);

/** A qemu-vtpm document made with a fresh software key, bound to `reportData`, claiming {@linkcode CLAIMED_PCRS}. */
async function forgeDocument(reportData: Uint8Array): Promise<Uint8Array> {
  return await (await SoftwareTpmIssuer.create({ pcrs: CLAIMED_PCRS })).issue(reportData);
}

function capturingLogger(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  return { logger: createLogger({ level: "debug", write: (line) => lines.push(JSON.parse(line)) }), lines };
}

/** A validator built from config JSON as the join service builds it, enforcing every claimed PCR. */
function validatorFromConfig(akTrust: unknown, logger: Logger) {
  const measurements = Object.fromEntries(
    [...CLAIMED_PCRS].map(([index, value]) => [index, { expected: value.toHex(), warnOnly: false }]),
  );
  const config = parseAttestationConfig(
    JSON.stringify({ variant: QEMU_VTPM_VARIANT, measurements, akTrust }),
    { variant: QEMU_VTPM_VARIANT },
  );
  return createValidator(config, { logger });
}

Deno.test("forged software evidence is untrusted-key under an AK allow-list", async () => {
  const reportData = crypto.getRandomValues(new Uint8Array(32));
  const document = await forgeDocument(reportData);
  const { logger, lines } = capturingLogger();
  const validator = validatorFromConfig({ allowedKeyDigests: ["3d".repeat(32)] }, logger);
  await assert.rejects(
    validator.validate(document, reportData),
    (error: unknown) =>
      error instanceof AttestationError && error.reason === "untrusted-key" &&
      error.message.includes("is not in the allow-list"),
  );
  assert.deepEqual(lines, [], "an allow-list logs no insecurity warning");
});

Deno.test("forged software evidence passes once the operator lists its key (what the load benchmark relies on)", async () => {
  const issuer = await SoftwareTpmIssuer.create({ pcrs: CLAIMED_PCRS });
  const { logger, lines } = capturingLogger();
  const validator = validatorFromConfig({ allowedKeyDigests: [issuer.keyDigest] }, logger);
  const reportData = crypto.getRandomValues(new Uint8Array(32));
  const verification = await validator.validate(await issuer.issue(reportData), reportData);
  assert.equal(verification.keyDigest, issuer.keyDigest);
  assert.deepEqual(verification.warnings, []);
  await assert.rejects(
    validator.validate(await issuer.issue(reportData), crypto.getRandomValues(new Uint8Array(32))),
    (error: unknown) => error instanceof AttestationError && error.reason === "report-data-mismatch",
  );
  assert.deepEqual(lines, []);
});

Deno.test("forged software evidence passes under trustAnyKey, and every verification warns that it can", async () => {
  const { logger, lines } = capturingLogger();
  const validator = validatorFromConfig({ trustAnyKey: true }, logger);
  const atConstruction = lines.filter((line) => line.level === "warn" && line.msg === TRUST_ANY_KEY_WARNING);
  assert.equal(atConstruction.length, 1);
  assert.match(
    TRUST_ANY_KEY_WARNING,
    /^INSECURE: trustAnyKey accepts evidence signed by any key, including software keys; .*without a TPM/,
  );

  for (let i = 0; i < 3; i++) {
    const reportData = crypto.getRandomValues(new Uint8Array(32));
    const verification = await validator.validate(await forgeDocument(reportData), reportData);
    assert.deepEqual(verification.warnings, []);
    assert.equal(verification.measurements[4], "a4".repeat(32));
  }
  const perVerification = lines.filter((line) =>
    line.level === "warn" && line.msg === TRUST_ANY_KEY_WARNING && line.event === "verification"
  );
  assert.equal(perVerification.length, 3);
  assert.ok(perVerification.every((line) => /^[0-9a-f]{64}$/.test(String(line.keyDigest))));
  assert.equal(
    new Set(perVerification.map((line) => line.keyDigest)).size,
    3,
    "three different software keys",
  );
});

Deno.test("forged software evidence with a bad signature is rejected under trustAnyKey, without a per-verification warning", async () => {
  const { logger, lines } = capturingLogger();
  const validator = validatorFromConfig({ trustAnyKey: true }, logger);
  const reportData = crypto.getRandomValues(new Uint8Array(32));
  // One quote byte (the last of pcrDigest) changed after signing: well-formed, but the signature no longer verifies.
  const json = JSON.parse(new TextDecoder().decode(await forgeDocument(reportData)));
  const quote = Uint8Array.fromBase64(json.quote);
  quote[quote.length - 1] ^= 0x01;
  json.quote = quote.toBase64();
  await assert.rejects(
    validator.validate(new TextEncoder().encode(JSON.stringify(json)), reportData),
    (error: unknown) => error instanceof AttestationError && error.reason === "signature-invalid",
  );
  const insecure = lines.filter((line) => line.level === "warn" && line.msg === TRUST_ANY_KEY_WARNING);
  assert.deepEqual(insecure.map((line) => line.event), [undefined], "only the warning at construction");
});

/** TPM_ALG_SHA1: a bank a real TPM has too, which this variant's quotes never select. */
const TPM_ALG_SHA1 = 0x0004;

Deno.test("a quote must select exactly the SHA-256 bank: another bank, or two, is refused", async (t) => {
  const rows = [
    { name: "the SHA-1 bank", banks: [TPM_ALG_SHA1], named: "0x0004" },
    { name: "SHA-256 and SHA-1", banks: [TpmAlg.SHA256, TPM_ALG_SHA1], named: "0x000b, 0x0004" },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const issuer = await SoftwareTpmIssuer.create({ pcrs: CLAIMED_PCRS, banks: row.banks });
      const validator = validatorFromConfig(
        { allowedKeyDigests: [issuer.keyDigest] },
        capturingLogger().logger,
      );
      const reportData = crypto.getRandomValues(new Uint8Array(32));
      await assert.rejects(
        validator.validate(await issuer.issue(reportData), reportData),
        (error: unknown) => {
          assert.ok(error instanceof AttestationError, String(error));
          assert.equal(error.reason, "pcr-digest-mismatch");
          assert.equal(
            error.message,
            `quote selects PCRs of bank(s) ${row.named}, want exactly the SHA-256 bank (0x000b)`,
          );
          return true;
        },
      );
    });
  }
});

Deno.test("an enforced measurement of a PCR the document does not report is a mismatch, never a match", async () => {
  // A quote over PCRs 0-7 only; the config enforces PCR 9.
  const reported = new Map([...CLAIMED_PCRS].filter(([index]) => index < 8));
  const issuer = await SoftwareTpmIssuer.create({ pcrs: reported });
  const config = parseAttestationConfig(
    JSON.stringify({
      variant: QEMU_VTPM_VARIANT,
      measurements: { 9: { expected: "00".repeat(32), warnOnly: false } },
      akTrust: { allowedKeyDigests: [issuer.keyDigest] },
    }),
    { variant: QEMU_VTPM_VARIANT },
  );
  const validator = createValidator(config, { logger: capturingLogger().logger });
  const reportData = crypto.getRandomValues(new Uint8Array(32));
  await assert.rejects(validator.validate(await issuer.issue(reportData), reportData), (error: unknown) => {
    assert.ok(error instanceof AttestationError, String(error));
    assert.equal(error.reason, "measurement-mismatch");
    assert.deepEqual(error.mismatches, [{
      index: 9,
      expected: "00".repeat(32),
      actual: null,
      enforced: true,
    }]);
    return true;
  });
});
