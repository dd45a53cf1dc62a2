/**
 * The `qemu-vtpm` validator: verifies TPM 2.0 quotes in pure TypeScript
 * (WebCrypto only, no tools), so it runs anywhere, browsers included.
 *
 * Checks, in order, each failing with its own {@linkcode AttestationError}
 * reason:
 * 1. the document parses (see `document.ts` for its shape): "malformed"
 *    (or "wrong-variant" for another variant's document);
 * 2. the attestation key claims to be a restricted signing key fixed to its
 *    TPM (objectAttributes sign, restricted, fixedTpm) and is trusted:
 *    "untrusted-key" (see "AK trust" below for what this proves);
 * 3. the signature is a valid SHA-256 ECDSA/RSASSA signature over the whole
 *    quote (`TPMS_ATTEST`): "signature-invalid";
 * 4. the quote's `extraData` equals the expected report data (constant
 *    time): "report-data-mismatch";
 * 5. the quote selects exactly the reported PCRs, in the SHA-256 bank only,
 *    and its `pcrDigest` is SHA-256 over their values: "pcr-digest-mismatch";
 * 6. every configured measurement equals the reported PCR; all mismatches are
 *    collected, enforced ones reject ("measurement-mismatch") and warn-only
 *    ones come back as {@linkcode Verification.warnings}.
 *
 * The SHA-256 quote itself is verified, so every PCR value compared in step 6
 * is signed by the AK (the original verified only the strongest bank's
 * quote); that makes them TPM-measured values only if the AK is a TPM's,
 * which only an allow-list establishes (see below).
 *
 * **AK trust.** An allow-list holds key digests: lower-case hex SHA-256 of
 * the AK's `TPMT_PUBLIC` bytes (the document's `akPublic` without its 2-byte
 * size prefix). That is the AK's TPM Name without the `000b` prefix, as
 * `tpm2_readpublic -c ak.ctx` prints it; {@linkcode akDigest} computes it
 * from a document and `TpmIssuer.keyDigest` reports it.
 *
 * Only the allow-list ties evidence to a TPM. The object attributes are
 * self-declared inside `akPublic`, and a `TPMS_ATTEST` with the
 * `TPM_GENERATED_VALUE` magic is just bytes: the magic only means something
 * when a restricted key *known to live in a TPM* signed it, since such a key
 * refuses to sign outside data starting with the magic. Anyone can generate
 * a software key, declare those attributes, and sign a self-made quote with
 * any report data and PCR values. An operator who reads the digest of a
 * node's AK from its TPM and lists it closes that hole; nothing else here does.
 *
 * `{ kind: "any" }` (the original's QEMU behaviour) accepts every AK, so
 * evidence in that mode can be forged in software without any TPM and proves
 * nothing about the node's boot chain. It is kept as an explicit choice for
 * development and is logged as an INSECURE warning at construction and on
 * every verification that relies on it: one whose signature and report data
 * checked out under a key nothing vouches for (documents that fail those
 * checks are rejected without it, so unauthenticated peers cannot fill the
 * log with it).
 *
 * Every rejection after the document parsed carries the AK's digest in
 * {@linkcode AttestationError.keyDigest}, so audit lines can name the key of
 * rejected evidence too.
 *
 * @module
 */
import { bytesEqual } from "../../bytes/equal.ts";
import {
  type AkTrust,
  AttestationError,
  type MeasurementMismatch,
  type Measurements,
  trusts,
  type Validator,
  type Verification,
} from "../attestation.ts";
import type { Logger } from "../../log/logger.ts";
import { decodeDocument, pcrDigest, type TpmEvidence } from "./document.ts";
import { verifyQuoteSignature } from "./signature.ts";
import { hex16, ObjectAttribute, publicKeyDigest, TpmAlg } from "./structures.ts";

/** Variant name. */
export const QEMU_VTPM_VARIANT = "qemu-vtpm";

const REQUIRED_AK_ATTRIBUTES = ObjectAttribute.sign | ObjectAttribute.restricted | ObjectAttribute.fixedTpm;

/** Logged when any attestation key is trusted: at construction and on every verification that relies on it. */
export const TRUST_ANY_KEY_WARNING: string =
  "INSECURE: trustAnyKey accepts evidence signed by any key, including software keys; " +
  "anyone can forge qemu-vtpm evidence (any report data, any PCR values) without a TPM. " +
  "List the nodes' attestation keys in akTrust.allowedKeyDigests outside development";

/**
 * The AK digest of a `qemu-vtpm` document, for AK allow-lists (see the module
 * docs).
 *
 * @throws {AttestationError} "malformed" when the document cannot be parsed
 */
export async function akDigest(document: Uint8Array): Promise<string> {
  return await publicKeyDigest(decodeDocument(document, QEMU_VTPM_VARIANT).akPublic);
}

/** Options of {@linkcode TpmValidator}. */
export interface TpmValidatorOptions {
  /** Expected PCR values (SHA-256 bank). */
  measurements: Measurements;
  /** Which attestation keys to trust. */
  akTrust: AkTrust;
  /** Receives the INSECURE warnings of `trustAnyKey` and warn-only mismatches. */
  logger: Logger;
}

/** Verifies `qemu-vtpm` evidence. */
export class TpmValidator implements Validator {
  readonly variant: string = QEMU_VTPM_VARIANT;
  readonly #measurements: Measurements;
  readonly #akTrust: AkTrust;
  readonly #logger: Logger;

