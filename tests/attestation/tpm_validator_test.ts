/**
 * Unit tests of the `qemu-vtpm` validator from checked-in swtpm quotes
 * (tests/fixtures/tpm, made by scripts/make-tpm-fixtures.ts); no TPM needed.
 */
import assert from "node:assert/strict";
import {
  type AkTrust,
  AttestationError,
  type AttestationFailure,
  MAX_EVIDENCE_DOCUMENT_BYTES,
  type Measurement,
} from "../../src/attestation/attestation.ts";
import {
  akDigest,
  QEMU_VTPM_VARIANT,
  TpmValidator,
  TRUST_ANY_KEY_WARNING,
} from "../../src/attestation/tpm/validator.ts";
import { createLogger, type Logger, silentLogger } from "../../src/log/logger.ts";
import eccFixture from "../fixtures/tpm/ecc.json" with { type: "json" };
import rsaFixture from "../fixtures/tpm/rsa.json" with { type: "json" };

type Fixture = typeof eccFixture;
type DocumentJson = Record<string, unknown>;

const FIXTURES: [string, Fixture][] = [["ecdsa", eccFixture], ["rsassa", rsaFixture]];
const ANY_KEY: AkTrust = { kind: "any" };

function fromHex(hex: string): Uint8Array<ArrayBuffer> {
  return Uint8Array.fromHex(hex);
}

/** The fixture's document as JSON, for editing. */
function documentJson(fixture: Fixture): DocumentJson {
  return structuredClone(fixture.document) as DocumentJson;
}

function encode(json: unknown): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(json));
}

/** The fixture's document with one byte of a base64 field XOR-ed with `mask`. */
function withFlippedByte(fixture: Fixture, field: string, offset: number, mask = 0x01): Uint8Array {
  const json = documentJson(fixture);
  const bytes = Uint8Array.fromBase64(json[field] as string);
  bytes[offset] ^= mask;
  json[field] = bytes.toBase64();
  return encode(json);
}

/** The fixture's document with a base64 field replaced by `bytes`. */
function withField(fixture: Fixture, field: string, bytes: Uint8Array): Uint8Array {
  return encode({ ...documentJson(fixture), [field]: bytes.toBase64() });
}

function fieldBytes(fixture: Fixture, field: string): Uint8Array {
  return Uint8Array.fromBase64(documentJson(fixture)[field] as string);
}

/** Every fixture PCR, enforced. */
function allPcrsEnforced(fixture: Fixture): Map<number, Measurement> {
  return new Map(
    Object.entries(fixture.pcrs).map((
      [index, hex],
    ) => [Number(index), { expected: fromHex(hex), warnOnly: false }]),
  );
}

function validator(
  options: { measurements?: Map<number, Measurement>; akTrust?: AkTrust; logger?: Logger } = {},
): TpmValidator {
  return new TpmValidator({
    measurements: options.measurements ?? new Map(),
    akTrust: options.akTrust ?? ANY_KEY,
    logger: options.logger ?? silentLogger,
  });
}

/** Asserts that `promise` rejects with an AttestationError of `reason` whose message includes `fragment`. */
async function assertRejected(
  promise: Promise<unknown>,
  reason: AttestationFailure,
  fragment = "",
): Promise<AttestationError> {
  let caught: unknown;
  try {
    await promise;
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof AttestationError, `want AttestationError(${reason}), got ${String(caught)}`);
  assert.equal(caught.reason, reason, caught.message);
  assert.ok(
    caught.message.includes(fragment),
    `message ${JSON.stringify(caught.message)} lacks "${fragment}"`,
  );
  return caught;
}

function capturingLogger(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  return { logger: createLogger({ level: "debug", write: (line) => lines.push(JSON.parse(line)) }), lines };
}

