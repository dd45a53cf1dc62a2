/**
 * Request bodies as a few large chunks, however the peer framed them.
 *
 * Deno's `node:http2` hands over one chunk per DATA frame, and a peer may
 * send a body one byte per frame. Held as such, every chunk costs far more
 * heap than its byte (about 150 bytes of object for each, none of it in the
 * byte budgets), and Connect's envelope decoder adds up the length of all
 * the chunks it holds on every new one: quadratic work on the event loop (a
 * 120 KB message in one-byte frames stalled the join service for 18 s).
 *
 * @module
 */

/** Chunks are gathered up to this size before they are passed on. */
export const COALESCED_CHUNK_BYTES = 16 * 1024;

/**
 * `body`'s bytes in chunks of {@linkcode COALESCED_CHUNK_BYTES} (the last
 * one shorter), copied into buffers that grow with what arrived, so a tiny
 * body costs no more than its size. A chunk that is that large already, or
 * a body of one chunk, is passed on as one copy of itself. Every byte is
 * copied as it arrives: Deno's `node:http2` may reuse a chunk's memory for
 * the frames after it, and a parsed message keeps views of its bytes
 * (without the copy, a join request's nonce changed while its call waited). When `body` fails, what was gathered is passed on
 * first, then the failure.
 *
 * It waits for a whole chunk or the end of the body before it yields, so it
 * suits request bodies that end after their messages (unary and server
 * streaming calls), not a client stream whose messages must arrive one by
 * one.
 */
export async function* coalesce(
  body: AsyncIterable<Uint8Array>,
  chunkBytes = COALESCED_CHUNK_BYTES,
): AsyncGenerator<Uint8Array> {
  // A lone chunk is held as one copy (most bodies are one frame); gathering starts with a second one.
  let lone: Uint8Array | undefined;
  let buffer = new Uint8Array(0);
  let filled = 0;
  const append = function* (chunk: Uint8Array): Generator<Uint8Array> {
    let offset = 0;
    while (offset < chunk.byteLength) {
      const taken = Math.min(chunkBytes - filled, chunk.byteLength - offset);
      if (filled + taken > buffer.byteLength) {
        const grown = new Uint8Array(
          Math.min(chunkBytes, Math.max(filled + taken, 2 * buffer.byteLength, 1024)),
        );
        grown.set(buffer.subarray(0, filled));
        buffer = grown;
      }
      buffer.set(chunk.subarray(offset, offset + taken), filled);
      filled += taken;
      offset += taken;
      if (filled === chunkBytes) {
        yield buffer;
        buffer = new Uint8Array(0);
        filled = 0;
      }
    }
  };
  const gathered = () => lone ?? (filled > 0 ? buffer.slice(0, filled) : undefined);
  try {
    for await (const chunk of body) {
      if (filled === 0 && !lone) {
        // Copied at once: the runtime may reuse a chunk's memory for the frames after it. (Not with
        // `slice()`: the chunks are Node Buffers, whose `slice()` is a view.)
        if (chunk.byteLength >= chunkBytes) yield new Uint8Array(chunk);
        else lone = new Uint8Array(chunk);
        continue;
      }
      if (lone) {
        const first = lone;
        lone = undefined;
        yield* append(first);
      }
      yield* append(chunk);
    }
  } catch (error) {
    const rest = gathered();
    if (rest) yield rest;
    throw error;
  }
  const rest = gathered();
  if (rest) yield rest;
}
