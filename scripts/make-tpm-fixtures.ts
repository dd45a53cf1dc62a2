/**
 * Produces the checked-in TPM quote fixtures `tests/fixtures/tpm/{ecc,rsa}.json`:
 * real `qemu-vtpm` documents from a fresh swtpm, issued by `TpmIssuer`.
 *
 * Before quoting, PCRs 4, 9 and 12 are extended with fixed digests and PCR 15
 * with a fixed cluster ID, so the fixtures have distinct non-zero values; the
 * script recomputes every expected value independently and fails if the TPM
 * disagrees. Each fixture holds the document, the report data it is bound
 * to, the AK digest and the expected PCR values (hex).
 *
 * Run from the repository root:
 *
 * ```sh
 * deno run --allow-read --allow-write=/tmp,tests/fixtures/tpm \
 *   --allow-run=swtpm,swtpm_ioctl,tpm2_createprimary,tpm2_quote,tpm2_pcrread,tpm2_pcrextend,tpm2_pcrevent,tpm2_flushcontext \
 *   scripts/make-tpm-fixtures.ts
 * ```
 *
 * @module
 */
import { TpmIssuer } from "../src/attestation/tpm/issuer.ts";
import { concatBytes } from "../src/bytes/concat.ts";
import { extendPcr15, readPcrs } from "../src/attestation/tpm/pcr.ts";
import { runTpmTool } from "../src/attestation/tpm/tools.ts";
import { akDigest } from "../src/attestation/tpm/validator.ts";
import { silentLogger } from "../src/log/logger.ts";
import { startSwtpm } from "../src/localcluster/swtpm.ts";

/** Fixed events, so regenerated fixtures keep the same PCR values. */
const EVENTS: Record<number, string> = {
  4: "fixture: boot loader",
  9: "fixture: kernel and initrd",
  12: "fixture: kernel command line",
};
const CLUSTER_ID = new TextEncoder().encode("fixture: cluster id");
const OUT_DIR = new URL("../tests/fixtures/tpm/", import.meta.url);

async function sha256(...parts: Uint8Array[]): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", concatBytes(...parts)));
}

/** PCR values after one extend from zero: SHA256(0^32 ‖ digest). */
async function expectedPcrs(): Promise<Map<number, Uint8Array>> {
  const zero = new Uint8Array(32);
  const expected = new Map<number, Uint8Array>();
  for (let index = 0; index < 16; index++) expected.set(index, zero);
  for (const [index, event] of Object.entries(EVENTS)) {
    expected.set(Number(index), await sha256(zero, await sha256(new TextEncoder().encode(event))));
  }
  expected.set(15, await sha256(zero, await sha256(CLUSTER_ID)));
  return expected;
}

async function makeFixture(keyAlgorithm: "ecc" | "rsa"): Promise<void> {
  const swtpm = await startSwtpm();
  try {
    const tpm = { tcti: swtpm.tcti };
    for (const [index, event] of Object.entries(EVENTS)) {
      const digest = (await sha256(new TextEncoder().encode(event))).toHex();
      await runTpmTool(tpm, "tpm2_pcrextend", [`${index}:sha256=${digest}`]);
    }
    await extendPcr15(tpm, CLUSTER_ID);

    const expected = await expectedPcrs();
    const actual = await readPcrs(tpm, [...expected.keys()]);
    for (const [index, value] of expected) {
      if (actual.get(index)!.toHex() !== value.toHex()) {
        throw new Error(`PCR ${index} differs from the expected value`);
      }
    }

    const issuer = await TpmIssuer.create({
      tcti: swtpm.tcti,
      logger: silentLogger,
      keyAlgorithm,
      eventLogPath: null,
    });
    try {
      const reportData = crypto.getRandomValues(new Uint8Array(32));
      const document = await issuer.issue(reportData);
      const fixture = {
        description:
          `qemu-vtpm document from swtpm, ${keyAlgorithm} attestation key; made by scripts/make-tpm-fixtures.ts`,
        keyAlgorithm,
        reportData: reportData.toHex(),
        akDigest: await akDigest(document),
        pcrs: Object.fromEntries([...expected].map(([index, value]) => [index, value.toHex()])),
        document: JSON.parse(new TextDecoder().decode(document)),
      };
      await Deno.mkdir(OUT_DIR, { recursive: true });
      const path = new URL(`${keyAlgorithm}.json`, OUT_DIR);
      await Deno.writeTextFile(path, JSON.stringify(fixture, null, 2) + "\n");
      console.log(`wrote ${path.pathname}`);
    } finally {
      await issuer.close();
    }
  } finally {
    await swtpm.stop();
  }
}

if (import.meta.main) {
  await makeFixture("ecc");
  await makeFixture("rsa");
}
