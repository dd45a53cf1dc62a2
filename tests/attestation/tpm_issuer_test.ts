/**
 * Integration tests of the `qemu-vtpm` issuer against a live swtpm, verified
 * by the pure-TypeScript validator.
 */
import assert from "node:assert/strict";
import {
  AttestationError,
  MAX_EVIDENCE_DOCUMENT_BYTES,
  type Measurement,
} from "../../src/attestation/attestation.ts";
import { decodeDocument } from "../../src/attestation/tpm/document.ts";
import { type QuotedPcrs, quoteMatchingPcrs, TpmIssuer } from "../../src/attestation/tpm/issuer.ts";
import { extendPcr15, readPcrs } from "../../src/attestation/tpm/pcr.ts";
import { runLoadingTpmTool } from "../../src/attestation/tpm/tools.ts";
import { TpmValidator } from "../../src/attestation/tpm/validator.ts";
import { createLogger, type Logger, silentLogger } from "../../src/log/logger.ts";
import { startSwtpm } from "../../src/localcluster/swtpm.ts";

const ALL_PCRS = Array.from({ length: 16 }, (_, i) => i);

function randomReportData(): Uint8Array<ArrayBuffer> {
  return crypto.getRandomValues(new Uint8Array(32));
}

/** A validator that trusts exactly `keyDigest` and enforces every PCR's current value. */
async function strictValidator(tcti: string, keyDigest: string): Promise<TpmValidator> {
  const values = await readPcrs({ tcti }, ALL_PCRS);
  const measurements = new Map<number, Measurement>(
    [...values].map(([index, expected]) => [index, { expected, warnOnly: false }]),
  );
  return new TpmValidator({
    measurements,
    akTrust: { kind: "allow-list", keyDigests: new Set([keyDigest]) },
    logger: silentLogger,
  });
}

function capturingLogger(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  return { logger: createLogger({ level: "debug", write: (line) => lines.push(JSON.parse(line)) }), lines };
}

for (const keyAlgorithm of ["ecc", "rsa"] as const) {
  Deno.test(`tpm issuer: ${keyAlgorithm} quote from swtpm verifies end to end`, async () => {
    const swtpm = await startSwtpm();
    const issuer = await TpmIssuer.create({
      tcti: swtpm.tcti,
      logger: silentLogger,
      keyAlgorithm,
      eventLogPath: null,
    });
    try {
      const validator = await strictValidator(swtpm.tcti, issuer.keyDigest);
      const reportData = randomReportData();
      const document = await issuer.issue(reportData);

      const json = JSON.parse(new TextDecoder().decode(document));
      assert.deepEqual(Object.keys(json).sort(), ["akPublic", "pcrs", "quote", "signature", "variant"]);
      assert.equal(json.variant, "qemu-vtpm");
      const signatureAlgorithm = Uint8Array.fromBase64(json.signature).subarray(0, 2);
      assert.deepEqual([...signatureAlgorithm], keyAlgorithm === "ecc" ? [0x00, 0x18] : [0x00, 0x14]);

      const result = await validator.validate(document, reportData);
      assert.equal(result.keyDigest, issuer.keyDigest);
      assert.deepEqual(Object.keys(result.measurements).map(Number), ALL_PCRS);
      assert.deepEqual(result.warnings, []);

      await assert.rejects(
        validator.validate(document, randomReportData()),
        (error: unknown) => error instanceof AttestationError && error.reason === "report-data-mismatch",
      );
    } finally {
      await issuer.close();
      await swtpm.stop();
    }
  });
}

