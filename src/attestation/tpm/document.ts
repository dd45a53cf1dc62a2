/**
 * The TPM attestation document: what a TPM issuer sends and a TPM validator
 * checks. It is UTF-8 JSON, at most {@linkcode MAX_EVIDENCE_DOCUMENT_BYTES} bytes:
 *
 * ```jsonc
 * {
 *   "variant": "qemu-vtpm",
 *   // TPM2B_PUBLIC of the attestation key (u16 size, then TPMT_PUBLIC), as
 *   // written by `tpm2_readpublic -f tss`
 *   "akPublic": "<base64>",
 *   // the quote: the marshalled TPMS_ATTEST exactly as the TPM signed it
 *   // (`tpm2_quote -m`), type TPM_ST_ATTEST_QUOTE, extraData = the 32-byte
 *   // report data, selecting the SHA-256 bank
 *   "quote": "<base64>",
 *   // TPMT_SIGNATURE over the quote bytes (`tpm2_quote -s -f tss`):
 *   // ECDSA (0x0018) or RSASSA (0x0014), hash SHA-256 (0x000b)
 *   "signature": "<base64>",
 *   // the quoted PCR values of the SHA-256 bank: decimal index (0..23, no
 *   // leading zeros) → 64 hex digits; exactly the PCRs the quote selects
 *   "pcrs": { "0": "<hex>", "1": "<hex>", …, "15": "<hex>" },
 *   // optional, informational only: the raw TCG event log
 *   // (binary_bios_measurements); not covered by the quote, never verified
 *   // and ignored by the validator
 *   "eventLog": "<base64>"
 * }
 * ```
 *
 * Base64 is standard (RFC 4648 §4) with padding and no whitespace. Hex is
 * written lower-case; either case is accepted. Unknown keys are ignored so
 * later versions can add fields. The quote's `pcrDigest` is SHA-256 over the
 * `pcrs` values concatenated in ascending index order.
 *
 * @module
 */
import { jsonSyntaxError } from "../../json/syntax_error.ts";
import { primitives } from "../../crypto/primitives.ts";
import { AttestationError, MAX_EVIDENCE_DOCUMENT_BYTES } from "../attestation.ts";
import { TpmParseError } from "./reader.ts";
import {
  MAX_PCR_INDEX,
  parsePublic,
  parseQuote,
  parseSignature,
  type TpmPublic,
  type TpmQuote,
  type TpmSignature,
} from "./structures.ts";

/** Length of a SHA-256 PCR value. */
export const SHA256_PCR_LENGTH = 32;

/** The PCRs every quote covers (the issuer quotes them; a config can only expect these). */
export const QUOTED_PCRS: readonly number[] = Array.from({ length: 16 }, (_, i) => i);

/** The contents of a document, as an issuer provides them. */
export interface TpmDocumentFields {
  /** Always `qemu-vtpm`. */
  variant: string;
  /** `TPM2B_PUBLIC` of the attestation key. */
  akPublic: Uint8Array;
  /** Marshalled `TPMS_ATTEST`. */
  quote: Uint8Array;
  /** Marshalled `TPMT_SIGNATURE`. */
  signature: Uint8Array;
  /** SHA-256 PCR values by index. */
  pcrs: ReadonlyMap<number, Uint8Array>;
  /** Raw TCG event log, if any: unverified, informational only. */
  eventLog?: Uint8Array;
}

/** A decoded document with its binary structures parsed. */
export interface TpmEvidence {
  /** Always `qemu-vtpm`. */
  variant: string;
  /** The attestation key's public area. */
  akPublic: TpmPublic;
  /** The quote (`TPMS_ATTEST`), as signed. */
  quote: TpmQuote;
  /** The signed bytes (the marshalled `TPMS_ATTEST`). */
  quoteBytes: Uint8Array<ArrayBuffer>;
  /** The quote's signature by the attestation key. */
  signature: TpmSignature;
  /** SHA-256 PCR values by index, ascending. */
  pcrs: Map<number, Uint8Array>;
  /** The event log, if sent: unauthenticated (not covered by the quote), never trust it. */
  eventLog?: Uint8Array;
}

/** Serializes a document (see the module docs for the shape). */
export function encodeDocument(fields: TpmDocumentFields): Uint8Array<ArrayBuffer> {
  const pcrs: Record<string, string> = {};
  for (const [index, value] of [...fields.pcrs].sort(([a], [b]) => a - b)) pcrs[index] = value.toHex();
  const json = {
    variant: fields.variant,
    akPublic: fields.akPublic.toBase64(),
    quote: fields.quote.toBase64(),
    signature: fields.signature.toBase64(),
    pcrs,
    ...(fields.eventLog ? { eventLog: fields.eventLog.toBase64() } : {}),
  };
  return new TextEncoder().encode(JSON.stringify(json));
}

