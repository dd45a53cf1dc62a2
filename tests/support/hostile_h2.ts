/**
 * Hostile HTTP/2 clients for tests and benchmarks, on raw sockets
 * (`h2_frames.ts`): the GOAWAY-then-request sequence in one write, a
 * randomized fuzzer of frames, garbage, half-closes and abrupt closes,
 * thousands of streams on one connection, and slowloris connections.
 * Each client only sends; what the server does about it is for the caller
 * to check (the process is alive, answers, stays within memory).
 *
 * @module
 */
import * as net from "node:net";
import * as tls from "node:tls";
import * as h2 from "./h2_frames.ts";
import { sleep } from "../../src/async/sleep.ts";

/** Where to attack: an RPC server and one of its unary methods. */
export interface H2Target {
  hostname: string;
  port: number;
  /** TLS with ALPN h2, trusting these PEM CA certificates; or false for plaintext HTTP/2. */
  tls: false | { caCerts: string[] };
  /** A unary method's path, e.g. "/kms.API/GetDataKey". */
  path: string;
  /** A request message for it (serialized protobuf). */
  message: Uint8Array;
}

/**
 * Opens a raw connection to `target`; for TLS, completes the handshake and
 * checks that the server chose HTTP/2, so an attack never silently misses.
 */
export async function connectRaw(target: H2Target): Promise<Deno.Conn> {
  if (!target.tls) return await Deno.connect({ hostname: target.hostname, port: target.port });
  const conn = await Deno.connectTls({
    hostname: target.hostname,
    port: target.port,
    alpnProtocols: ["h2"],
    caCerts: target.tls.caCerts,
  });
  const { alpnProtocol } = await conn.handshake();
  if (alpnProtocol !== "h2") {
    conn.close();
    throw new Error(`the server chose ALPN ${alpnProtocol}, not h2`);
  }
  return conn;
}

/** The request HEADERS of a gRPC call to `target` on `streamId`. */
export function requestHeaders(target: H2Target, streamId: number, endStream = false): Uint8Array {
  const headers = h2.grpcRequestHeaders(
    target.path,
    `${target.hostname}:${target.port}`,
    target.tls ? "https" : "http",
  );
  return h2.headers(streamId, headers, { endStream });
}

/**
 * One connection that writes, in a single write, the preface, SETTINGS, a
 * GOAWAY (last stream 0, `code`) and a request on stream 1 (with its body
 * unless `withBody` is false, then HEADERS end the stream), then reads for
 * `lingerMs` and closes.
 */
export async function goawayThenRequest(
  target: H2Target,
  options: { code: number; withBody: boolean; lingerMs?: number },
): Promise<void> {
  const conn = await connectRaw(target);
  try {
    const request = options.withBody
      ? [requestHeaders(target, 1), h2.data(1, h2.grpcMessage(target.message), true)]
      : [requestHeaders(target, 1, true)];
    await conn.write(h2.concat(h2.PREFACE, h2.settings(), h2.goaway(0, options.code), ...request));
    await drainFor(conn, options.lingerMs ?? 50);
  } catch {
    // The server may reset the connection: that is its right.
  } finally {
    closeQuietly(conn);
  }
}

/** A small deterministic PRNG (mulberry32), so a failing fuzz round can be replayed from its seed. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * `rounds` connections, each sending the preface and SETTINGS and then 1–8
 * random frames (GOAWAY with random codes, RST_STREAM, requests, bodies,
 * garbage, WINDOW_UPDATE, PING, stray CONTINUATION, malformed HEADERS,
 * unknown types), split over random writes with small pauses, sometimes
 * half-closed, then closed abruptly. Resolves to the number of rounds that
 * could not even connect (a dead server shows up there).
 */