for (const [scheme, fixture] of FIXTURES) {
  const document = encode(fixture.document);
  const reportData = fromHex(fixture.reportData);

  Deno.test(`tpm validator: ${scheme} quote from swtpm verifies against allow-list and all PCRs`, async () => {
    const result = await validator({
      measurements: allPcrsEnforced(fixture),
      akTrust: { kind: "allow-list", keyDigests: new Set([fixture.akDigest]) },
    }).validate(document, reportData);
    assert.equal(result.variant, QEMU_VTPM_VARIANT);
    assert.deepEqual(result.warnings, []);
    assert.equal(result.keyDigest, fixture.akDigest);
    assert.deepEqual(result.measurements, Object.fromEntries(Object.entries(fixture.pcrs)));
  });

  Deno.test(`tpm validator: ${scheme} akDigest is SHA-256 of TPMT_PUBLIC`, async () => {
    const tpmtPublic = fieldBytes(fixture, "akPublic").slice(2);
    const expected = new Uint8Array(await crypto.subtle.digest("SHA-256", tpmtPublic)).toHex();
    assert.equal(await akDigest(document), expected);
    assert.equal(fixture.akDigest, expected);
  });

  Deno.test(`tpm validator: ${scheme} flipped quote bytes are signature-invalid`, async () => {
    const quoteLength = fieldBytes(fixture, "quote").length;
    // Inside qualifiedSigner, extraData, clockInfo, firmwareVersion and pcrDigest.
    for (const offset of [10, 50, 80, 95, quoteLength - 1]) {
      await assertRejected(
        validator().validate(withFlippedByte(fixture, "quote", offset), reportData),
        "signature-invalid",
        "does not verify",
      );
    }
  });

  Deno.test(`tpm validator: ${scheme} flipped signature bytes are signature-invalid`, async () => {
    const signatureLength = fieldBytes(fixture, "signature").length;
    for (const offset of [8, signatureLength - 1]) {
      await assertRejected(
        validator().validate(withFlippedByte(fixture, "signature", offset), reportData),
        "signature-invalid",
      );
    }
  });

  Deno.test(`tpm validator: ${scheme} changed PCR value is pcr-digest-mismatch`, async () => {
    const json = documentJson(fixture);
    const pcrs = json.pcrs as Record<string, string>;
    pcrs["4"] = (pcrs["4"][0] === "0" ? "1" : "0") + pcrs["4"].slice(1);
    await assertRejected(
      validator().validate(encode(json), reportData),
      "pcr-digest-mismatch",
      "do not match the quote's PCR digest",
    );
  });

  Deno.test(`tpm validator: ${scheme} PCRs missing or added are pcr-digest-mismatch`, async () => {
    const missing = documentJson(fixture);
    delete (missing.pcrs as Record<string, string>)["15"];
    await assertRejected(
      validator().validate(encode(missing), reportData),
      "pcr-digest-mismatch",
      "selects PCRs",
    );
    const added = documentJson(fixture);
    (added.pcrs as Record<string, string>)["16"] = "00".repeat(32);
    await assertRejected(
      validator().validate(encode(added), reportData),
      "pcr-digest-mismatch",
      "selects PCRs",
    );
  });

  Deno.test(`tpm validator: ${scheme} other report data is report-data-mismatch`, async () => {
    const other = reportData.slice();
    other[31] ^= 0x80;
    await assertRejected(validator().validate(document, other), "report-data-mismatch");
    await assertRejected(validator().validate(document, new Uint8Array(32)), "report-data-mismatch");
  });

  Deno.test(`tpm validator: ${scheme} AK outside the allow-list is untrusted-key`, async () => {
    const otherDigest = FIXTURES.map(([, f]) => f.akDigest).find((digest) => digest !== fixture.akDigest)!;
    await assertRejected(
      validator({ akTrust: { kind: "allow-list", keyDigests: new Set([otherDigest]) } }).validate(
        document,
        reportData,
      ),
      "untrusted-key",
      `${fixture.akDigest} is not in the allow-list`,
    );
    await assertRejected(
      validator({ akTrust: { kind: "allow-list", keyDigests: new Set() } }).validate(document, reportData),
      "untrusted-key",
    );
  });

  Deno.test(`tpm validator: ${scheme} AK that is not restricted is untrusted-key even when any key is trusted`, async () => {
    // objectAttributes start at offset 6 of TPM2B_PUBLIC; byte 7 holds sign (0x04) and restricted (0x01).
    await assertRejected(
      validator().validate(withFlippedByte(fixture, "akPublic", 7, 0x01), reportData),
      "untrusted-key",
      "not a restricted signing key",
    );
    await assertRejected(
      validator().validate(withFlippedByte(fixture, "akPublic", 7, 0x04), reportData),
      "untrusted-key",
      "not a restricted signing key",
    );
  });

  Deno.test(`tpm validator: ${scheme} signature hash other than SHA-256 is signature-invalid`, async () => {
    // TPMT_SIGNATURE hash at offset 2..3: 0x000b → 0x000c (SHA-384).
    await assertRejected(
      validator().validate(withFlippedByte(fixture, "signature", 3, 0x07), reportData),
      "signature-invalid",
      "want SHA-256",
    );
  });

  Deno.test(`tpm validator: ${scheme} enforced mismatches on several PCRs are all listed`, async () => {
    const measurements = allPcrsEnforced(fixture);
    const wrong = fromHex("12".repeat(32));
    measurements.set(4, { expected: wrong, warnOnly: false });
    measurements.set(9, { expected: wrong, warnOnly: false });
    measurements.set(12, { expected: wrong, warnOnly: true });
    measurements.set(20, { expected: wrong, warnOnly: false });
    const error = await assertRejected(
      validator({ measurements }).validate(document, reportData),
      "measurement-mismatch",
      "4 measurement(s) differ",
    );
    assert.deepEqual(error.mismatches, [
      { index: 4, expected: wrong.toHex(), actual: fixture.pcrs["4"], enforced: true },
      { index: 9, expected: wrong.toHex(), actual: fixture.pcrs["9"], enforced: true },
      { index: 12, expected: wrong.toHex(), actual: fixture.pcrs["12"], enforced: false },
      { index: 20, expected: wrong.toHex(), actual: null, enforced: true },
    ]);
    for (const index of [4, 9, 12, 20]) {
      assert.ok(error.message.includes(`PCR ${index} expected`), error.message);
    }
    assert.ok(error.message.includes("got nothing (PCR not reported)"), error.message);
  });

  Deno.test(`tpm validator: ${scheme} rejections after the AK parsed carry its digest, malformed ones none`, async () => {
    const measurements = allPcrsEnforced(fixture);
    measurements.set(4, { expected: fromHex("12".repeat(32)), warnOnly: false });
    const changedPcr = documentJson(fixture);
    const pcrs = changedPcr.pcrs as Record<string, string>;
    pcrs["4"] = (pcrs["4"][0] === "0" ? "1" : "0") + pcrs["4"].slice(1);
    const cases: [AttestationFailure, () => Promise<unknown>][] = [
      ["measurement-mismatch", () => validator({ measurements }).validate(document, reportData)],
      [
        "untrusted-key",
        () =>
          validator({ akTrust: { kind: "allow-list", keyDigests: new Set() } }).validate(
            document,
            reportData,
          ),
      ],
      ["signature-invalid", () => validator().validate(withFlippedByte(fixture, "quote", 50), reportData)],
      ["report-data-mismatch", () => validator().validate(document, new Uint8Array(32))],
      ["pcr-digest-mismatch", () => validator().validate(encode(changedPcr), reportData)],
    ];
    for (const [reason, validate] of cases) {
      const error = await assertRejected(validate(), reason);
      assert.equal(error.keyDigest, fixture.akDigest, reason);
    }
    // An AK that is not a restricted signing key: its own digest, not the fixture's.
    const unrestricted = withFlippedByte(fixture, "akPublic", 7, 0x01);
    const error = await assertRejected(validator().validate(unrestricted, reportData), "untrusted-key");
    assert.equal(error.keyDigest, await akDigest(unrestricted));
    assert.notEqual(error.keyDigest, fixture.akDigest);

    const truncated = await assertRejected(
      validator().validate(document.subarray(0, document.length - 1), reportData),
      "malformed",
    );
    assert.equal(truncated.keyDigest, undefined);
  });

  Deno.test(`tpm validator: ${scheme} warn-only mismatches pass with warnings and are logged`, async () => {
    const { logger, lines } = capturingLogger();
    const measurements = allPcrsEnforced(fixture);
    const wrong = fromHex("ab".repeat(32));
    measurements.set(15, { expected: wrong, warnOnly: true });
    measurements.set(23, { expected: wrong, warnOnly: true });
    const result = await validator({ measurements, logger }).validate(document, reportData);
    assert.deepEqual(result.warnings, [
      { index: 15, expected: wrong.toHex(), actual: fixture.pcrs["15"], enforced: false },
      { index: 23, expected: wrong.toHex(), actual: null, enforced: false },
    ]);
    const warned = lines.filter((line) => line.level === "warn" && line.index !== undefined).map((line) =>
      line.index
    );
    assert.deepEqual(warned, [15, 23]);
  });

  Deno.test(`tpm validator: ${scheme} truncated or extended binary fields are malformed`, async () => {
    for (const field of ["akPublic", "quote", "signature"]) {
      const bytes = fieldBytes(fixture, field);
      for (let length = 0; length < bytes.length; length++) {
        await assertRejected(
          validator().validate(withField(fixture, field, bytes.subarray(0, length)), reportData),
          "malformed",
          `"${field}"`,
        );
      }
      const extended = new Uint8Array([...bytes, 0]);
      await assertRejected(
        validator().validate(withField(fixture, field, extended), reportData),
        "malformed",
        "trailing byte",
      );
    }
  });

  Deno.test(`tpm validator: ${scheme} every truncation of the document is malformed`, async () => {
    for (let length = 0; length < document.length; length++) {
      await assertRejected(validator().validate(document.subarray(0, length), reportData), "malformed");
    }
  });
}

