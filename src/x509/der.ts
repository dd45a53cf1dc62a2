/**
 * DER: a small reader of elements, for input read on every request (a
 * kubelet CSR: the schema library allocates a hundred times its size to
 * parse one) and at start (`certificate.ts`); and the few encoders the
 * certificates and requests the services make need
 * (`src/joinservice/kubeletca.ts`, `selfsigned.ts`, the kubelet CSR). No
 * schema library: evaluating one costs a process's start.
 *
 * @module
 */
/** The bytes are not exactly one DER element of the expected ASN.1 type. */
export class DerError extends Error {
  /** A DER parse failure of `what` (e.g. "EC PRIVATE KEY"): the message is "malformed <what>". */
  constructor(what: string) {
    super(`malformed ${what}`);
    this.name = "DerError";
  }
}

/**
 * Length of the DER element at the start of `bytes` (single-byte tag, at
 * most 4 length bytes), or undefined when its header is malformed or not
 * DER: the indefinite form, and a length in more bytes than it needs
 * (X.690 §10.1), are refused. The element may run past `bytes`; callers
 * compare.
 */
export function derLength(bytes: Uint8Array): number | undefined {
  if (bytes.length < 2 || (bytes[0] & 0x1f) === 0x1f) return undefined;
  const first = bytes[1];
  if (first < 0x80) return 2 + first;
  const count = first & 0x7f;
  // 0x80 is BER's indefinite form. Four length bytes reach 4 GiB, far beyond any input here.
  if (count === 0 || count > 4 || bytes.length < 2 + count) return undefined;
  // Only the minimal form is DER: the long form for 128 and more, no leading zero byte. BER's other
  // spellings of a length would let two readers disagree about bytes we copy into a certificate, and Go
  // (the API server) refuses them.
  if (bytes[2] === 0) return undefined;
  let length = 0;
  for (let i = 0; i < count; i++) length = length * 256 + bytes[2 + i];
  if (length < 0x80) return undefined;
  return 2 + count + length;
}

// --- reading ---

/** One DER element as read: its tag byte, its content and its whole encoding. */
export interface DerNode<T extends ArrayBufferLike = ArrayBufferLike> {
  /** The tag byte (class, constructed bit, number below 31). */
  tag: number;
  /** The content octets. */
  content: Uint8Array<T>;
  /** Tag, length and content. */
  encoded: Uint8Array<T>;
}

/**
 * `bytes` as exactly one DER element, of tag `tag` when given. Throws
 * {@linkcode DerError} naming `what` otherwise.
 */
export function readDer<T extends ArrayBufferLike>(
  bytes: Uint8Array<T>,
  what: string,
  tag?: number,
): DerNode<T> {
  const [node, ...rest] = derNodes(bytes, what);
  if (!node || rest.length > 0 || (tag !== undefined && node.tag !== tag)) throw new DerError(what);
  return node;
}

/**
 * The DER elements `bytes` holds one after the other, spanning it exactly
 * (the content of a SEQUENCE or SET). Throws {@linkcode DerError} naming
 * `what` on a malformed or truncated element.
 */
export function derNodes<T extends ArrayBufferLike>(bytes: Uint8Array<T>, what: string): DerNode<T>[] {
  const nodes: DerNode<T>[] = [];
  for (let offset = 0; offset < bytes.length;) {
    const rest = bytes.subarray(offset);
    const length = derLength(rest);
    if (length === undefined || length > rest.length) throw new DerError(what);
    const headerLength = rest[1] < 0x80 ? 2 : 2 + (rest[1] & 0x7f);
    nodes.push({
      tag: rest[0],
      content: rest.subarray(headerLength, length),
      encoded: rest.subarray(0, length),
    });
    offset += length;
  }
  return nodes;
}

/**
 * The magnitude (big-endian, without a sign byte) of a non-negative
 * INTEGER's content, e.g. an ECDSA signature's r or s. Throws
 * {@linkcode DerError} on an empty, negative or not minimally encoded one:
 * each of those would be another encoding of a value, which DER does not
 * allow (a signature that verifies in two encodings is malleable).
 */
export function derNonNegativeInteger<T extends ArrayBufferLike>(
  content: Uint8Array<T>,
  what: string,
): Uint8Array<T> {
  if (content.length === 0 || content[0] & 0x80) throw new DerError(what);
  if (content[0] === 0 && content.length > 1) {
    // A leading zero is only there to keep the next byte's high bit from reading as a sign.
    if (!(content[1] & 0x80)) throw new DerError(what);
    return content.subarray(1);
  }
  return content;
}

/** The dotted form of an OBJECT IDENTIFIER's content, e.g. "2.5.4.3". Throws {@linkcode DerError}. */
export function derOidString(content: Uint8Array, what: string): string {
  const arcs: number[] = [];
  let value = 0;
  for (const [i, byte] of content.entries()) {
    if (value === 0 && byte === 0x80) throw new DerError(what); // not minimal
    value = value * 128 + (byte & 0x7f);
    if (value > Number.MAX_SAFE_INTEGER / 128) throw new DerError(what);
    if (byte & 0x80) {
      if (i === content.length - 1) throw new DerError(what); // truncated arc
      continue;
    }
    if (arcs.length === 0) {
      arcs.push(value < 80 ? Math.floor(value / 40) : 2, value < 80 ? value % 40 : value - 80);
    } else arcs.push(value);
    value = 0;
  }
  if (arcs.length === 0) throw new DerError(what);
  return arcs.join(".");
}