  /** A validator with `options.measurements` and `options.akTrust`. */
  constructor(options: TpmValidatorOptions) {
    this.#measurements = options.measurements;
    this.#akTrust = options.akTrust;
    this.#logger = options.logger.with({ variant: QEMU_VTPM_VARIANT });
    if (options.akTrust.kind === "any") this.#logger.warn(TRUST_ANY_KEY_WARNING);
  }

  /**
   * Verifies `document` against `reportData` and the expected measurements.
   *
   * @throws {AttestationError} with the reason of the first failed check
   */
  async validate(
    document: Uint8Array,
    reportData: Uint8Array,
    options: { signal?: AbortSignal } = {},
  ): Promise<Verification> {
    options.signal?.throwIfAborted();
    const evidence = decodeDocument(document, QEMU_VTPM_VARIANT);
    const keyDigest = await publicKeyDigest(evidence.akPublic);
    try {
      return await this.#verify(evidence, keyDigest, reportData);
    } catch (error) {
      if (!(error instanceof AttestationError)) throw error;
      throw new AttestationError(error.reason, error.message, error.mismatches, { keyDigest });
    }
  }

  /** Checks 2–6 (see the module docs) of parsed evidence whose AK has digest `keyDigest`. */
  async #verify(evidence: TpmEvidence, keyDigest: string, reportData: Uint8Array): Promise<Verification> {
    const { akPublic, quote } = evidence;
    if ((akPublic.objectAttributes & REQUIRED_AK_ATTRIBUTES) !== REQUIRED_AK_ATTRIBUTES) {
      throw new AttestationError(
        "untrusted-key",
        `attestation key ${keyDigest} is not a restricted signing key fixed to its TPM ` +
          `(objectAttributes 0x${akPublic.objectAttributes.toString(16).padStart(8, "0")})`,
      );
    }
    if (!trusts(this.#akTrust, keyDigest)) {
      throw new AttestationError("untrusted-key", `attestation key ${keyDigest} is not in the allow-list`);
    }

    await verifyQuoteSignature(akPublic.key, evidence.signature, evidence.quoteBytes);

    if (!bytesEqual(quote.extraData, reportData)) {
      throw new AttestationError(
        "report-data-mismatch",
        "quote is bound to other report data than this request's",
      );
    }
    // Only now does this verification rely on trusting an unvouched key.
    if (this.#akTrust.kind === "any") {
      this.#logger.warn(TRUST_ANY_KEY_WARNING, { event: "verification", keyDigest });
    }

    const reported = [...evidence.pcrs.keys()];
    const selection = quote.pcrSelections.filter((s) => s.pcrs.length > 0);
    if (selection.length !== 1 || selection[0].hash !== TpmAlg.SHA256) {
      const banks = selection.map((s) => hex16(s.hash)).join(", ") || "none";
      throw new AttestationError(
        "pcr-digest-mismatch",
        `quote selects PCRs of bank(s) ${banks}, want exactly the SHA-256 bank (0x000b)`,
      );
    }
    if (selection[0].pcrs.join(",") !== reported.join(",")) {
      throw new AttestationError(
        "pcr-digest-mismatch",
        `quote selects PCRs [${selection[0].pcrs.join(",")}] but the document reports [${
          reported.join(",")
        }]`,
      );
    }
    if (!bytesEqual(await pcrDigest(evidence.pcrs), quote.pcrDigest)) {
      throw new AttestationError(
        "pcr-digest-mismatch",
        "reported PCR values do not match the quote's PCR digest",
      );
    }

    const mismatches = this.#compareMeasurements(evidence.pcrs);
    if (mismatches.some((m) => m.enforced)) {
      throw new AttestationError(
        "measurement-mismatch",
        `${mismatches.length} measurement(s) differ: ${mismatches.map(describe).join("; ")}`,
        mismatches,
      );
    }
    for (const mismatch of mismatches) {
      this.#logger.warn("untrusted PCR value accepted (warn-only)", { ...mismatch });
    }
    const measurements: Record<number, string> = {};
    for (const [index, value] of evidence.pcrs) measurements[index] = value.toHex();
    return { variant: QEMU_VTPM_VARIANT, warnings: mismatches, measurements, keyDigest };
  }

  /** Every configured measurement that the reported PCRs do not match, ascending by index. */
  #compareMeasurements(pcrs: Map<number, Uint8Array>): MeasurementMismatch[] {
    const mismatches: MeasurementMismatch[] = [];
    for (const [index, measurement] of [...this.#measurements].sort(([a], [b]) => a - b)) {
      const actual = pcrs.get(index);
      if (actual !== undefined && bytesEqual(actual, measurement.expected)) continue;
      mismatches.push({
        index,
        expected: measurement.expected.toHex(),
        actual: actual === undefined ? null : actual.toHex(),
        enforced: !measurement.warnOnly,
      });
    }
    return mismatches;
  }
}

function describe(mismatch: MeasurementMismatch): string {
  const actual = mismatch.actual ?? "nothing (PCR not reported)";
  return `PCR ${mismatch.index} expected ${mismatch.expected}, got ${actual} ` +
    `(${mismatch.enforced ? "enforced" : "warn-only"})`;
}