for (const keyAlgorithm of ["ecc", "rsa"] as const) {
  Deno.test(`tpm issuer: the ${keyAlgorithm} attestation key is the same on every start of the same TPM`, async () => {
    const swtpm = await startSwtpm();
    const other = await startSwtpm();
    const create = (tcti: string) =>
      TpmIssuer.create({ tcti, logger: silentLogger, keyAlgorithm, eventLogPath: null });
    try {
      const first = await create(swtpm.tcti);
      await first.close();
      const second = await create(swtpm.tcti);
      try {
        assert.match(second.keyDigest, /^[0-9a-f]{64}$/);
        assert.equal(second.keyDigest, first.keyDigest);
        const validator = await strictValidator(swtpm.tcti, first.keyDigest);
        const reportData = randomReportData();
        const result = await validator.validate(await second.issue(reportData), reportData);
        assert.equal(result.keyDigest, first.keyDigest);
      } finally {
        await second.close();
      }

      // The operator's way to learn the digest (issuer.ts module docs): the AK's Name without "000b".
      const dir = await Deno.makeTempDir();
      try {
        await runLoadingTpmTool({ tcti: swtpm.tcti }, "tpm2_createprimary", [
          ...[
            "-C",
            "e",
            "-G",
            keyAlgorithm === "ecc" ? "ecc256:ecdsa-sha256:null" : "rsa2048:rsassa-sha256:null",
          ],
          ...["-g", "sha256", "-a", "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|sign"],
          ...["-c", `${dir}/ak.ctx`],
        ]);
        await runLoadingTpmTool({ tcti: swtpm.tcti }, "tpm2_readpublic", [
          ...["-c", `${dir}/ak.ctx`, "-n", `${dir}/name.bin`],
        ]);
        assert.equal((await Deno.readFile(`${dir}/name.bin`)).toHex(), `000b${first.keyDigest}`);
      } finally {
        await Deno.remove(dir, { recursive: true });
      }

      const foreign = await create(other.tcti);
      try {
        assert.notEqual(foreign.keyDigest, first.keyDigest);
        const validator = await strictValidator(other.tcti, first.keyDigest);
        const reportData = randomReportData();
        await assert.rejects(
          validator.validate(await foreign.issue(reportData), reportData),
          (error: unknown) => error instanceof AttestationError && error.reason === "untrusted-key",
        );
      } finally {
        await foreign.close();
      }
    } finally {
      await swtpm.stop();
      await other.stop();
    }
  });
}

Deno.test("tpm issuer: keys live in a private temporary directory removed by close", async () => {
  const swtpm = await startSwtpm();
  const tmp = await Deno.makeTempDir({ prefix: "tpm-issuer-tmp-" });
  let issuer: TpmIssuer | undefined;
  try {
    issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, tempDir: tmp });
    const entries = await Array.fromAsync(Deno.readDir(tmp));
    assert.equal(entries.length, 1);
    const stat = await Deno.stat(`${tmp}/${entries[0].name}`);
    assert.equal(stat.mode! & 0o777, 0o700);
    await issuer.issue(randomReportData());
    await issuer.close();
    assert.deepEqual(await Array.fromAsync(Deno.readDir(tmp)), []);
    await assert.rejects(issuer.issue(randomReportData()), /closed/);
  } finally {
    await issuer?.close();
    await Deno.remove(tmp, { recursive: true });
    await swtpm.stop();
  }
});

Deno.test("tpm issuer: working directories a killed issuer left in its tempDir are removed at creation", async () => {
  const swtpm = await startSwtpm();
  const tmp = await Deno.makeTempDir({ prefix: "tpm-issuer-tmp-" });
  let issuer: TpmIssuer | undefined;
  try {
    await Deno.mkdir(`${tmp}/qemu-vtpm-issuer-0123456789abcdef`);
    await Deno.writeTextFile(`${tmp}/qemu-vtpm-issuer-0123456789abcdef/ak.ctx`, "left by a killed process");
    await Deno.writeTextFile(`${tmp}/qemu-vtpm-issuer-file`, "not a directory: kept");
    await Deno.mkdir(`${tmp}/kubeadm-other`);
    issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, tempDir: `${tmp}/tmp` });
    const second = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, tempDir: tmp });
    const names = (await Array.fromAsync(Deno.readDir(tmp), (entry) => entry.name)).sort();
    assert.equal(names.length, 4, names.join(", "));
    assert.deepEqual(names.filter((name) => !/^qemu-vtpm-issuer-[0-9a-f]+$/.test(name)), [
      "kubeadm-other",
      "qemu-vtpm-issuer-file",
      "tmp",
    ]);
    assert.ok(!names.includes("qemu-vtpm-issuer-0123456789abcdef"));
    // A missing tempDir is created; the issuer in it works.
    await issuer.issue(randomReportData());
    await second.close();
  } finally {
    await issuer?.close();
    await Deno.remove(tmp, { recursive: true });
    await swtpm.stop();
  }
});

