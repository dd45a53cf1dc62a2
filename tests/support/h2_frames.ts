/**
 * Raw HTTP/2 frames for hostile-peer tests: the client preface and every
 * frame type a test needs, encoded by hand (HPACK literals without
 * indexing), so a test can send exactly the bytes an attacker would, in
 * one write, malformed or out of order.
 *
 * @module
 */
import { concatBytes } from "../../src/bytes/concat.ts";

/** The client connection preface (RFC 9113 §3.4). */
export const PREFACE = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** Frame types (RFC 9113 §6). */
export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

/** Frame flags. */
export const Flag = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

/** Error codes (RFC 9113 §7). */
export const ErrorCode = { NO_ERROR: 0x0, PROTOCOL_ERROR: 0x1, INTERNAL_ERROR: 0x2, CANCEL: 0x8 } as const;

/** One frame: a 9-byte header and the payload. */
export function frame(type: number, flags: number, streamId: number, payload: Uint8Array = new Uint8Array()) {
  const out = new Uint8Array(9 + payload.length);
  const view = new DataView(out.buffer);
  view.setUint8(0, (payload.length >>> 16) & 0xff);
  view.setUint16(1, payload.length & 0xffff);
  view.setUint8(3, type);
  view.setUint8(4, flags);
  view.setUint32(5, streamId & 0x7fffffff);
  out.set(payload, 9);
  return out;
}

/** A SETTINGS frame; `settings` maps identifiers to values. */
export function settings(values: Record<number, number> = {}, ack = false): Uint8Array {
  const entries = Object.entries(values);
  const payload = new Uint8Array(entries.length * 6);
  const view = new DataView(payload.buffer);
  entries.forEach(([id, value], i) => {
    view.setUint16(i * 6, Number(id));
    view.setUint32(i * 6 + 2, value);
  });
  return frame(FrameType.SETTINGS, ack ? Flag.ACK : 0, 0, payload);
}

/** A GOAWAY frame. */
export function goaway(lastStreamId: number, code: number, debug = new Uint8Array()): Uint8Array {
  const payload = new Uint8Array(8 + debug.length);
  const view = new DataView(payload.buffer);
  view.setUint32(0, lastStreamId & 0x7fffffff);
  view.setUint32(4, code);
  payload.set(debug, 8);
  return frame(FrameType.GOAWAY, 0, 0, payload);
}

/** A RST_STREAM frame. */
export function rstStream(streamId: number, code: number): Uint8Array {
  const payload = new Uint8Array(4);
  new DataView(payload.buffer).setUint32(0, code);
  return frame(FrameType.RST_STREAM, 0, streamId, payload);
}

/** A WINDOW_UPDATE frame. */
export function windowUpdate(streamId: number, increment: number): Uint8Array {
  const payload = new Uint8Array(4);
  new DataView(payload.buffer).setUint32(0, increment & 0x7fffffff);
  return frame(FrameType.WINDOW_UPDATE, 0, streamId, payload);
}

/** A PING frame. */
export function ping(ack = false, data = new Uint8Array(8)): Uint8Array {
  return frame(FrameType.PING, ack ? Flag.ACK : 0, 0, data);
}

/** A DATA frame. */
export function data(streamId: number, payload: Uint8Array, endStream: boolean): Uint8Array {
  return frame(FrameType.DATA, endStream ? Flag.END_STREAM : 0, streamId, payload);
}

/** A HEADERS frame carrying `headers` as HPACK literals (no Huffman, no indexing). */
export function headers(
  streamId: number,
  fields: [string, string][],
  options: { endStream?: boolean; endHeaders?: boolean } = {},
): Uint8Array {
  const flags = (options.endStream ? Flag.END_STREAM : 0) |
    (options.endHeaders === false ? 0 : Flag.END_HEADERS);
  return frame(FrameType.HEADERS, flags, streamId, hpackLiterals(fields));
}

/** A CONTINUATION frame. */
export function continuation(streamId: number, block: Uint8Array, endHeaders: boolean): Uint8Array {
  return frame(FrameType.CONTINUATION, endHeaders ? Flag.END_HEADERS : 0, streamId, block);
}

/** An HPACK header block of "literal header field without indexing, new name" entries. */
export function hpackLiterals(fields: [string, string][]): Uint8Array {
  const parts: number[] = [];
  const text = new TextEncoder();
  for (const [name, value] of fields) {
    parts.push(0x00);
    for (const string of [name, value]) {
      const bytes = text.encode(string);
      parts.push(...hpackInteger(bytes.length, 7, 0x00), ...bytes);
    }
  }
  return new Uint8Array(parts);
}

function hpackInteger(value: number, prefixBits: number, firstByte: number): number[] {
  const max = (1 << prefixBits) - 1;
  if (value < max) return [firstByte | value];
  const out = [firstByte | max];
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest & 0x7f) | 0x80);
    rest >>>= 7;
  }
  out.push(rest);
  return out;
}

/** The request headers of a unary gRPC call to `path` on `authority`. */
export function grpcRequestHeaders(
  path: string,
  authority: string,
  scheme: "http" | "https",
): [string, string][] {
  return [
    [":method", "POST"],
    [":scheme", scheme],
    [":path", path],
    [":authority", authority],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
  ];
}

/** A gRPC length-prefixed message (uncompressed). */
export function grpcMessage(message: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + message.length);
  new DataView(out.buffer).setUint32(1, message.length);
  out.set(message, 5);
  return out;
}

/** Concatenates byte arrays. */
export const concat: typeof concatBytes = concatBytes;