/**
 * Decodes and parses a document of `variant`.
 *
 * @throws {AttestationError} "malformed" naming the first problem found, or
 *   "wrong-variant" for a well-formed document of another variant
 */
export function decodeDocument(document: Uint8Array, variant: string): TpmEvidence {
  if (document.length > MAX_EVIDENCE_DOCUMENT_BYTES) {
    throw malformed(
      `document is ${document.length} bytes, more than the ${MAX_EVIDENCE_DOCUMENT_BYTES} allowed`,
    );
  }
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(document);
  } catch {
    throw malformed("document is not UTF-8 text");
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    // The node's bytes are not quoted: they could hold escape sequences for the operator's terminal.
    throw malformed(`document is not JSON: ${jsonSyntaxError(error)}`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw malformed("document must be a JSON object");
  }
  const fields = json as Record<string, unknown>;
  if (typeof fields.variant !== "string") throw malformed('"variant" must be a string');
  if (fields.variant !== variant) {
    throw new AttestationError(
      "wrong-variant",
      `evidence is of variant ${JSON.stringify(fields.variant.slice(0, 64))}, want "${variant}"`,
    );
  }
  const quoteBytes = base64Field(fields, "quote");
  return {
    variant,
    akPublic: parseField("akPublic", base64Field(fields, "akPublic"), parsePublic),
    quote: parseField("quote", quoteBytes, parseQuote),
    quoteBytes,
    signature: parseField("signature", base64Field(fields, "signature"), parseSignature),
    pcrs: pcrsField(fields.pcrs),
    ...(fields.eventLog === undefined ? {} : { eventLog: base64Field(fields, "eventLog") }),
  };
}

/** SHA-256 over PCR values concatenated in ascending index order: what a quote's `pcrDigest` must be. */
export async function pcrDigest(pcrs: ReadonlyMap<number, Uint8Array>): Promise<Uint8Array> {
  const ordered = [...pcrs].sort(([a], [b]) => a - b);
  const concatenated = new Uint8Array(ordered.reduce((length, [, value]) => length + value.length, 0));
  let offset = 0;
  for (const [, value] of ordered) {
    concatenated.set(value, offset);
    offset += value.length;
  }
  return await primitives.sha256(concatenated);
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const PCR_INDEX = /^(?:0|[1-9][0-9]?)$/;
const PCR_VALUE = /^[0-9a-fA-F]{64}$/;

function base64Field(fields: Record<string, unknown>, name: string): Uint8Array<ArrayBuffer> {
  const value = fields[name];
  if (typeof value !== "string") throw malformed(`"${name}" must be a base64 string`);
  if (!BASE64.test(value)) throw malformed(`"${name}" is not padded standard base64`);
  return Uint8Array.fromBase64(value);
}

function parseField<T>(name: string, bytes: Uint8Array, parse: (bytes: Uint8Array) => T): T {
  try {
    return parse(bytes);
  } catch (error) {
    if (error instanceof TpmParseError) throw malformed(`"${name}": ${error.message}`);
    throw error;
  }
}

function pcrsField(value: unknown): Map<number, Uint8Array> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw malformed('"pcrs" must be an object mapping PCR index to hex value');
  }
  const entries: [number, Uint8Array][] = [];
  for (const [key, hex] of Object.entries(value)) {
    const shown = JSON.stringify(key.slice(0, 16));
    if (!PCR_INDEX.test(key) || Number(key) > MAX_PCR_INDEX) {
      throw malformed(`"pcrs" key ${shown} is not a PCR index 0..${MAX_PCR_INDEX}`);
    }
    if (typeof hex !== "string" || !PCR_VALUE.test(hex)) {
      throw malformed(`"pcrs"[${key}] must be ${SHA256_PCR_LENGTH * 2} hex digits (a SHA-256 PCR value)`);
    }
    entries.push([Number(key), Uint8Array.fromHex(hex)]);
  }
  return new Map(entries.sort(([a], [b]) => a - b));
}

/** The "malformed" rejection, with the prefix every malformed-document message shares. */
export function malformed(message: string): AttestationError {
  return new AttestationError("malformed", `malformed TPM attestation document: ${message}`);
}