Deno.test("tpm issuer: 200 consecutive quotes through one issuer never exhaust object slots", async () => {
  const swtpm = await startSwtpm();
  const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, eventLogPath: null });
  try {
    const validator = await strictValidator(swtpm.tcti, issuer.keyDigest);
    for (let i = 0; i < 200; i++) {
      const reportData = randomReportData();
      await validator.validate(await issuer.issue(reportData), reportData);
    }
  } finally {
    await issuer.close();
    await swtpm.stop();
  }
});

Deno.test("tpm issuer: concurrent issues are serialized and all verify", async () => {
  const swtpm = await startSwtpm();
  const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, eventLogPath: null });
  try {
    const validator = await strictValidator(swtpm.tcti, issuer.keyDigest);
    const reportData = Array.from({ length: 6 }, randomReportData);
    const documents = await Promise.all(reportData.map((data) => issuer.issue(data)));
    for (const [i, document] of documents.entries()) await validator.validate(document, reportData[i]);
  } finally {
    await issuer.close();
    await swtpm.stop();
  }
});

Deno.test("tpm issuer: a PCR extended while it quotes lands before or after the quote, never between", async () => {
  // tpm2_quote reads the PCR values itself right after quoting, and tool runs on one TPM are queued:
  // an extension our own code makes can no longer fall between the quote and its values.
  const swtpm = await startSwtpm();
  const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, eventLogPath: null });
  const anyKey = new TpmValidator({
    measurements: new Map(),
    akTrust: { kind: "any" },
    logger: silentLogger,
  });
  try {
    for (let attempt = 0; attempt < 5; attempt++) {
      const reportData = randomReportData();
      const issued = issuer.issue(reportData);
      await new Promise((resolve) => setTimeout(resolve, 2 + attempt));
      await extendPcr15({ tcti: swtpm.tcti }, new TextEncoder().encode(`cluster ${attempt}`));
      // The validator checks the values against the quote's PCR digest.
      await anyKey.validate(await issued, reportData);
    }
  } finally {
    await issuer.close();
    await swtpm.stop();
  }
});

Deno.test("quoteMatchingPcrs: values that do not hash to the quote's digest make it quote again, twice is unavailable", async () => {
  const swtpm = await startSwtpm();
  const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, eventLogPath: null });
  let genuine: QuotedPcrs;
  try {
    const evidence = decodeDocument(await issuer.issue(randomReportData()), "qemu-vtpm");
    genuine = {
      quote: evidence.quoteBytes,
      signature: new Uint8Array(),
      pcrs: evidence.pcrs,
    };
  } finally {
    await issuer.close();
    await swtpm.stop();
  }
  // As if another TPM user extended PCR 10 between TPM2_Quote and TPM2_PCR_Read.
  const changed = { ...genuine, pcrs: new Map([...genuine.pcrs, [10, new Uint8Array(32).fill(7)]]) };

  const { logger, lines } = capturingLogger();
  const answers = [changed, genuine];
  assert.equal(await quoteMatchingPcrs(() => Promise.resolve(answers.shift()!), logger), genuine);
  assert.deepEqual(lines.map((line) => line.msg), [
    "PCR values changed between quote and read; quoting again",
  ]);

  await assert.rejects(
    quoteMatchingPcrs(() => Promise.resolve(changed), silentLogger),
    (error) => error instanceof AttestationError && error.reason === "unavailable",
  );
});