Deno.test("tpm validator: any-key trust is logged as insecure at construction and on each verification relying on it", async () => {
  const any = capturingLogger();
  const anyKey = validator({ logger: any.logger });
  const insecure = () =>
    any.lines.filter((line) => line.level === "warn" && line.msg === TRUST_ANY_KEY_WARNING);
  assert.equal(insecure().length, 1);
  assert.ok(TRUST_ANY_KEY_WARNING.startsWith("INSECURE: trustAnyKey accepts evidence signed by any key"));
  // Evidence whose signature or report data does not check out is rejected without relying on the trust.
  await assertRejected(
    anyKey.validate(withFlippedByte(eccFixture, "signature", 8), fromHex(eccFixture.reportData)),
    "signature-invalid",
  );
  await assertRejected(
    anyKey.validate(encode(rsaFixture.document), new Uint8Array(32)),
    "report-data-mismatch",
  );
  assert.equal(insecure().length, 1, "no per-verification warning for rejected evidence");
  await anyKey.validate(encode(eccFixture.document), fromHex(eccFixture.reportData));
  await anyKey.validate(encode(rsaFixture.document), fromHex(rsaFixture.reportData));
  assert.deepEqual(insecure().map((line) => line.keyDigest), [
    undefined,
    eccFixture.akDigest,
    rsaFixture.akDigest,
  ]);

  const allowList = capturingLogger();
  const listed = validator({
    logger: allowList.logger,
    akTrust: { kind: "allow-list", keyDigests: new Set([eccFixture.akDigest]) },
  });
  await listed.validate(encode(eccFixture.document), fromHex(eccFixture.reportData));
  assert.deepEqual(allowList.lines, []);
});

