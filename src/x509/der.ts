/**
 * Strict DER parsing into `@peculiar/asn1-schema` classes.
 *
 * @module
 */
import { AsnConvert } from "@peculiar/asn1-schema";

/** The bytes are not exactly one DER element of the expected ASN.1 type. */
export class DerError extends Error {
  /** A DER parse failure of `what` (e.g. "EC PRIVATE KEY"): the message is "malformed <what>". */
  constructor(what: string) {
    super(`malformed ${what}`);
    this.name = "DerError";
  }
}

/**
 * Parses DER into an ASN.1 schema class, requiring that the encoding spans
 * the whole input (the ASN.1 library ignores trailing bytes; Go rejects
 * them). `what` names the input in the error. Throws {@linkcode DerError}.
 */
export function parseDer<T>(data: ArrayBuffer | Uint8Array, schema: new () => T, what: string): T {
  const bytes = new Uint8Array(data);
  if (derLength(bytes) !== bytes.length) throw new DerError(what);
  try {
    return AsnConvert.parse(bytes, schema);
  } catch {
    throw new DerError(what);
  }
}

/**
 * Length of the DER element at the start of `bytes` (single-byte tag, at
 * most 4 length bytes), or undefined when its header is malformed.
 */
export function derLength(bytes: Uint8Array): number | undefined {
  if (bytes.length < 2 || (bytes[0] & 0x1f) === 0x1f) return undefined;
  const first = bytes[1];
  if (first < 0x80) return 2 + first;
  const count = first & 0x7f;
  if (count === 0 || count > 4 || bytes.length < 2 + count) return undefined;
  let length = 0;
  for (let i = 0; i < count; i++) length = length * 256 + bytes[2 + i];
  return 2 + count + length;
}
