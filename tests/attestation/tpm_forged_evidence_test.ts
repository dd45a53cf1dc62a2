/**
 * What `akTrust: {"trustAnyKey": true}` really accepts: `qemu-vtpm` evidence
 * forged entirely in software, with a WebCrypto P-256 key that declares the
 * TPM attributes (fixedTpm, restricted, sign) itself and signs a self-made
 * quote. No TPM is involved anywhere in this file.
 */
import assert from "node:assert/strict";
import { AttestationError } from "../../src/attestation/attestation.ts";
import { parseAttestationConfig } from "../../src/attestation/config.ts";
import { createValidator } from "../../src/attestation/registry.ts";
import { encodeDocument, pcrDigest } from "../../src/attestation/tpm/document.ts";
import {
  ObjectAttribute,
  TPM_ECC_NIST_P256,
  TPM_GENERATED_VALUE,
  TPM_ST_ATTEST_QUOTE,
  TpmAlg,
} from "../../src/attestation/tpm/structures.ts";
import { QEMU_VTPM_VARIANT, TRUST_ANY_KEY_WARNING } from "../../src/attestation/tpm/validator.ts";
import { createLogger, type Logger } from "../../src/log/logger.ts";

/** Big-endian TPM marshalling, just enough for the three structures of a quote. */
class Marshaller {
  readonly #bytes: number[] = [];
  u8(value: number): this {
    this.#bytes.push(value & 0xff);
    return this;
  }
  u16(value: number): this {
    return this.u8(value >>> 8).u8(value);
  }
  u32(value: number): this {
    return this.u16(value >>> 16).u16(value);
  }
  u64(value: number): this {
    return this.u32(Math.floor(value / 2 ** 32)).u32(value >>> 0);
  }
  raw(bytes: Uint8Array): this {
    this.#bytes.push(...bytes);
    return this;
  }
  /** A `TPM2B_*`: u16 size, then the bytes. */
  sized(bytes: Uint8Array): this {
    return this.u16(bytes.length).raw(bytes);
  }
  done(): Uint8Array<ArrayBuffer> {
    return Uint8Array.from(this.#bytes);
  }
}

/** The forged PCR values: whatever the verifier wants to see. */
const CLAIMED_PCRS = new Map(
  Array.from({ length: 16 }, (_, index) => [index, new Uint8Array(32).fill(index === 15 ? 0 : 0xa0 + index)]),
);

/** A qemu-vtpm document made with a software key, bound to `reportData`, claiming {@linkcode CLAIMED_PCRS}. */
async function forgeDocument(reportData: Uint8Array): Promise<Uint8Array> {
  const keys = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign"]);
  const jwk = await crypto.subtle.exportKey("jwk", keys.publicKey);
  const coordinate = (value: string | undefined) => Uint8Array.fromBase64(value!, { alphabet: "base64url" });

  // TPMT_PUBLIC of an ECC key whose attributes claim it is a restricted signing key fixed to a TPM.
  const tpmtPublic = new Marshaller()
    .u16(TpmAlg.ECC)
    .u16(TpmAlg.SHA256) // nameAlg
    .u32(ObjectAttribute.fixedTpm | ObjectAttribute.restricted | ObjectAttribute.sign)
    .sized(new Uint8Array()) // authPolicy
    .u16(TpmAlg.NULL) // symmetric
    .u16(TpmAlg.ECDSA).u16(TpmAlg.SHA256) // scheme
    .u16(TPM_ECC_NIST_P256)
    .u16(TpmAlg.NULL) // kdf
    .sized(coordinate(jwk.x))
    .sized(coordinate(jwk.y))
    .done();

  // TPMS_ATTEST: the magic a real TPM would only put in front of its own quotes, the
  // verifier's report data, and a digest over the claimed PCRs of the SHA-256 bank.
  const quote = new Marshaller()
    .u32(TPM_GENERATED_VALUE)
    .u16(TPM_ST_ATTEST_QUOTE)
    .sized(new Uint8Array(34)) // qualifiedSigner
    .sized(reportData) // extraData
    .u64(1234).u32(1).u32(0).u8(1) // clockInfo
    .u64(0x20240101) // firmwareVersion
    .u32(1).u16(TpmAlg.SHA256).u8(3).raw(new Uint8Array([0xff, 0xff, 0x00])) // PCRs 0–15
    .sized(await pcrDigest(CLAIMED_PCRS))
    .done();

  const p1363 = new Uint8Array(
    await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, keys.privateKey, quote),
  );
  const signature = new Marshaller()
    .u16(TpmAlg.ECDSA)
    .u16(TpmAlg.SHA256)
    .sized(p1363.subarray(0, 32))
    .sized(p1363.subarray(32))
    .done();

  return encodeDocument({
    variant: QEMU_VTPM_VARIANT,
    akPublic: new Marshaller().sized(tpmtPublic).done(),
    quote,
    signature,
    pcrs: CLAIMED_PCRS,
  });
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