Deno.test("tpm validator: signature of the other algorithm is signature-invalid", async () => {
  const mixed = withField(eccFixture, "signature", fieldBytes(rsaFixture, "signature"));
  await assertRejected(
    validator().validate(mixed, fromHex(eccFixture.reportData)),
    "signature-invalid",
    "rsassa but the attestation key is ecc",
  );
});

Deno.test("tpm validator: ECC key off the curve is malformed", async () => {
  // x starts at offset 24 of the ECC TPM2B_PUBLIC.
  await assertRejected(
    validator().validate(withFlippedByte(eccFixture, "akPublic", 30), fromHex(eccFixture.reportData)),
    "malformed",
    "not a valid ECDSA public key",
  );
});

Deno.test("tpm validator: document of another variant is wrong-variant", async () => {
  const dummy = encode({ variant: "dummy", reportData: "AAAA" });
  await assertRejected(validator().validate(dummy, new Uint8Array(32)), "wrong-variant", '"dummy"');
});

Deno.test("tpm validator: garbage and wrongly typed documents are malformed with a clear reason", async () => {
  const good = documentJson(eccFixture);
  const goodPcrs = good.pcrs as Record<string, string>;
  const cases: [string, Uint8Array, string][] = [
    ["empty", new Uint8Array(), "not JSON"],
    // The node's bytes are not quoted back (escape sequences for the operator's terminal).
    ["escape sequences", new TextEncoder().encode("\x1b]0;PWNED\x07\x1b[31mRED"), "not JSON"],
    ["not UTF-8", new Uint8Array([0xff, 0xfe, 0x00, 0x80]), "not UTF-8"],
    ["random bytes", crypto.getRandomValues(new Uint8Array(512)), "malformed TPM attestation document"],
    ["JSON null", encode(null), "must be a JSON object"],
    ["JSON array", encode([good]), "must be a JSON object"],
    ["JSON number", encode(42), "must be a JSON object"],
    ["JSON string", encode("qemu-vtpm"), "must be a JSON object"],
    ["empty object", encode({}), '"variant" must be a string'],
    ["variant number", encode({ ...good, variant: 1 }), '"variant" must be a string'],
    ["akPublic missing", encode({ ...good, akPublic: undefined }), '"akPublic" must be a base64 string'],
    ["akPublic number", encode({ ...good, akPublic: 5 }), '"akPublic" must be a base64 string'],
    ["quote null", encode({ ...good, quote: null }), '"quote" must be a base64 string'],
    ["signature object", encode({ ...good, signature: {} }), '"signature" must be a base64 string'],
    ["quote not base64", encode({ ...good, quote: "!!!!" }), '"quote" is not padded standard base64'],
    [
      "quote unpadded",
      encode({ ...good, quote: (good.quote as string) + "A" }),
      "not padded standard base64",
    ],
    ["quote with whitespace", encode({ ...good, quote: " " + good.quote }), "not padded standard base64"],
    ["quote base64url", encode({ ...good, quote: "__-_" }), "not padded standard base64"],
    ["pcrs missing", encode({ ...good, pcrs: undefined }), '"pcrs" must be an object'],
    ["pcrs array", encode({ ...good, pcrs: Object.values(goodPcrs) }), '"pcrs" must be an object'],
    [
      "pcrs value number",
      encode({ ...good, pcrs: { ...goodPcrs, 0: 5 } }),
      '"pcrs"[0] must be 64 hex digits',
    ],
    [
      "pcrs value short",
      encode({ ...good, pcrs: { ...goodPcrs, 3: "00" } }),
      '"pcrs"[3] must be 64 hex digits',
    ],
    ["pcrs value not hex", encode({ ...good, pcrs: { ...goodPcrs, 3: "zz".repeat(32) } }), "must be 64 hex"],
    ["pcrs key word", encode({ ...good, pcrs: { ...goodPcrs, x: "00".repeat(32) } }), 'key "x" is not a PCR'],
    ["pcrs key 24", encode({ ...good, pcrs: { ...goodPcrs, 24: "00".repeat(32) } }), 'key "24" is not a PCR'],
    ["pcrs key -1", encode({ ...good, pcrs: { ...goodPcrs, "-1": "00".repeat(32) } }), 'key "-1" is not'],
    ["pcrs key 01", encode({ ...good, pcrs: { ...goodPcrs, "01": "00".repeat(32) } }), 'key "01" is not'],
    ["eventLog number", encode({ ...good, eventLog: 7 }), '"eventLog" must be a base64 string'],
    ["oversized", new Uint8Array(MAX_EVIDENCE_DOCUMENT_BYTES + 1).fill(0x20), "more than the 65536 allowed"],
  ];
  for (const [name, document, fragment] of cases) {
    const error = await assertRejected(
      validator().validate(document, new Uint8Array(32)),
      "malformed",
      fragment,
    )
      .catch((error) => {
        throw new Error(`case "${name}": ${error.message}`);
      });
    assert.ok(
      error.message.startsWith("malformed TPM attestation document: "),
      `case "${name}": ${error.message}`,
    );
    assert.equal(error.keyDigest, undefined, `case "${name}"`);
    // deno-lint-ignore no-control-regex
    assert.ok(!/[\u0000-\u001f\u007f-\u009f]/.test(error.message), `case "${name}": ${error.message}`);
  }
});

