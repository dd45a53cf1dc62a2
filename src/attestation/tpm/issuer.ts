/**
 * The `qemu-vtpm` issuer: produces TPM 2.0 quotes with tpm2-tools.
 *
 * {@linkcode TpmIssuer.create} derives the attestation key (AK): a restricted
 * signing key bound to this TPM, ECC P-256 with ECDSA-SHA256 by default or
 * RSA-2048 with RSASSA-SHA256. It lives only as a saved context in a private
 * temporary directory, removed by {@linkcode TpmIssuer.close}; nothing
 * persists in the TPM.
 *
 * **A stable AK.** The AK is a primary key of the endorsement hierarchy, so
 * the TPM derives it from its endorsement seed and a fixed template: the same
 * TPM always yields the same key, and so the same key digest, across process
 * and node restarts (the original kept one persistent AK at a fixed handle
 * for the same reason). An AK allow-list (the join service's
 * `akTrust.allowedKeyDigests`) therefore stays valid; a random AK made with
 * `tpm2_createak` would change on every start. The digest is lower-case hex
 * SHA-256 of the AK's `TPMT_PUBLIC`, i.e. its TPM Name without the leading
 * `000b` (the Name's hash algorithm, SHA-256). The issuer logs it as
 * `keyDigest` in its "TPM attestation key ready" line. An operator can also
 * derive it on the node without this program, with the issuer's template
 * (ECC shown; for RSA use `-G rsa2048:rsassa-sha256:null`):
 *
 * ```sh
 * tpm2_createprimary -C e -G ecc256:ecdsa-sha256:null -g sha256 \
 *   -a 'fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|sign' \
 *   -c ak.ctx >/dev/null
 * tpm2_readpublic -c ak.ctx -n name.bin >/dev/null
 * od -An -v -tx1 name.bin | tr -d ' \n' | cut -c 5-   # the Name without "000b"
 * ```
 *
 * (`tpm2_createprimary` also prints the Name, as `name:`.) Like
 * `tpm2_createek`, this needs the endorsement hierarchy's authorization to be
 * empty, the default.
 *
 * {@linkcode TpmIssuer.issue} quotes PCRs 0–15 of the SHA-256 bank with the
 * report data as qualifying data, reads the same PCRs, and returns the
 * document described in `document.ts`. Quote and read are two TPM commands,
 * so the issuer checks the values against the quote's digest and quotes once
 * more if a PCR was extended in between: honest nodes never send evidence
 * that fails verification.
 *
 * **Event log.** The firmware's TCG event log is sent only when asked for
 * (`eventLogPath`, e.g. {@linkcode DEFAULT_EVENT_LOG_PATH}). It is
 * unverified, informational data: the quote does not cover it and the
 * validator ignores it. A real machine's log is tens of KiB, so a document
 * carrying it can outgrow {@linkcode MAX_EVIDENCE_DOCUMENT_BYTES}, which every
 * verifier rejects. The issuer decides once, at creation: it reads at most one
 * byte more than that limit (the securityfs file has no size to stat), and
 * drops a log that would push a typical document of this AK over the limit,
 * with one warning. Quote sizes hardly vary, so a quote that still comes out
 * too large with the log is rare; it is sent without the log, with a warning.
 *
 * **Permissions.** The issuer needs `--allow-run` for tpm2_createprimary,
 * tpm2_quote and tpm2_flushcontext (tpm2_quote reads the PCR values it
 * quoted itself, `-o`); the PCR helpers in
 * `pcr.ts` need tpm2_pcrread (reading) and tpm2_pcrevent plus
 * tpm2_flushcontext (`extendPcr15`). It also needs `--allow-write` and
 * `--allow-read` for the temporary directory, and `--allow-read` for the
 * event log if one is sent. A node that issues and extends PCR 15
 * thus runs with
 * `--allow-run=tpm2_createprimary,tpm2_quote,tpm2_pcrread,tpm2_pcrevent,tpm2_flushcontext`.
 *
 * @module
 */
import { bytesEqual } from "../../bytes/equal.ts";
import {
  AttestationError,
  type Issuer,
  MAX_EVIDENCE_DOCUMENT_BYTES,
  REPORT_DATA_LENGTH,
} from "../attestation.ts";
import type { Logger } from "../../log/logger.ts";
import {
  encodeDocument,
  pcrDigest,
  QUOTED_PCRS,
  SHA256_PCR_LENGTH,
  type TpmDocumentFields,
} from "./document.ts";
import { pcrValues } from "./pcr.ts";
import { TpmParseError } from "./reader.ts";
import { parsePublic, parseQuote, publicKeyDigest } from "./structures.ts";
import {
  DEFAULT_TCTI,
  flushTransientObjects,
  runLoadingTpmTool,
  type TpmConnection,
  TpmToolError,
} from "./tools.ts";
import { QEMU_VTPM_VARIANT } from "./validator.ts";

