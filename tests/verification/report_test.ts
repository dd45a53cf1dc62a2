/**
 * The verification report the CLI and the browser console share
 * (`src/verification/report.ts`), on real `qemu-vtpm` evidence from a
 * swtpm: the verdict and every PCR row for a genuine node, a warn-only and
 * an enforced mismatch, an untrusted key (no value proven) and evidence for
 * another nonce; the words both renderers use; and the saved-evidence file.
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { parseOperatorAttestationConfig } from "../../src/attestation/config.ts";
import { TpmIssuer } from "../../src/attestation/tpm/issuer.ts";
import { readPcrs } from "../../src/attestation/tpm/pcr.ts";
import { generateKeyPair } from "../../src/atls/hpke.ts";
import { GetAttestationResponseSchema } from "../../src/gen/init/init_pb.ts";
import { initReportData } from "../../src/init/protocol.ts";
import { startSwtpm } from "../../src/localcluster/swtpm.ts";
import { silentLogger } from "../../src/log/logger.ts";
import {
  encodeEvidenceFile,
  EVIDENCE_FILE_FORMAT,
  EvidenceFileError,
  parseEvidenceFile,
} from "../../src/verification/evidence_file.ts";
import {
  EvidenceAnswerError,
  evidenceFromAnswer,
  matchText,
  mismatchSummary,
  newAttestationNonce,
  type NodeEvidence,
  policyText,
  renderVerifyJson,
  rowsFromVerification,
  verdictText,
  verifyNodeEvidence,
  whyText,
} from "../../src/verification/report.ts";

const NODE = "10.42.0.3:9001";

Deno.test("the shared verification report on swtpm evidence", async (t) => {
  const swtpm = await startSwtpm();
  const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, eventLogPath: null });
  try {
    const pcrs = await readPcrs({ tcti: swtpm.tcti }, [0, 15]);
    /** The node's answer to GetAttestation(nonce), as the init server makes it. */
    const evidenceFor = async (nonce: Uint8Array): Promise<NodeEvidence> => {
      const keys = await generateKeyPair();
      const document = await issuer.issue(await initReportData(nonce, keys.publicKey));
      return { node: NODE, nonce, publicKey: keys.publicKey, variant: issuer.variant, document };
    };
    const config = (measurements: Record<string, unknown>, trusted = [issuer.keyDigest]) =>
      parseOperatorAttestationConfig(
        JSON.stringify({ variant: "qemu-vtpm", measurements, akTrust: { allowedKeyDigests: trusted } }),
      );
    const actual0 = pcrs.get(0)!.toHex();
    const actual15 = pcrs.get(15)!.toHex();
    const other = "aa".repeat(32);

    await t.step("a genuine node: passed, every PCR with the value it reported", async () => {
      const evidence = await evidenceFor(newAttestationNonce());
      const result = await verifyNodeEvidence(evidence, config({ "0": actual0, "15": actual15 }), {
        logger: silentLogger,
      });
      assert.deepEqual(result, {
        node: NODE,
        variant: "qemu-vtpm",
        passed: true,
        pcrs: [
          { index: 0, expected: actual0, actual: actual0, enforced: true, match: true },
          { index: 15, expected: actual15, actual: actual15, enforced: true, match: true },
        ],
      });
      assert.equal(verdictText(result), "attestation OK");
      assert.equal(whyText(result), undefined);
      assert.equal(mismatchSummary(result), undefined);
      assert.deepEqual(JSON.parse(renderVerifyJson(result)), result);
    });

    await t.step(
      "a warn-only mismatch passes, its row marked; an enforced one fails, proven rows",
      async () => {
        const evidence = await evidenceFor(newAttestationNonce());
        const warned = await verifyNodeEvidence(
          evidence,
          config({ "0": actual0, "15": { expected: other, warnOnly: true } }),
          { logger: silentLogger },
        );
        assert.equal(warned.passed, true);
        assert.deepEqual(warned.pcrs[1], {
          index: 15,
          expected: other,
          actual: actual15,
          enforced: false,
          match: false,
        });
        assert.equal(policyText(warned.pcrs[1]), "warn-only");
        assert.equal(mismatchSummary(warned), "mismatching: PCR[15] (warn-only)");

        const failed = await verifyNodeEvidence(evidence, config({ "0": other, "15": actual15 }), {
          logger: silentLogger,
        });
        assert.equal(failed.passed, false);
        assert.equal(failed.reason, "measurement-mismatch");
        assert.deepEqual(failed.pcrs, [
          { index: 0, expected: other, actual: actual0, enforced: true, match: false },
          { index: 15, expected: actual15, actual: actual15, enforced: true, match: true },
        ]);
        assert.equal(verdictText(failed), "attestation FAILED (measurement-mismatch)");
        assert.equal(whyText(failed), undefined, "the rows say why");
        assert.equal(mismatchSummary(failed), "mismatching: PCR[0] (enforced)");
        assert.deepEqual(failed.pcrs.map(matchText), ["MISMATCH", "ok"]);
      },
    );

    await t.step("an untrusted key proves no value: unknown rows, and why in words", async () => {
      const evidence = await evidenceFor(newAttestationNonce());
      const result = await verifyNodeEvidence(evidence, config({ "0": actual0 }, ["bb".repeat(32)]), {
        logger: silentLogger,
      });
      assert.equal(result.passed, false);
      assert.equal(result.reason, "untrusted-key");
      assert.deepEqual(result.pcrs, [{
        index: 0,
        expected: actual0,
        actual: null,
        enforced: true,
        match: null,
      }]);
      assert.equal(matchText(result.pcrs[0]), "unknown");
      assert.match(whyText(result)!, /attestation key/);
    });

    await t.step("evidence made for another nonce fails (report-data-mismatch)", async () => {
      const evidence = await evidenceFor(newAttestationNonce());
      const result = await verifyNodeEvidence(
        { ...evidence, nonce: newAttestationNonce() },
        config({ "0": actual0 }),
        { logger: silentLogger },
      );
      assert.equal(result.passed, false);
      assert.equal(result.reason, "report-data-mismatch");
    });

    await t.step("saved evidence reads back as it was and verifies the same", async () => {
      const evidence = await evidenceFor(newAttestationNonce());
      const text = encodeEvidenceFile(evidence, Date.UTC(2025, 0, 1));
      const json = JSON.parse(text);
      assert.equal(json.format, EVIDENCE_FILE_FORMAT);
      assert.equal(json.fetchedAt, "2025-01-01T00:00:00.000Z");
      const read = parseEvidenceFile(text, "evidence.json");
      assert.deepEqual(read, { ...evidence, publicKey: new Uint8Array(evidence.publicKey) });
      const measurements = { "0": actual0, "15": actual15 };
      assert.deepEqual(
        await verifyNodeEvidence(read, config(measurements), { logger: silentLogger }),
        await verifyNodeEvidence(evidence, config(measurements), { logger: silentLogger }),
      );
    });
  } finally {
    await issuer.close();
    await swtpm.stop();
  }
});

