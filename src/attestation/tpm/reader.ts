/**
 * A bounded big-endian reader for TPM 2.0 wire structures.
 *
 * Every read checks the remaining length first, so truncated or lying input
 * ends in a {@linkcode TpmParseError} naming the structure, the field and the
 * offset, never in an out-of-range read or a generic exception.
 *
 * @module
 */

/** Input that is not a well-formed TPM structure. */
export class TpmParseError extends Error {
  /** A parse failure described by `message`. */
  constructor(message: string) {
    super(message);
    this.name = "TpmParseError";
  }
}

/** Reads big-endian integers and sized buffers from one structure. */
export class ByteReader {
  readonly #bytes: Uint8Array;
  readonly #view: DataView;
  readonly #structure: string;
  #offset = 0;

  /** A reader over the marshalled `bytes` of `structure` (its name in error messages, e.g. "TPMS_ATTEST"). */
  constructor(bytes: Uint8Array, structure: string) {
    this.#bytes = bytes;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.#structure = structure;
  }

  /** Bytes not read yet. */
  get remaining(): number {
    return this.#bytes.length - this.#offset;
  }

  /** Reads a `u8`. */
  u8(field: string): number {
    this.#need(1, field);
    return this.#view.getUint8(this.#offset++);
  }

  /** Reads a big-endian `u16`. */
  u16(field: string): number {
    this.#need(2, field);
    const value = this.#view.getUint16(this.#offset);
    this.#offset += 2;
    return value;
  }

  /** Reads a big-endian `u32`. */
  u32(field: string): number {
    this.#need(4, field);
    const value = this.#view.getUint32(this.#offset);
    this.#offset += 4;
    return value;
  }

  /** Reads a big-endian `u64`. */
  u64(field: string): bigint {
    this.#need(8, field);
    const value = this.#view.getBigUint64(this.#offset);
    this.#offset += 8;
    return value;
  }

  /** Reads `length` bytes (a copy, so callers may keep or hand it to WebCrypto). */
  bytes(length: number, field: string): Uint8Array<ArrayBuffer> {
    this.#need(length, field);
    const value = this.#bytes.slice(this.#offset, this.#offset + length);
    this.#offset += length;
    return value;
  }

  /** Reads a `TPM2B_*`: a `u16` size, then that many bytes. */
  sized(field: string): Uint8Array<ArrayBuffer> {
    return this.bytes(this.u16(`${field} size`), field);
  }

  /** Fails unless every byte was consumed: trailing bytes mean the input is not this structure. */
  end(): void {
    if (this.remaining !== 0) {
      throw new TpmParseError(
        `${this.#structure} has ${this.remaining} unexpected trailing byte(s) after offset ${this.#offset}`,
      );
    }
  }

  /** Fails with a parse error naming `field`. */
  fail(field: string, problem: string): never {
    throw new TpmParseError(`${this.#structure} ${field}: ${problem}`);
  }

  #need(length: number, field: string): void {
    if (this.remaining < length) {
      throw new TpmParseError(
        `${this.#structure} truncated: ${field} needs ${length} byte(s) at offset ${this.#offset}, ` +
          `only ${this.remaining} left`,
      );
    }
  }
}