/** Where Linux exposes the firmware's TCG event log (a value for {@linkcode TpmIssuerOptions.eventLogPath}). */
export const DEFAULT_EVENT_LOG_PATH = "/sys/kernel/security/tpm0/binary_bios_measurements";

/** Options of {@linkcode TpmIssuer.create}. */
export interface TpmIssuerOptions {
  /** tpm2-tools TCTI; default "device:/dev/tpmrm0". Tests use "swtpm:path=…" or "swtpm:host=…,port=…". */
  tcti?: string;
  /** Receives the issuer's log lines (its key digest at start, retries). */
  logger: Logger;
  /** Aborts key creation. */
  signal?: AbortSignal;
  /** Attestation key algorithm; default "ecc" (P-256, ECDSA-SHA256); "rsa" is RSA-2048, RSASSA-SHA256. */
  keyAlgorithm?: "ecc" | "rsa";
  /**
   * Opt-in: a TCG event log file (e.g. {@linkcode DEFAULT_EVENT_LOG_PATH}) to
   * send with every quote, read once at creation if readable. It is
   * unverified, informational data (the validator ignores it). A log too
   * large for a document within {@linkcode MAX_EVIDENCE_DOCUMENT_BYTES} is
   * dropped at creation, with a warning, and left out of any single quote it
   * would still push past that limit. Default: none (undefined or null).
   */
  eventLogPath?: string | null;
  /**
   * Parent directory of the issuer's private working directory (key context, quote files); default the
   * system's temp directory. When given, it is taken to be this process's own: working directories that an
   * earlier issuer there left behind (its process was killed before {@linkcode TpmIssuer.close}) are removed
   * at creation.
   */
  tempDir?: string;
}

/** Prefix of an issuer's working directory's name. */
const WORK_DIR_PREFIX = "qemu-vtpm-issuer-";

/** `tpm2_createprimary -G` per key algorithm: key type, signing scheme, no symmetric algorithm. */
const AK_KEY_TYPES = {
  ecc: "ecc256:ecdsa-sha256:null",
  rsa: "rsa2048:rsassa-sha256:null",
} as const;

/** The AK's object attributes: a restricted signing key that never leaves this TPM. */
const AK_ATTRIBUTES = "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|sign";

/**
 * Sizes of this issuer's quotes, to size a document before the first one: a
 * `TPMS_ATTEST` over one PCR bank with 32 bytes of report data, by a key with
 * a SHA-256 Name, is 145 bytes; its `TPMT_SIGNATURE` is 72 bytes (ECDSA
 * P-256) or 262 (RSASSA, RSA-2048).
 */
const TYPICAL_QUOTE_BYTES = 145;
const TYPICAL_SIGNATURE_BYTES = { ecc: 72, rsa: 262 } as const;

/** Issues `qemu-vtpm` evidence from a TPM. */
export class TpmIssuer implements Issuer {
  readonly variant: string = QEMU_VTPM_VARIANT;
  /** The attestation key's digest (lower-case hex SHA-256 of its TPMT_PUBLIC), for AK allow-lists. */
  readonly keyDigest: string;
  readonly #tpm: TpmConnection;
  readonly #logger: Logger;
  readonly #dir: string;
  readonly #akPublic: Uint8Array;
  readonly #eventLog: Uint8Array | undefined;
  /** Serializes quotes: they share files in the temporary directory. */
  #queue: Promise<unknown> = Promise.resolve();
  #closed = false;

  private constructor(
    tpm: TpmConnection,
    logger: Logger,
    dir: string,
    akPublic: Uint8Array,
    keyDigest: string,
    eventLog: Uint8Array | undefined,
  ) {
    this.#tpm = tpm;
    this.#logger = logger;
    this.#dir = dir;
    this.#akPublic = akPublic;
    this.keyDigest = keyDigest;
    this.#eventLog = eventLog;
  }

