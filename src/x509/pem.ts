/**
 * PEM text: decoding into blocks and encoding DER as a block.
 *
 * @module
 */
import { ReasonError } from "../reason_error.ts";
import { PemConverter } from "./x509.ts";

/** One decoded PEM block. */
export interface PemBlock {
  /** The label, e.g. "CERTIFICATE" or "EC PRIVATE KEY". */
  type: string;
  /** The DER bytes. */
  rawData: ArrayBuffer;
  /** RFC 1421 headers (e.g. `Proc-Type` of an encrypted key); usually none. */
  headers: { key: string }[];
}

/** The text is not PEM, or holds no block. */
export class PemError extends ReasonError<"malformed" | "empty"> {}

/**
 * Decodes every PEM block of `text`; at least one must be there. `source`
 * names the input in errors. Throws {@linkcode PemError}.
 */
export function decodePem(text: string, source: string): PemBlock[] {
  let blocks: PemBlock[];
  try {
    blocks = PemConverter.decodeWithHeaders(text);
  } catch {
    throw new PemError("malformed", `${source}: PEM data is malformed`);
  }
  if (blocks.length === 0) throw new PemError("empty", `no PEM data found in ${source}`);
  return blocks;
}

/** Encodes DER bytes as one PEM block labelled `type`, ending in a newline. */
export function encodePem(der: BufferSource, type: string): string {
  return PemConverter.encode(der, type) + "\n";
}
