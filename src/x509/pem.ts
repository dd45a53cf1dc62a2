/**
 * PEM text: decoding into blocks and encoding DER as a block.
 *
 * Written out here rather than taken from @peculiar/x509 (whose PEM rules it
 * keeps: RFC 1421 headers, CR LF or LF, text around the blocks ignored): the
 * services read PEM at start, and evaluating that library costs a process
 * more start time than everything else it does before listening.
 *
 * @module
 */
import { ReasonError } from "../reason_error.ts";

/** PEM label of a SEC1 elliptic-curve key. */
export const PEM_EC_PRIVATE_KEY = "EC PRIVATE KEY";
/** PEM label of a PKCS#1 RSA key. */
export const PEM_RSA_PRIVATE_KEY = "RSA PRIVATE KEY";
/** PEM label of a PKCS#8 key. */
export const PEM_PRIVATE_KEY = "PRIVATE KEY";

/** One decoded PEM block. */
export interface PemBlock {
  /** The label, e.g. "CERTIFICATE" or "EC PRIVATE KEY". */
  type: string;
  /** The DER bytes. */
  rawData: ArrayBuffer;
  /** RFC 1421 headers (e.g. `Proc-Type` of an encrypted key); usually none. */
  headers: { key: string; value: string }[];
}

/** The text is not PEM, or holds no block. */
export class PemError extends ReasonError<"malformed" | "empty"> {}

/**
 * A block: BEGIN line, optional `Key: value` headers (continued on lines
 * starting with a space) and a blank line, base64 lines, the matching END
 * line. Written so that no text matches two ways (PEM is read from nodes'
 * CSRs and operators' files): a label holds no `-----`, and a header's key
 * does not start with a space, which a continuation line does. Otherwise a
 * few hundred bytes of such lines took minutes to refuse (each split tried).
 */
const BLOCK =
  /-{5}BEGIN ((?:[^\n-]|-(?!-{4}))+)-{5}\n(?:((?:[^:\n ][^:\n]*: (?:[^\n]+\n(?: +[^\n]+\n)*))+))?\n?((?:[a-zA-Z0-9=+/]+\n)+)-{5}END \1-{5}/g;

/**
 * Every PEM block of `text`, in order; none when it holds none. Throws
 * {@linkcode PemError} ("malformed") on a block whose base64 is invalid.
 */
export function decodePemBlocks(text: string): PemBlock[] {
  const blocks: PemBlock[] = [];
  for (const [, type, headerLines, base64] of text.replace(/\r/g, "").matchAll(BLOCK)) {
    let bytes: Uint8Array<ArrayBuffer>;
    try {
      // Padded to whole quanta, as the library this replaces required ("AAA" is not base64 here).
      bytes = Uint8Array.fromBase64(base64.replace(/\n/g, ""), { lastChunkHandling: "strict" });
    } catch {
      throw new PemError("malformed", `the ${type} block's base64 is invalid`);
    }
    blocks.push({ type, rawData: bytes.buffer, headers: headerLines ? parseHeaders(headerLines) : [] });
  }
  return blocks;
}

/** `Key: value` lines; a line starting with a space (or without a colon) continues the value before it. */
function parseHeaders(lines: string): { key: string; value: string }[] {
  const headers: { key: string; value: string }[] = [];
  for (const line of lines.split("\n")) {
    const colon = line.indexOf(":");
    if (colon < 0 || line.startsWith(" ")) {
      // The pattern starts the lines with a header, so there is one to continue.
      headers[headers.length - 1].value += line.trim();
    } else headers.push({ key: line.slice(0, colon), value: line.slice(colon + 1).trim() });
  }
  return headers;
}

/**
 * Decodes every PEM block of `text`; at least one must be there. `source`
 * names the input in errors. Throws {@linkcode PemError}.
 */
export function decodePem(text: string, source: string): PemBlock[] {
  let blocks: PemBlock[];
  try {
    blocks = decodePemBlocks(text);
  } catch {
    throw new PemError("malformed", `${source}: PEM data is malformed`);
  }
  if (blocks.length === 0) throw new PemError("empty", `no PEM data found in ${source}`);
  return blocks;
}

/** Encodes DER bytes as one PEM block labelled `type`, ending in a newline. */
export function encodePem(der: BufferSource, type: string): string {
  const bytes = ArrayBuffer.isView(der)
    ? new Uint8Array(der.buffer, der.byteOffset, der.byteLength)
    : new Uint8Array(der);
  const base64 = bytes.toBase64();
  const lines = [`-----BEGIN ${type.toUpperCase()}-----`];
  for (let i = 0; i < base64.length; i += 64) lines.push(base64.slice(i, i + 64));
  lines.push(`-----END ${type.toUpperCase()}-----`);
  return lines.join("\n") + "\n";
}
