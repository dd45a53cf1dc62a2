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
 * body costs no more than its size. A chunk that is that large already is
 * passed on as it is. When `body` fails, what was gathered is passed on
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
  let buffer = new Uint8Array(0);
  let filled = 0;
  try {
    for await (const chunk of body) {
      if (filled === 0 && chunk.byteLength >= chunkBytes) {
        yield chunk;
        continue;
      }
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
    }
  } catch (error) {
    if (filled > 0) yield buffer.slice(0, filled);
    throw error;
  }
  if (filled > 0) yield buffer.slice(0, filled);
}