  /**
   * Derives the attestation key, the same one every time for this TPM and key
   * algorithm (see the module docs).
   *
   * @throws {AttestationError} "unavailable" when the TPM or tpm2-tools fail
   */
  static async create(options: TpmIssuerOptions): Promise<TpmIssuer> {
    const tpm = { tcti: options.tcti ?? DEFAULT_TCTI };
    const algorithm = options.keyAlgorithm ?? "ecc";
    const logger = options.logger.with({ variant: QEMU_VTPM_VARIANT });
    const signal = options.signal;
    if (options.tempDir !== undefined) await removeEarlierWorkDirs(options.tempDir, logger);
    const dir = await Deno.makeTempDir({ prefix: WORK_DIR_PREFIX, dir: options.tempDir });
    try {
      await Deno.chmod(dir, 0o700);
      const path = (name: string) => `${dir}/${name}`;
      const akPublic = await unavailableOnFailure("creating the attestation key", async () => {
        // Objects left by a process that died mid-command would otherwise fill the TPM's slots.
        await flushTransientObjects(tpm);
        // A primary key: the same endorsement seed and template always give the same AK (see the module docs).
        // -o writes its TPM2B_PUBLIC, the bytes `tpm2_readpublic -f tss` would.
        await runLoadingTpmTool(tpm, "tpm2_createprimary", [
          ...["-C", "e", "-G", AK_KEY_TYPES[algorithm], "-g", "sha256", "-a", AK_ATTRIBUTES],
          ...["-c", path("ak.ctx"), "-o", path("ak.pub")],
        ], { signal });
        return await Deno.readFile(path("ak.pub"));
      });
      const keyDigest = await publicKeyDigest(parsePublic(akPublic));
      const eventLog = options.eventLogPath
        ? await loadEventLog(options.eventLogPath, {
          logger,
          typicalDocument: {
            variant: QEMU_VTPM_VARIANT,
            akPublic,
            quote: new Uint8Array(TYPICAL_QUOTE_BYTES),
            signature: new Uint8Array(TYPICAL_SIGNATURE_BYTES[algorithm]),
            pcrs: new Map(QUOTED_PCRS.map((index) => [index, new Uint8Array(SHA256_PCR_LENGTH)])),
          },
        })
        : undefined;
      logger.info("TPM attestation key ready", { tcti: tpm.tcti, keyAlgorithm: algorithm, keyDigest });
      return new TpmIssuer(tpm, logger, dir, akPublic, keyDigest, eventLog);
    } catch (error) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw error;
    }
  }

  /**
   * Quotes PCRs 0–15 with `reportData` as qualifying data.
   *
   * @throws {RangeError} unless `reportData` is 32 bytes
   * @throws {AttestationError} "unavailable" when the TPM or tpm2-tools fail
   */
  issue(reportData: Uint8Array, options: { signal?: AbortSignal } = {}): Promise<Uint8Array> {
    if (reportData.length !== REPORT_DATA_LENGTH) {
      return Promise.reject(
        new RangeError(`report data must be ${REPORT_DATA_LENGTH} bytes, got ${reportData.length}`),
      );
    }
    if (this.#closed) return Promise.reject(new Error("TPM issuer is closed"));
    const result = this.#queue.then(() => this.#quote(reportData, options.signal));
    this.#queue = result.catch(() => {});
    return result;
  }

  /** Waits for running quotes, then removes the key contexts. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#queue;
    await Deno.remove(this.#dir, { recursive: true });
  }

  async #quote(reportData: Uint8Array, signal: AbortSignal | undefined): Promise<Uint8Array> {
    const path = (name: string) => `${this.#dir}/${name}`;
    return await unavailableOnFailure("quoting", async () => {
      const quoted = await quoteMatchingPcrs(async () => {
        // -o: the PCR values, read by tpm2_quote right after quoting: one tool run less than tpm2_pcrread,
        // and each run costs a process start, the larger part of a quote's time.
        await runLoadingTpmTool(this.#tpm, "tpm2_quote", [
          ...["-c", path("ak.ctx"), "-l", `sha256:${QUOTED_PCRS.join(",")}`, "-q", reportData.toHex()],
          ...["-g", "sha256", "-m", path("quote.msg"), "-s", path("quote.sig"), "-f", "tss"],
          ...["-o", path("pcrs.bin"), "-F", "values"],
        ], { signal });
        return {
          quote: await Deno.readFile(path("quote.msg")),
          signature: await Deno.readFile(path("quote.sig")),
          pcrs: pcrValues("tpm2_quote", QUOTED_PCRS, await Deno.readFile(path("pcrs.bin"))),
        };
      }, this.#logger);
      return this.#encode({ variant: QEMU_VTPM_VARIANT, akPublic: this.#akPublic, ...quoted });
    });
  }

  /**
   * The document, with the event log if there is one and the document stays
   * within the size every verifier accepts (`loadEventLog` already dropped a
   * log that cannot fit with a typical quote, so this fallback is rare).
   */
  #encode(fields: TpmDocumentFields): Uint8Array {
    if (this.#eventLog !== undefined) {
      const document = encodeDocument({ ...fields, eventLog: this.#eventLog });
      if (document.length <= MAX_EVIDENCE_DOCUMENT_BYTES) return document;
      this.#logger.warn("event log too large to send; this quote goes without it", {
        eventLogBytes: this.#eventLog.length,
        documentBytes: document.length,
        maxDocumentBytes: MAX_EVIDENCE_DOCUMENT_BYTES,
      });
    }
    return encodeDocument(fields);
  }
}