Deno.test("tpm issuer: sends no event log unless asked, and a requested small one as is", async () => {
  const swtpm = await startSwtpm();
  const dir = await Deno.makeTempDir();
  const eventLog = crypto.getRandomValues(new Uint8Array(3000));
  await Deno.writeFile(`${dir}/binary_bios_measurements`, eventLog);
  const withoutLog = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger });
  const withLog = await TpmIssuer.create({
    tcti: swtpm.tcti,
    logger: silentLogger,
    eventLogPath: `${dir}/binary_bios_measurements`,
  });
  try {
    const validator = await strictValidator(swtpm.tcti, withLog.keyDigest);
    const reportData = randomReportData();

    const plain = await withoutLog.issue(reportData);
    assert.equal(JSON.parse(new TextDecoder().decode(plain)).eventLog, undefined);
    await validator.validate(plain, reportData);

    const document = await withLog.issue(reportData);
    const json = JSON.parse(new TextDecoder().decode(document));
    assert.deepEqual(Uint8Array.fromBase64(json.eventLog), eventLog);
    await validator.validate(document, reportData);
  } finally {
    await withoutLog.close();
    await withLog.close();
    await Deno.remove(dir, { recursive: true });
    await swtpm.stop();
  }
});

/** The "event log too large" warnings among `lines`, at creation and per quote. */
function eventLogTooLarge(lines: Record<string, unknown>[]): Record<string, unknown>[] {
  return lines.filter((line) => line.level === "warn" && String(line.msg).startsWith("event log too large"));
}

/** Issues `count` quotes and asserts each is within the limit, carries no event log and verifies. */
async function assertQuotesWithoutEventLog(issuer: TpmIssuer, tcti: string, count: number): Promise<void> {
  const validator = await strictValidator(tcti, issuer.keyDigest);
  for (let i = 0; i < count; i++) {
    const reportData = randomReportData();
    const document = await issuer.issue(reportData);
    assert.ok(document.length <= MAX_EVIDENCE_DOCUMENT_BYTES, `${document.length} bytes`);
    assert.equal(JSON.parse(new TextDecoder().decode(document)).eventLog, undefined);
    assert.equal((await validator.validate(document, reportData)).keyDigest, issuer.keyDigest);
  }
}

Deno.test("tpm issuer: an event log too large for any document is dropped once, at creation", async (t) => {
  const swtpm = await startSwtpm();
  const dir = await Deno.makeTempDir();
  try {
    // Over the limit on its own (larger than a real machine's log, ~47 KiB and up), and under
    // the limit raw but over it once in base64.
    const cases = [
      { name: "larger than the limit", bytes: 200 * 1024 },
      { name: "too large in base64", bytes: 60 * 1024 },
    ];
    for (const { name, bytes } of cases) {
      await t.step(name, async () => {
        const path = `${dir}/binary_bios_measurements`;
        await Deno.writeFile(path, new Uint8Array(bytes).map((_, i) => (i * 31) % 251));
        const { logger, lines } = capturingLogger();
        const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger, eventLogPath: path });
        try {
          await assertQuotesWithoutEventLog(issuer, swtpm.tcti, 3);
          const warnings = eventLogTooLarge(lines);
          assert.equal(warnings.length, 1, "one warning over creation and three quotes");
          const [warning] = warnings;
          assert.equal(warning.msg, "event log too large to send; quotes go without it");
          assert.equal(warning.path, path);
          assert.equal(warning.maxDocumentBytes, MAX_EVIDENCE_DOCUMENT_BYTES);
          if (bytes > MAX_EVIDENCE_DOCUMENT_BYTES) {
            // Read only one byte past the limit, so its full size is unknown.
            assert.equal(warning.eventLogBytesAtLeast, MAX_EVIDENCE_DOCUMENT_BYTES + 1);
            assert.equal(warning.eventLogBytes, undefined);
          } else {
            assert.equal(warning.eventLogBytes, bytes);
            assert.ok(Number(warning.documentBytes) > MAX_EVIDENCE_DOCUMENT_BYTES);
          }
        } finally {
          await issuer.close();
        }
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
    await swtpm.stop();
  }
});

Deno.test("tpm issuer: an endless event log is read only up to the limit", async () => {
  // Like the securityfs log, /dev/zero has no size to stat; unlike it, it never ends.
  const swtpm = await startSwtpm();
  const { logger, lines } = capturingLogger();
  const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger, eventLogPath: "/dev/zero" });
  try {
    await assertQuotesWithoutEventLog(issuer, swtpm.tcti, 2);
    assert.deepEqual(
      eventLogTooLarge(lines).map((line) => line.eventLogBytesAtLeast),
      [MAX_EVIDENCE_DOCUMENT_BYTES + 1],
    );
  } finally {
    await issuer.close();
    await swtpm.stop();
  }
});