export async function fuzz(target: H2Target, options: { rounds: number; seed: number }): Promise<number> {
  const random = seededRandom(options.seed);
  const int = (below: number) => Math.floor(random() * below);
  const message = h2.grpcMessage(target.message);
  const frames: ((stream: number) => Uint8Array)[] = [
    () => h2.settings(random() < 0.5 ? {} : { 3: int(5), 4: int(70_000) }),
    () => h2.goaway(int(4) * 2 + int(2), int(3)),
    (stream) => h2.rstStream(stream, int(9)),
    (stream) => requestHeaders(target, stream, random() < 0.2),
    (stream) => h2.data(stream, message, random() < 0.7),
    () => crypto.getRandomValues(new Uint8Array(int(40))),
    (stream) => h2.windowUpdate(random() < 0.5 ? 0 : stream, int(100_000)),
    () => h2.ping(random() < 0.3),
    (stream) => h2.continuation(stream, h2.hpackLiterals([["x", "y"]]), random() < 0.5),
    (stream) => h2.headers(stream, [[":method", "GET"], ["bad", "x"]], { endHeaders: random() < 0.5 }),
    (stream) => h2.frame(int(20), int(256), stream, new Uint8Array(int(20))),
    () => h2.settings({}, true),
  ];
  let unreachable = 0;
  for (let round = 0; round < options.rounds; round++) {
    let conn: Deno.Conn;
    try {
      conn = await connectRaw(target);
    } catch {
      unreachable++;
      continue;
    }
    const parts = [h2.PREFACE, h2.settings()];
    let stream = 1;
    for (let i = 1 + int(8); i > 0; i--) {
      parts.push(frames[int(frames.length)](stream));
      if (random() < 0.3) stream += 2;
    }
    const bytes = h2.concat(...parts);
    const reading = drainFor(conn, 1000);
    try {
      const writes = random() < 0.5 ? 1 : 1 + int(4);
      let offset = 0;
      for (let i = 0; i < writes; i++) {
        const end = i === writes - 1 ? bytes.length : Math.min(bytes.length, offset + int(bytes.length));
        await conn.write(bytes.subarray(offset, end));
        offset = end;
        if (random() < 0.5) await sleep(int(5));
      }
      if (random() < 0.3) await conn.closeWrite();
      await sleep(int(20));
    } catch {
      // The server closed or reset the connection mid-write: fine.
    }
    closeQuietly(conn);
    await reading;
  }
  return unreachable;
}

/** What the server did with a flood of streams on one connection. */
export interface StreamFloodResult {
  /** SETTINGS_MAX_CONCURRENT_STREAMS from the server's SETTINGS, if it sent one. */
  advertisedMaxStreams: number | undefined;
  /** Streams the server refused (RST_STREAM REFUSED_STREAM) while the flood was open. */
  refused: number;
  /** Whether the server ended the connection (GOAWAY or close) while the flood was held. */
  connectionClosed: boolean;
  /** The error code of the server's GOAWAY, if it sent one. */
  goawayCode: number | undefined;
}

/** Options for {@linkcode floodStreams}. */
export interface StreamFloodOptions {
  /** Streams to open. */
  streams: number;
  /** How long to hold the connection afterwards (at most, with `untilEnded`). */
  holdMs: number;
  /** Stop holding once the server ends the connection (GOAWAY or close). */
  untilEnded?: boolean;
  /** Reset each stream (RST_STREAM CANCEL) right after opening it. */
  reset?: boolean;
  /** Streams per write; default 200. */
  batch?: number;
  /** Pause between writes; default none. */
  pauseMs?: number;
  /** Runs while the connection is held. */
  during?: () => Promise<void>;
}

/**
 * Opens `streams` streams on one connection (request HEADERS without
 * END_STREAM, so each waits for a body that never comes; with `reset`, each
 * is reset right after it is opened), holds the connection for `holdMs`
 * (or until the server ends it, with `untilEnded`) while `during` runs,
 * then closes it.
 */
export async function floodStreams(
  target: H2Target,
  options: StreamFloodOptions,
): Promise<StreamFloodResult> {
  const conn = await connectRaw(target);
  const result: StreamFloodResult = {
    advertisedMaxStreams: undefined,
    refused: 0,
    connectionClosed: false,
    goawayCode: undefined,
  };
  let serverSettings!: () => void;
  const settingsReceived = new Promise<void>((resolve) => serverSettings = resolve);
  const ended = new AbortController();
  const reading = readFrames(conn, (type, flags, _stream, payload) => {
    if (type === h2.FrameType.SETTINGS && !(flags & h2.Flag.ACK)) {
      for (let i = 0; i + 6 <= payload.length; i += 6) {
        const view = new DataView(payload.buffer, payload.byteOffset + i, 6);
        if (view.getUint16(0) === 0x3) result.advertisedMaxStreams = view.getUint32(2);
      }
      serverSettings();
    } else if (
      type === h2.FrameType.RST_STREAM && new DataView(payload.buffer, payload.byteOffset).getUint32(0) === 7
    ) {
      result.refused++;
    } else if (type === h2.FrameType.GOAWAY) {
      result.connectionClosed = true;
      result.goawayCode ??= new DataView(payload.buffer, payload.byteOffset).getUint32(4);
      ended.abort();
    }
  }).then(() => {
    result.connectionClosed = true;
    serverSettings();
    ended.abort();
  });
  try {
    await conn.write(h2.concat(h2.PREFACE, h2.settings()));
    await settingsReceived;
    await conn.write(h2.settings({}, true));
    const batch: Uint8Array[] = [];
    for (let i = 0; i < options.streams; i++) {
      batch.push(requestHeaders(target, 1 + 2 * i));
      if (options.reset) batch.push(h2.rstStream(1 + 2 * i, h2.ErrorCode.CANCEL));
      if (batch.length >= (options.batch ?? 200) * (options.reset ? 2 : 1) || i === options.streams - 1) {
        await conn.write(h2.concat(...batch.splice(0)));
        if (options.pauseMs) await sleep(options.pauseMs);
      }
    }
    const held = sleep(options.holdMs, options.untilEnded ? ended.signal : undefined).catch(() => {});
    await Promise.all([held, options.during?.()]);
  } catch {
    result.connectionClosed = true;
  } finally {
    closeQuietly(conn);
    await reading;
  }
  return result;
}

