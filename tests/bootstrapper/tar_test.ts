import assert from "node:assert/strict";
import { TarError, tarGzEntries, type TarLimits } from "../../src/bootstrapper/tar.ts";
import { type TarEntry as Entry, tarGz } from "../support/tar.ts";

/** One pax record, "<length> <key>=<value>\n", its length counting itself. */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let length = body.length + 1;
  while (`${length}${body}`.length !== length) length++;
  return `${length}${body}`;
}

/** The names of the archive's entries, or the TarError's reason and message. */
async function read(entries: Entry[], limits: TarLimits = {}): Promise<string[] | [string, string]> {
  const bytes = await tarGz(entries);
  const names: string[] = [];
  try {
    for await (const entry of tarGzEntries(ReadableStream.from([bytes]), limits)) names.push(entry.name);
  } catch (error) {
    if (error instanceof TarError) return [error.reason, error.message];
    throw error;
  }
  return names;
}

Deno.test("tar: header extensions and the bounds on them", async (t) => {
  const rows: { name: string; entries: Entry[]; limits?: TarLimits; expect: RegExp | string[] }[] = [
    {
      name: "a pax path names the next entry; a later record replaces an earlier one",
      entries: [
        {
          name: "PaxHeaders/f",
          type: "x",
          content: paxRecord("path", "first") + paxRecord("path", "long/name"),
        },
        { name: "f", content: "x" },
        { name: "g" },
      ],
      expect: ["long/name", "g"],
    },
    {
      name: "consecutive pax headers are bounded together, not one by one",
      entries: [
        { name: "PaxHeaders/f", type: "x", content: paxRecord("a", "v".repeat(60)) },
        { name: "PaxHeaders/f", type: "x", content: paxRecord("b", "v".repeat(60)) },
        { name: "f" },
      ],
      limits: { maxExtensionBytes: 100 },
      expect: /too-large: the header extensions of an entry exceed 100 bytes/,
    },
    {
      name: "a GNU long name and a pax header are bounded together",
      entries: [
        { name: "././@LongLink", type: "L", content: "n".repeat(60) },
        { name: "PaxHeaders/f", type: "x", content: paxRecord("a", "v".repeat(60)) },
        { name: "f" },
      ],
      limits: { maxExtensionBytes: 100 },
      expect: /too-large: the header extensions/,
    },
    {
      name: "the extension bound starts afresh at each entry",
      entries: [
        { name: "PaxHeaders/f", type: "x", content: paxRecord("a", "v".repeat(60)) },
        { name: "f" },
        { name: "PaxHeaders/g", type: "x", content: paxRecord("a", "v".repeat(60)) },
        { name: "g" },
      ],
      limits: { maxExtensionBytes: 100 },
      expect: ["f", "g"],
    },
    {
      name: "empty global headers count against the entry limit",
      entries: [...Array(5).fill({ name: "pax_global_header", type: "g" }), { name: "f" }],
      limits: { maxEntries: 3 },
      expect: /too-large: the archive has more than 3 entries/,
    },
    {
      name: "the decompressed size is bounded, headers and padding included",
      entries: [{ name: "f", content: "x".repeat(4000) }, { name: "g", content: "y" }],
      limits: { maxDecompressedBytes: 4096 },
      expect: /too-large: the archive decompresses to more than 4096 bytes/,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const result = await read(row.entries, row.limits);
      if (Array.isArray(row.expect)) assert.deepEqual(result, row.expect);
      else assert.match(result.join(": "), row.expect);
    });
  }
});