Deno.test("a passing verification's rows: a warn-only PCR the quote does not cover is a mismatch, not unknown", () => {
  const expected0 = "11".repeat(32);
  const expected9 = "99".repeat(32);
  const config = parseOperatorAttestationConfig(JSON.stringify({
    variant: "qemu-vtpm",
    measurements: { "0": expected0, "9": { expected: expected9, warnOnly: true } },
    akTrust: { allowedKeyDigests: ["ab".repeat(32)] },
  }));
  // The validator passed it: PCR 0 matched; PCR 9 (warn-only) was not in the quote, so it warned.
  const rows = rowsFromVerification(config, {
    variant: "qemu-vtpm",
    measurements: { 0: expected0 },
    warnings: [{ index: 9, expected: expected9, actual: null, enforced: false }],
  });
  assert.deepEqual(rows, [
    { index: 0, expected: expected0, actual: expected0, enforced: true, match: true },
    { index: 9, expected: expected9, actual: null, enforced: false, match: false },
  ]);
  const result = { node: NODE, variant: "qemu-vtpm", passed: true, pcrs: rows };
  assert.deepEqual(rows.map(matchText), ["ok", "MISMATCH"]);
  assert.equal(mismatchSummary(result), "mismatching: PCR[9] (warn-only)");
});

