import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { concatBytes } from "../../src/bytes/concat.ts";
import { coalesce } from "../../src/rpc/coalesce.ts";

async function* chunksOf(parts: Uint8Array[], failure?: Error): AsyncGenerator<Uint8Array> {
  for (const part of parts) yield part;
  if (failure) throw failure;
}

const bytes = (length: number, seed = 0) => Uint8Array.from({ length }, (_, i) => (i * 31 + seed) & 0xff);
const oneByteFrames = (body: Uint8Array) => [...body].map((byte) => Uint8Array.of(byte));

Deno.test("coalesce gathers a body into few large chunks, whatever its framing", async (t) => {
  const rows: { name: string; parts: Uint8Array[]; chunkBytes: number; wantSizes: number[] }[] = [
    { name: "no body", parts: [], chunkBytes: 16, wantSizes: [] },
    { name: "one small chunk", parts: [bytes(5)], chunkBytes: 16, wantSizes: [5] },
    { name: "one-byte frames", parts: oneByteFrames(bytes(40)), chunkBytes: 16, wantSizes: [16, 16, 8] },
    {
      name: "40,000 one-byte frames, 16 KiB chunks",
      parts: oneByteFrames(bytes(40_000)),
      chunkBytes: 16 * 1024,
      wantSizes: [16_384, 16_384, 7_232],
    },
    { name: "a large chunk passes as it is", parts: [bytes(40)], chunkBytes: 16, wantSizes: [40] },
    {
      name: "small, large, small",
      parts: [bytes(3), bytes(40), bytes(3)],
      chunkBytes: 16,
      wantSizes: [16, 16, 14],
    },
    {
      name: "chunks that fill it exactly",
      parts: [bytes(8), bytes(8), bytes(16)],
      chunkBytes: 16,
      wantSizes: [16, 16],
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const out: Uint8Array[] = [];
      for await (const chunk of coalesce(chunksOf(row.parts), row.chunkBytes)) out.push(chunk.slice());
      assert.deepEqual(out.map((chunk) => chunk.byteLength), row.wantSizes);
      assert.deepEqual(concatBytes(...out), concatBytes(...row.parts), "the same bytes in the same order");
    });
  }
});

Deno.test("coalesce passes on what it gathered, then the body's failure", async () => {
  const failure = new Error("stream reset");
  const out: number[] = [];
  await assert.rejects(async () => {
    for await (const chunk of coalesce(chunksOf(oneByteFrames(bytes(20)), failure), 16)) {
      out.push(chunk.byteLength);
    }
  }, (error) => error === failure);
  assert.deepEqual(out, [16, 4]);
});

Deno.test("coalesce: a buffer grows with what arrived, so a tiny body stays tiny", async () => {
  const out: Uint8Array[] = [];
  for await (const chunk of coalesce(chunksOf(oneByteFrames(bytes(3))), 16 * 1024)) out.push(chunk);
  assert.equal(out.length, 1);
  assert.equal(out[0].byteLength, 3);
  assert.equal(out[0].buffer.byteLength, 3, "the last chunk is copied to its size");
});

Deno.test("coalesce copies every chunk as it arrives: a sender reusing its buffer changes nothing", async (t) => {
  for (
    const [name, size] of [["a body of one small chunk", 10], ["a body of one large chunk", 40]] as const
  ) {
    await t.step(name, async () => {
      const reused = Buffer.from(bytes(size)); // as node:http2 delivers chunks: Buffer.slice() is a view
      const original = Uint8Array.from(reused);
      const out: Uint8Array[] = [];
      for await (const chunk of coalesce(chunksOf([reused]), 16)) {
        out.push(chunk);
        reused.fill(0xee); // the runtime writes the next frame into the same memory
      }
      assert.deepEqual(concatBytes(...out), original);
    });
  }
});