/** A quote, its signature and the PCR values read with it. */
export interface QuotedPcrs {
  /** TPMS_ATTEST. */
  quote: Uint8Array;
  /** TPMT_SIGNATURE. */
  signature: Uint8Array;
  /** The quoted PCRs' values, by index. */
  pcrs: Map<number, Uint8Array>;
}

/**
 * Runs `quoteOnce` until the PCR values read with the quote hash to its PCR
 * digest, at most twice: another TPM user (the kernel's IMA, a PCR 15
 * binding) may extend a PCR between `TPM2_Quote` and `TPM2_PCR_Read`. The
 * second mismatch is "unavailable".
 */
export async function quoteMatchingPcrs(
  quoteOnce: () => Promise<QuotedPcrs>,
  logger: Logger,
): Promise<QuotedPcrs> {
  for (let attempt = 1;; attempt++) {
    const quoted = await quoteOnce();
    if (bytesEqual(await pcrDigest(quoted.pcrs), parseQuote(quoted.quote).pcrDigest)) return quoted;
    if (attempt === 2) {
      throw new AttestationError("unavailable", "PCR values changed between quote and read twice in a row");
    }
    logger.warn("PCR values changed between quote and read; quoting again");
  }
}

/**
 * Reads the requested event log once, at most one byte past the document
 * limit, and keeps it if `typicalDocument` carrying it stays within the
 * limit. An unreadable log (no TPM driver log, no permission) or one too large
 * is warned about once, here; quotes then go without it.
 */
async function loadEventLog(
  path: string,
  options: { logger: Logger; typicalDocument: TpmDocumentFields },
): Promise<Uint8Array | undefined> {
  const { logger } = options;
  let eventLog: Uint8Array;
  try {
    eventLog = await readAtMost(path, MAX_EVIDENCE_DOCUMENT_BYTES + 1);
  } catch (error) {
    logger.warn("event log unreadable; quotes go without it", { path, error });
    return undefined;
  }
  const tooLarge = "event log too large to send; quotes go without it";
  const maxDocumentBytes = MAX_EVIDENCE_DOCUMENT_BYTES;
  if (eventLog.length > MAX_EVIDENCE_DOCUMENT_BYTES) {
    // Not read to the end, so its size is unknown: only that it exceeds the limit on its own.
    logger.warn(tooLarge, { path, eventLogBytesAtLeast: eventLog.length, maxDocumentBytes });
    return undefined;
  }
  const documentBytes = encodeDocument({ ...options.typicalDocument, eventLog }).length;
  if (documentBytes > MAX_EVIDENCE_DOCUMENT_BYTES) {
    logger.warn(tooLarge, { path, eventLogBytes: eventLog.length, documentBytes, maxDocumentBytes });
    return undefined;
  }
  return eventLog;
}

/** The first `limit` bytes of a file, or all of it if shorter. Works on pseudo-files, whose stat size is 0. */
async function readAtMost(path: string, limit: number): Promise<Uint8Array> {
  const file = await Deno.open(path);
  try {
    const buffer = new Uint8Array(limit);
    let length = 0;
    while (length < limit) {
      const read = await file.read(buffer.subarray(length));
      if (read === null) break;
      length += read;
    }
    return buffer.slice(0, length);
  } finally {
    file.close();
  }
}

/** Runs a TPM step, turning tool and parse failures into "unavailable" (aborts pass through). */
async function unavailableOnFailure<T>(step: string, task: () => Promise<T>): Promise<T> {
  try {
    return await task();
  } catch (error) {
    if (
      error instanceof TpmToolError || error instanceof TpmParseError || error instanceof Deno.errors.NotFound
    ) {
      throw new AttestationError("unavailable", `${step} failed: ${error.message}`);
    }
    throw error;
  }
}

/** Creates `tempDir` if missing and removes the working directories earlier issuers left in it. */
async function removeEarlierWorkDirs(tempDir: string, logger: Logger): Promise<void> {
  await Deno.mkdir(tempDir, { recursive: true, mode: 0o700 });
  for await (const entry of Deno.readDir(tempDir)) {
    if (!entry.isDirectory || !entry.name.startsWith(WORK_DIR_PREFIX)) continue;
    await Deno.remove(`${tempDir}/${entry.name}`, { recursive: true });
    logger.info("removed an earlier issuer's working directory", { directory: entry.name });
  }
}
