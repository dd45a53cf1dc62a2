/**
 * A small streaming reader of gzip-compressed tar archives (POSIX ustar,
 * with pax `x` records for long names and sizes, GNU `L`/`K` long names),
 * over `DecompressionStream`. It only parses: it checks header checksums
 * and bounds (headers, header extensions, content and decompressed bytes), and leaves
 * every decision about names, links and types to the caller
 * (`components.ts` extracts safely).
 *
 * ```ts
 * for await (const entry of tarGzEntries(file.readable, limits)) {
 *   if (entry.type === "file") await entry.body(async (chunk) => { ... });
 * }
 * ```
 *
 * @module
 */
import { concatBytes } from "../bytes/concat.ts";
import { ReasonError } from "../reason_error.ts";

/** Entry types, by tar type flag. */
export type TarEntryType =
  | "file" // '0' or NUL (or '7', contiguous file)
  | "directory" // '5'
  | "symlink" // '2'
  | "hardlink" // '1'
  | "device" // '3' character or '4' block device
  | "fifo" // '6'
  | "other"; // anything else (e.g. GNU sparse files)

/** One archive entry. `body` streams its content; an unread body is skipped. */
export interface TarEntry {
  /** The path as recorded (pax `path`, GNU long name or ustar prefix/name), unnormalized. */
  name: string;
  /** What kind of entry it is. */
  type: TarEntryType;
  /** The raw type flag character. */
  typeFlag: string;
  /** Permission bits as recorded. */
  mode: number;
  /** Content bytes (as recorded; 0 for all but files in any sane archive). */
  size: number;
  /** Link target of a symlink or hard link. */
  linkName: string;
  /** Streams the content to `sink` in chunks; call at most once, before asking for the next entry. */
  body(sink: (chunk: Uint8Array) => Promise<void>): Promise<void>;
}

/** Bounds of {@linkcode tarGzEntries}. */
export interface TarLimits {
  /** Most headers, header extensions (pax, GNU long names) included; default 10 000. */
  maxEntries?: number;
  /** Most content bytes of all entries together; default 2 GiB. */
  maxTotalBytes?: number;
  /** Most bytes of the header extensions (pax, GNU long names) before one entry; default 64 KiB. */
  maxExtensionBytes?: number;
  /**
   * Most decompressed bytes read, headers and padding included: a backstop to the other bounds; default
   * `maxTotalBytes` plus 64 MiB.
   */
  maxDecompressedBytes?: number;
}

/** The archive is not a well-formed tar.gz within the limits. */
export class TarError extends ReasonError<"malformed" | "too-large"> {}

const BLOCK = 512;

/** The entries of the gzip-compressed tar archive `stream`. Throws {@linkcode TarError}. */
export async function* tarGzEntries(
  stream: ReadableStream<Uint8Array>,
  limits: TarLimits = {},
): AsyncGenerator<TarEntry> {
  const maxEntries = limits.maxEntries ?? 10_000;
  const maxTotal = limits.maxTotalBytes ?? 2 * 1024 ** 3;
  const maxExtension = limits.maxExtensionBytes ?? 64 * 1024;
  const reader = new BlockReader(
    stream.pipeThrough(new DecompressionStream("gzip") as unknown as TransformStream<Uint8Array, Uint8Array>),
    limits.maxDecompressedBytes ?? maxTotal + 64 * 1024 ** 2,
  );
  try {
    let entries = 0;
    let total = 0;
    let pax = new Map<string, string>();
    let extensionBytes = 0;
    let longName: string | undefined;
    let longLink: string | undefined;
    for (;;) {
      const header = await reader.read(BLOCK);
      if (header === undefined) {
        throw new TarError("malformed", "the archive ends without its end-of-archive blocks");
      }
      if (header.every((byte) => byte === 0)) return;
      checkChecksum(header);
      const typeFlag = header[156] === 0 ? "0" : String.fromCharCode(header[156]);
      const size = parseNumber(header.subarray(124, 136), "size");
      const padded = Math.ceil(size / BLOCK) * BLOCK;
      // Extension headers count as entries too: a run of empty ones would otherwise cost nothing.
      if (++entries > maxEntries) {
        throw new TarError("too-large", `the archive has more than ${maxEntries} entries`);
      }
      if (typeFlag === "x" || typeFlag === "g" || typeFlag === "L" || typeFlag === "K") {
        // Bounded together, not one by one: consecutive extensions pile up until their entry.
        extensionBytes += size;
        if (extensionBytes > maxExtension) {
          throw new TarError("too-large", `the header extensions of an entry exceed ${maxExtension} bytes`);
        }
        const data = await reader.readExactly(padded);
        const text = new TextDecoder().decode(data.subarray(0, size));
        if (typeFlag === "x") parsePax(text, pax);
        if (typeFlag === "L") longName = text.replace(/\0.*$/s, "");
        if (typeFlag === "K") longLink = text.replace(/\0.*$/s, "");
        continue;
      }
      const type = entryType(typeFlag);
      const paxSize = pax.get("size");
      const contentSize = paxSize !== undefined ? parseDecimal(paxSize) : size;
      const bodySize = contentSize;
      total += bodySize;
      if (total > maxTotal) {
        throw new TarError("too-large", `the archive's content exceeds ${maxTotal} bytes`);
      }
      const prefix = isUstar(header) ? cString(header.subarray(345, 500)) : "";
      const shortName = cString(header.subarray(0, 100));
      const name = pax.get("path") ?? longName ?? (prefix === "" ? shortName : `${prefix}/${shortName}`);
      const linkName = pax.get("linkpath") ?? longLink ?? cString(header.subarray(157, 257));
      pax = new Map();
      extensionBytes = 0;
      longName = longLink = undefined;
      const bodyPadded = Math.ceil(bodySize / BLOCK) * BLOCK;
      let consumed = false;
      const entry: TarEntry = {
        name,
        type,
        typeFlag,
        mode: parseNumber(header.subarray(100, 108), "mode") & 0o7777,
        size: bodySize,
        linkName,
        body: async (sink) => {
          if (consumed) throw new Error("a tar entry's body can be read once");
          consumed = true;
          let left = bodySize;
          while (left > 0) {
            const chunk = await reader.readExactly(Math.min(left, 64 * 1024));
            left -= chunk.length;
            await sink(chunk);
          }
          await reader.readExactly(bodyPadded - bodySize);
        },
      };
      yield entry;
      if (!consumed) {
        consumed = true;
        await reader.skip(bodyPadded);
      }
    }
  } finally {
    await reader.cancel();
  }
}