/** What happened to slowloris connections. */
export interface SlowlorisResult {
  /** Connections that got through (TCP connected; for TLS, the handshake done with ALPN h2). */
  established: number;
  /** Connections closed by the end of the run (all of them, when the server reaps them). */
  closed: number;
}

/**
 * Slowloris: `connections` connections from `localAddress`, each sending
 * the preface and then a request header block one byte every
 * `byteIntervalMs`, never finishing it, for `durationMs`; `during` runs
 * meanwhile, once the connections are open.
 */
export async function slowloris(
  target: H2Target,
  options: {
    connections: number;
    localAddress: string;
    byteIntervalMs: number;
    durationMs: number;
    during?: () => Promise<void>;
  },
): Promise<SlowlorisResult> {
  const block = requestHeaders(target, 1);
  const result: SlowlorisResult = { established: 0, closed: 0 };
  const sockets: net.Socket[] = [];
  const timers: ReturnType<typeof setInterval>[] = [];
  for (let i = 0; i < options.connections; i++) {
    const address = { host: target.hostname, port: target.port, localAddress: options.localAddress };
    const socket = target.tls
      ? tls.connect({ ...address, ALPNProtocols: ["h2"], ca: target.tls.caCerts })
      : net.connect(address);
    socket.on("error", () => {});
    socket.once("close", () => result.closed++);
    sockets.push(socket);
    socket.once(target.tls ? "secureConnect" : "connect", () => {
      if (target.tls && (socket as tls.TLSSocket).alpnProtocol !== "h2") return;
      result.established++;
      socket.write(h2.concat(h2.PREFACE, h2.settings()));
      let sent = 0;
      timers.push(setInterval(() => {
        if (socket.destroyed || sent >= block.length - 1) return;
        socket.write(block.subarray(sent, sent + 1));
        sent++;
      }, options.byteIntervalMs));
    });
  }
  await Promise.all([sleep(options.durationMs), sleep(options.durationMs / 3).then(options.during)]);
  const closed = result.closed;
  for (const timer of timers) clearInterval(timer);
  for (const socket of sockets) socket.destroy();
  return { ...result, closed };
}

/** Calls `onFrame` for every frame read from `conn` until it ends. */
async function readFrames(
  conn: Deno.Conn,
  onFrame: (type: number, flags: number, stream: number, payload: Uint8Array) => void,
): Promise<void> {
  let buffer: Uint8Array = new Uint8Array(0);
  const chunk = new Uint8Array(64 * 1024);
  try {
    for (;;) {
      const n = await conn.read(chunk);
      if (n === null) return;
      buffer = h2.concat(buffer, chunk.subarray(0, n));
      while (buffer.length >= 9) {
        const length = (buffer[0] << 16) | (buffer[1] << 8) | buffer[2];
        if (buffer.length < 9 + length) break;
        const stream = new DataView(buffer.buffer, buffer.byteOffset + 5, 4).getUint32(0) & 0x7fffffff;
        onFrame(buffer[3], buffer[4], stream, buffer.subarray(9, 9 + length));
        buffer = buffer.subarray(9 + length);
      }
    }
  } catch {
    // Reset by the server or closed by us.
  }
}

/** Reads and discards what `conn` receives for `ms` (or until it ends). */
async function drainFor(conn: Deno.Conn, ms: number): Promise<void> {
  const buffer = new Uint8Array(64 * 1024);
  const deadline = sleep(ms).then(() => "timeout" as const);
  try {
    for (;;) {
      const read = await Promise.race([conn.read(buffer), deadline]);
      if (read === "timeout" || read === null) return;
    }
  } catch {
    // Reset by the server.
  }
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // Already closed.
  }
}