Deno.test("a pass that proved no enforced measurement (dummy evidence) says so in its verdict", () => {
  const row = { index: 4, expected: "44".repeat(32), actual: null, enforced: true, match: null };
  assert.equal(
    verdictText({ node: NODE, variant: "dummy", passed: true, pcrs: [row] }),
    "attestation OK, but 1 enforced measurement(s) not proven: the dummy variant proves none",
  );
  assert.equal(verdictText({ node: NODE, variant: "dummy", passed: true, pcrs: [] }), "attestation OK");
});

Deno.test("an evidence file that is not one is refused naming the field", () => {
  const good = {
    format: EVIDENCE_FILE_FORMAT,
    node: NODE,
    nonce: "01".repeat(32),
    publicKey: "02".repeat(32),
    evidence: { variant: "qemu-vtpm", document: btoa("{}") },
  };
  const cases: [unknown, RegExp][] = [
    ["not json", /^f\.json: not JSON/],
    [[], /want a JSON object, got array/],
    [{ ...good, extra: 1 }, /unknown field "extra"/],
    [{ ...good, format: "v0" }, /format must be "node-evidence\/v1", got "v0"/],
    [{ ...good, node: 1 }, /node must be a string, got number/],
    // Printed as the report's first line: text with line breaks or terminal escapes could forge a verdict.
    [
      { ...good, node: "10.0.0.5:9000 (qemu-vtpm): attestation OK\n\x1b[2Knode 10.0.0.6:9000" },
      /^f\.json: node must be host:port, e\.g\. 10\.42\.0\.3:9001$/,
    ],
    [{ ...good, node: "10.0.0.5" }, /node must be host:port/],
    [{ ...good, nonce: "zz" }, /nonce must be hex/],
    [{ ...good, nonce: "01" }, /nonce must be 32 bytes, got 1/],
    [{ ...good, publicKey: "02".repeat(31) }, /publicKey must be 32 bytes \(X25519\), got 31/],
    [{ ...good, evidence: { variant: "qemu-vtpm" } }, /evidence\.document is missing/],
    [{ ...good, evidence: { ...good.evidence, document: "%%%" } }, /evidence\.document must be base64/],
    [
      { ...good, evidence: { ...good.evidence, document: "" } },
      /evidence\.document must be 1 to 65536 bytes, got 0/,
    ],
    [{ ...good, evidence: { ...good.evidence, x: 1 } }, /unknown field "evidence\.x"/],
    // JSON.parse would keep the second nonce, silently.
    [
      JSON.stringify(good).replace(`"nonce":`, `"nonce":"${"03".repeat(32)}","nonce":`),
      /^f\.json: key "nonce" is given twice at the top level: give each key once$/,
    ],
  ];
  for (const [value, message] of cases) {
    const text = typeof value === "string" ? value : JSON.stringify(value);
    assert.throws(() => parseEvidenceFile(text, "f.json"), (error: unknown) => {
      assert.ok(error instanceof EvidenceFileError);
      assert.match(error.message, message, text);
      return true;
    });
  }
  assert.equal(parseEvidenceFile(JSON.stringify(good), "f.json").node, NODE);
});

Deno.test("an answer without evidence or a valid key is outside the protocol", () => {
  const nonce = newAttestationNonce();
  const answers = [
    create(GetAttestationResponseSchema, { publicKey: new Uint8Array(32) }),
    create(GetAttestationResponseSchema, {
      publicKey: new Uint8Array(31),
      evidence: { variant: "qemu-vtpm", document: new Uint8Array(1) },
    }),
    create(GetAttestationResponseSchema, {
      publicKey: new Uint8Array(32),
      evidence: { variant: "qemu-vtpm", document: new Uint8Array() },
    }),
  ];
  for (const answer of answers) {
    assert.throws(() => evidenceFromAnswer(NODE, nonce, answer), EvidenceAnswerError);
  }
});