Deno.test("tpm validator: structures with unsupported contents are malformed", async () => {
  const reportData = fromHex(eccFixture.reportData);
  const cases: [string, Uint8Array, string][] = [
    // TPMS_ATTEST: magic at 0, type at 4..5.
    ["wrong magic", withFlippedByte(eccFixture, "quote", 0, 0x80), "is not TPM_GENERATED_VALUE"],
    ["not a quote", withFlippedByte(eccFixture, "quote", 5, 0x01), "is not TPM_ST_ATTEST_QUOTE"],
    // TPMT_SIGNATURE sigAlg 0x0018 → 0x0016 (RSAPSS).
    [
      "RSAPSS signature",
      withFlippedByte(eccFixture, "signature", 1, 0x0e),
      "unsupported signature algorithm",
    ],
    // TPMT_PUBLIC type at offset 2..3 of TPM2B_PUBLIC: 0x0023 → 0x0025 (symcipher).
    ["symmetric key", withFlippedByte(eccFixture, "akPublic", 3, 0x06), "unsupported key type 0x0025"],
    // curveID at offset 18..19: 0x0003 → 0x0004 (P-384).
    ["P-384 curve", withFlippedByte(eccFixture, "akPublic", 19, 0x07), "unsupported curve 0x0004"],
    // RSA keyBits at offset 18..19 (after symmetric NULL and scheme RSASSA+SHA256): 2048 → 2304.
    ["odd RSA size", withFlippedByte(rsaFixture, "akPublic", 18, 0x01), "unsupported RSA key size 2304"],
  ];
  for (const [name, document, fragment] of cases) {
    await assertRejected(validator().validate(document, reportData), "malformed", fragment).catch((error) => {
      throw new Error(`case "${name}": ${error.message}`);
    });
  }
});

Deno.test("tpm validator: an aborted signal rejects before any work", async () => {
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(
    validator().validate(encode(eccFixture.document), fromHex(eccFixture.reportData), {
      signal: controller.signal,
    }),
    (error: unknown) => error instanceof DOMException && error.name === "AbortError",
  );
});
