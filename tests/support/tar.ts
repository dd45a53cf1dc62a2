/**
 * Hand-built tar.gz archives for component tests, so tests can build what
 * GNU tar would refuse to (entries with "..", absolute names, escaping links).
 *
 * @module
 */

/** One entry of a hand-built tar archive (so the tests can build what GNU tar would refuse to). */
export interface TarEntry {
  name: string;
  /** Besides entries, the header extensions: pax "x" (per entry) and "g" (global), GNU "L" and "K" long names. */
  type?: "0" | "5" | "2" | "1" | "3" | "6" | "x" | "g" | "L" | "K";
  mode?: number;
  content?: string;
  link?: string;
}

function header(entry: TarEntry, size: number): Uint8Array {
  const block = new Uint8Array(512);
  const put = (offset: number, text: string) => block.set(new TextEncoder().encode(text), offset);
  const octal = (offset: number, length: number, value: number) =>
    put(offset, value.toString(8).padStart(length - 1, "0") + "\0");
  put(0, entry.name);
  octal(100, 8, entry.mode ?? 0o644);
  octal(108, 8, 0);
  octal(116, 8, 0);
  octal(124, 12, size);
  octal(136, 12, 1_700_000_000);
  put(148, "        ");
  put(156, entry.type ?? "0");
  put(157, entry.link ?? "");
  put(257, "ustar\0");
  put(263, "00");
  let sum = 0;
  for (const byte of block) sum += byte;
  put(148, sum.toString(8).padStart(6, "0") + "\0 ");
  return block;
}

/** A gzip-compressed tar archive of `entries` (an extension's `content` is its raw data). */
export async function tarGz(entries: TarEntry[]): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  for (const entry of entries) {
    const content = new TextEncoder().encode(entry.content ?? "");
    parts.push(header(entry, content.length));
    const padded = new Uint8Array(Math.ceil(content.length / 512) * 512);
    padded.set(content);
    parts.push(padded);
  }
  parts.push(new Uint8Array(1024));
  const gzip = new Blob(parts as BlobPart[]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Uint8Array(await new Response(gzip).arrayBuffer());
}

/** A component's `hash` field for `bytes`: "sha256:<hex>". */
export async function componentHash(bytes: Uint8Array): Promise<string> {
  return `sha256:${new Uint8Array(await crypto.subtle.digest("SHA-256", bytes as BufferSource)).toHex()}`;
}