// --- encoding ---

/** Universal DER tags (with the constructed bit for SEQUENCE and SET). */
export const DerTag = {
  boolean: 0x01,
  integer: 0x02,
  bitString: 0x03,
  octetString: 0x04,
  null: 0x05,
  oid: 0x06,
  utcTime: 0x17,
  generalizedTime: 0x18,
  sequence: 0x30,
  set: 0x31,
} as const;

/** One DER element: `tag`, the definite length, and `parts` concatenated as its content. */
export function derElement(tag: number, ...parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const length = parts.reduce((sum, part) => sum + part.length, 0);
  const lengthBytes: number[] = [];
  for (let rest = length; rest > 0; rest = Math.floor(rest / 256)) lengthBytes.unshift(rest % 256);
  const header = length < 0x80 ? [tag, length] : [tag, 0x80 | lengthBytes.length, ...lengthBytes];
  const out = new Uint8Array(header.length + length);
  out.set(header);
  let offset = header.length;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/** A SEQUENCE of `elements`. */
export function derSequence(...elements: Uint8Array[]): Uint8Array<ArrayBuffer> {
  return derElement(DerTag.sequence, ...elements);
}

/** A context-specific tag `[number]`, constructed (EXPLICIT, or IMPLICIT of a constructed type) or not. */
export function derContextTag(number: number, constructed: boolean): number {
  return 0x80 | (constructed ? 0x20 : 0) | number;
}

/** A non-negative INTEGER from its big-endian magnitude, minimally encoded. */
export function derUnsignedInteger(magnitude: Uint8Array): Uint8Array<ArrayBuffer> {
  let start = 0;
  while (start < magnitude.length - 1 && magnitude[start] === 0) start++;
  const digits = magnitude.subarray(start);
  return digits.length > 0 && digits[0] & 0x80
    ? derElement(DerTag.integer, Uint8Array.of(0), digits)
    : derElement(DerTag.integer, digits.length > 0 ? digits : Uint8Array.of(0));
}

/** An OBJECT IDENTIFIER from its dotted form, e.g. "1.2.840.10045.4.3.2". */
export function derOid(dotted: string): Uint8Array<ArrayBuffer> {
  const [first, second, ...rest] = dotted.split(".").map(Number);
  const bytes: number[] = [];
  for (const arc of [first * 40 + second, ...rest]) {
    const base128 = [arc & 0x7f];
    for (let value = Math.floor(arc / 128); value > 0; value = Math.floor(value / 128)) {
      base128.unshift(0x80 | (value & 0x7f));
    }
    bytes.push(...base128);
  }
  return derElement(DerTag.oid, Uint8Array.from(bytes));
}

/** A BIT STRING of whole bytes (no unused bits). */
export function derBitString(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  return derElement(DerTag.bitString, Uint8Array.of(0), bytes);
}

/** An OCTET STRING. */
export function derOctetString(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  return derElement(DerTag.octetString, bytes);
}

/** BOOLEAN TRUE (DER encodes a FALSE default by leaving it out). */
export const DER_TRUE: Uint8Array<ArrayBuffer> = derElement(DerTag.boolean, Uint8Array.of(0xff));

/** NULL. */
export const DER_NULL: Uint8Array<ArrayBuffer> = derElement(DerTag.null);

/**
 * An X.509 Time (RFC 5280 §4.1.2.5): UTCTime `YYMMDDHHMMSSZ` for the years
 * 1950–2049, GeneralizedTime `YYYYMMDDHHMMSSZ` otherwise; whole seconds.
 */
export function derTime(date: Date): Uint8Array<ArrayBuffer> {
  const year = date.getUTCFullYear();
  const two = (n: number) => String(n).padStart(2, "0");
  const rest = two(date.getUTCMonth() + 1) + two(date.getUTCDate()) + two(date.getUTCHours()) +
    two(date.getUTCMinutes()) + two(date.getUTCSeconds()) + "Z";
  const utc = year >= 1950 && year < 2050;
  const text = (utc ? two(year % 100) : String(year).padStart(4, "0")) + rest;
  return derElement(utc ? DerTag.utcTime : DerTag.generalizedTime, new TextEncoder().encode(text));
}

/** An Extension: its OID, `critical` when it is (FALSE, the default, is left out), its DER value. */
export function derExtension(oid: string, critical: boolean, value: Uint8Array): Uint8Array<ArrayBuffer> {
  return derSequence(derOid(oid), ...(critical ? [DER_TRUE] : []), derOctetString(value));
}

/** A WebCrypto ECDSA signature (P1363: r ‖ s) as X.509 carries it: DER `SEQUENCE { r, s }`. */
export function derEcdsaSignature(p1363: Uint8Array): Uint8Array<ArrayBuffer> {
  const half = p1363.length / 2;
  return derSequence(derUnsignedInteger(p1363.subarray(0, half)), derUnsignedInteger(p1363.subarray(half)));
}