for (const keyAlgorithm of ["ecc", "rsa"] as const) {
  Deno.test(`tpm issuer: the largest event log that fits an ${keyAlgorithm} document is sent with every quote`, async () => {
    const swtpm = await startSwtpm();
    const dir = await Deno.makeTempDir();
    const path = `${dir}/binary_bios_measurements`;
    try {
      // The document without a log, plus `,"eventLog":"<base64>"`, must stay within the limit.
      const plain = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, keyAlgorithm });
      const plainBytes = (await plain.issue(randomReportData())).length;
      await plain.close();
      const base64Room = MAX_EVIDENCE_DOCUMENT_BYTES - plainBytes - ',"eventLog":""'.length;
      const fitting = Math.floor(base64Room / 4) * 3;

      const eventLog = new Uint8Array(fitting).map((_, i) => (i * 7) % 253);
      await Deno.writeFile(path, eventLog);
      const { logger, lines } = capturingLogger();
      const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger, keyAlgorithm, eventLogPath: path });
      try {
        const validator = await strictValidator(swtpm.tcti, issuer.keyDigest);
        for (let i = 0; i < 3; i++) {
          const reportData = randomReportData();
          const document = await issuer.issue(reportData);
          assert.ok(document.length <= MAX_EVIDENCE_DOCUMENT_BYTES, `${document.length} bytes`);
          assert.ok(document.length > MAX_EVIDENCE_DOCUMENT_BYTES - 4, `${document.length} bytes`);
          assert.deepEqual(
            Uint8Array.fromBase64(JSON.parse(new TextDecoder().decode(document)).eventLog),
            eventLog,
          );
          await validator.validate(document, reportData);
        }
        assert.deepEqual(eventLogTooLarge(lines), []);
      } finally {
        await issuer.close();
      }

      // One byte more takes another base64 quantum, over the limit: dropped at creation already.
      await Deno.writeFile(path, new Uint8Array(fitting + 1));
      const larger = capturingLogger();
      const dropping = await TpmIssuer.create({
        tcti: swtpm.tcti,
        logger: larger.logger,
        keyAlgorithm,
        eventLogPath: path,
      });
      try {
        await assertQuotesWithoutEventLog(dropping, swtpm.tcti, 2);
        assert.deepEqual(eventLogTooLarge(larger.lines).map((line) => line.documentBytes), [
          plainBytes + ',"eventLog":""'.length + (fitting / 3 + 1) * 4,
        ]);
      } finally {
        await dropping.close();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
      await swtpm.stop();
    }
  });
}

Deno.test("tpm issuer: rejects report data that is not 32 bytes and honours abort", async () => {
  const swtpm = await startSwtpm();
  const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, eventLogPath: null });
  try {
    for (const length of [0, 31, 33, 64]) {
      await assert.rejects(issuer.issue(new Uint8Array(length)), RangeError);
    }
    const controller = new AbortController();
    controller.abort();
    await assert.rejects(
      issuer.issue(randomReportData(), { signal: controller.signal }),
      (error: unknown) => error instanceof DOMException && error.name === "AbortError",
    );
    // The issuer still works after an aborted call.
    await issuer.issue(randomReportData());
  } finally {
    await issuer.close();
    await swtpm.stop();
  }
});

Deno.test("tpm issuer: an unreachable TPM is reported as unavailable, naming the tool", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await assert.rejects(
      TpmIssuer.create({ tcti: `swtpm:path=${dir}/no-such.sock`, logger: silentLogger, eventLogPath: null }),
      (error: unknown) =>
        error instanceof AttestationError && error.reason === "unavailable" &&
        error.message.includes("tpm2_flushcontext") && error.message.includes("Could not load tcti"),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