function entryType(flag: string): TarEntryType {
  switch (flag) {
    case "0":
    case "7":
      return "file";
    case "5":
      return "directory";
    case "2":
      return "symlink";
    case "1":
      return "hardlink";
    case "3":
    case "4":
      return "device";
    case "6":
      return "fifo";
  }
  return "other";
}

function isUstar(header: Uint8Array): boolean {
  return new TextDecoder().decode(header.subarray(257, 262)) === "ustar";
}

function cString(bytes: Uint8Array): string {
  const end = bytes.indexOf(0);
  return new TextDecoder().decode(end === -1 ? bytes : bytes.subarray(0, end));
}

/** An octal field (NUL/space padded) or a GNU base-256 one (high bit set). */
function parseNumber(field: Uint8Array, what: string): number {
  if (field[0] & 0x80) {
    let value = field[0] & 0x7f;
    for (const byte of field.subarray(1)) value = value * 256 + byte;
    if (!Number.isSafeInteger(value)) throw new TarError("malformed", `the ${what} field is out of range`);
    return value;
  }
  const text = cString(field).trim();
  if (text === "") return 0;
  if (!/^[0-7]+$/.test(text)) {
    throw new TarError("malformed", `the ${what} field ${JSON.stringify(text)} is not octal`);
  }
  return parseInt(text, 8);
}

function parseDecimal(text: string): number {
  if (!/^\d{1,15}$/.test(text)) {
    throw new TarError("malformed", `pax size ${JSON.stringify(text)} is not a number`);
  }
  return Number(text);
}

function checkChecksum(header: Uint8Array): void {
  const recorded = parseNumber(header.subarray(148, 156), "checksum");
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : header[i];
  if (sum !== recorded) {
    throw new TarError("malformed", "a header's checksum does not match (not a tar archive?)");
  }
}

/** Adds the pax records of `text` ("<length> <key>=<value>\n") to `records`, later ones replacing. */
function parsePax(text: string, records: Map<string, string>): void {
  const bytes = new TextEncoder().encode(text);
  let offset = 0;
  while (offset < bytes.length) {
    const space = bytes.indexOf(0x20, offset);
    const length = space === -1 ? NaN : Number(new TextDecoder().decode(bytes.subarray(offset, space)));
    if (!Number.isSafeInteger(length) || length <= 0 || offset + length > bytes.length) {
      throw new TarError("malformed", "a pax header record is malformed");
    }
    const record = new TextDecoder().decode(bytes.subarray(space + 1, offset + length - 1));
    const equals = record.indexOf("=");
    if (equals === -1) throw new TarError("malformed", "a pax header record has no '='");
    records.set(record.slice(0, equals), record.slice(equals + 1));
    offset += length;
  }
}

/** Reads exact byte counts from a byte stream of at most `maxBytes`. */
class BlockReader {
  readonly #reader: ReadableStreamDefaultReader<Uint8Array>;
  readonly #maxBytes: number;
  #buffer: Uint8Array = new Uint8Array(0);
  #done = false;
  #received = 0;

  constructor(stream: ReadableStream<Uint8Array>, maxBytes: number) {
    this.#reader = stream.getReader();
    this.#maxBytes = maxBytes;
  }

  /** Exactly `n` bytes, or undefined at a clean end of stream before any byte. */
  async read(n: number): Promise<Uint8Array | undefined> {
    while (this.#buffer.length < n && !this.#done) {
      let result: ReadableStreamReadResult<Uint8Array>;
      try {
        result = await this.#reader.read();
      } catch (error) {
        throw new TarError("malformed", `the archive does not decompress: ${(error as Error).message}`);
      }
      if (result.done) {
        this.#done = true;
        break;
      }
      this.#received += result.value.length;
      if (this.#received > this.#maxBytes) {
        throw new TarError("too-large", `the archive decompresses to more than ${this.#maxBytes} bytes`);
      }
      this.#buffer = this.#buffer.length === 0 ? result.value : concatBytes(this.#buffer, result.value);
    }
    if (this.#buffer.length === 0 && n > 0) return undefined;
    if (this.#buffer.length < n) throw new TarError("malformed", "the archive is truncated");
    const out = this.#buffer.subarray(0, n);
    this.#buffer = this.#buffer.subarray(n);
    return out;
  }

  async readExactly(n: number): Promise<Uint8Array> {
    if (n === 0) return new Uint8Array(0);
    const bytes = await this.read(n);
    if (bytes === undefined) throw new TarError("malformed", "the archive is truncated");
    return bytes;
  }

  async skip(n: number): Promise<void> {
    for (let left = n; left > 0;) {
      const chunk = await this.readExactly(Math.min(left, 64 * 1024));
      left -= chunk.length;
    }
  }

  async cancel(): Promise<void> {
    await this.#reader.cancel().catch(() => {});
  }
}
