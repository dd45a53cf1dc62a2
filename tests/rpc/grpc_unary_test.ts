/**
 * The gRPC unary short path (src/rpc/grpc_unary.ts) answers every request
 * exactly as Connect's own adapter does: each row is sent, as raw HTTP/2,
 * to the RPC handler and to connect-node's `connectNodeAdapter` serving the
 * same service, and the two answers (status, headers, body, trailers) must
 * be equal. Rows the short path takes and rows it must leave to Connect
 * (malformed, compressed, other encodings) alike.
 *
 * @module
 */
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import { gzipSync } from "node:zlib";
import type { AddressInfo } from "node:net";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ConnectRouterOptions,
  createConnectRouter,
  createContextValues,
} from "@connectrpc/connect";
import { createAsyncIterable, type UniversalServerRequest } from "@connectrpc/connect/protocol";
import { compressionBrotli, compressionGzip, connectNodeAdapter } from "@connectrpc/connect-node";
import { concatBytes } from "../../src/bytes/concat.ts";
import { API, GetDataKeyRequestSchema } from "../../src/gen/kms/kms_pb.ts";
import { createRpcHandler } from "../../src/rpc/handler.ts";
import { GrpcUnaryRoutes, RESPONSE_COMPRESS_MIN_BYTES } from "../../src/rpc/grpc_unary.ts";

const READ_MAX_BYTES = 1024;
/** The router options `createRpcHandler` gives both paths, for a server with READ_MAX_BYTES. */
const ROUTER_OPTIONS: ConnectRouterOptions = {
  readMaxBytes: READ_MAX_BYTES,
  acceptCompression: [compressionGzip, compressionBrotli],
  compressMinBytes: RESPONSE_COMPRESS_MIN_BYTES,
};
const PATH = "/kms.API/GetDataKey";

/** The service: what it does depends on the requested key ID. */
function routes(router: ConnectRouter): void {
  router.service(API, {
    async getDataKey(request, context) {
      switch (request.dataKeyId) {
        case "connect-error":
          throw new ConnectError("refused: reasons", Code.FailedPrecondition, { "x-reason": "a reason" }, [
            { desc: GetDataKeyRequestSchema, value: { dataKeyId: "detail", length: 7 } },
          ]);
        case "plain-error":
          throw new Error("a bug with a secret 5ecret");
        case "undefined-error":
          throw undefined;
        case "slow":
          await new Promise((_, reject) =>
            context.signal.addEventListener("abort", () => reject(context.signal.reason), { once: true })
          );
          throw new Error("unreachable");
        case "headers":
          context.responseHeader.set("x-header", "h");
          context.responseTrailer.set("x-trailer", "t");
          return { dataKey: new Uint8Array([1, 2]) };
        default:
          return { dataKey: new Uint8Array(request.length).fill(7) };
      }
    },
  });
}

function message(dataKeyId: string, length = 4): Uint8Array {
  return toBinary(GetDataKeyRequestSchema, create(GetDataKeyRequestSchema, { dataKeyId, length }));
}

function envelope(data: Uint8Array, flags = 0, length = data.byteLength): Uint8Array {
  const prefix = new Uint8Array(5);
  prefix[0] = flags;
  new DataView(prefix.buffer).setUint32(1, length);
  return concatBytes(prefix, data);
}

interface Row {
  name: string;
  /** Whether the short path takes the call (the others go to Connect's handler). */
  shortPath?: boolean;
  /** Writes the body in this many pieces (default one). */
  writes?: number;
  body: Uint8Array;
  headers?: http2.OutgoingHttpHeaders;
}

const GRPC = { "content-type": "application/grpc" };
const ROWS: Row[] = [
  { name: "a plain call", shortPath: true, body: envelope(message("k")), headers: GRPC },
  {
    name: "application/grpc+proto",
    shortPath: true,
    body: envelope(message("k")),
    headers: { "content-type": "application/grpc+proto" },
  },
  { name: "an empty message", shortPath: true, body: envelope(new Uint8Array()), headers: GRPC },
  {
    name: "a timeout",
    shortPath: true,
    body: envelope(message("k")),
    headers: { ...GRPC, "grpc-timeout": "5S" },
  },
  { name: "a malformed timeout", body: envelope(message("k")), headers: { ...GRPC, "grpc-timeout": "soon" } },
  {
    name: "a deadline that passes",
    shortPath: true,
    body: envelope(message("slow")),
    headers: { ...GRPC, "grpc-timeout": "50m" },
  },
  {
    name: "the client accepts gzip",
    shortPath: true,
    body: envelope(message("k", 2000)),
    headers: { ...GRPC, "grpc-accept-encoding": "gzip, br" },
  },
  {
    name: "a gzip-compressed message",
    body: envelope(gzipSync(message("k")), 1),
    headers: { ...GRPC, "grpc-encoding": "gzip" },
  },
  {
    name: "identity encoding",
    shortPath: true,
    body: envelope(message("k")),
    headers: { ...GRPC, "grpc-encoding": "identity" },
  },
  {
    name: "an unknown encoding",
    body: envelope(message("k")),
    headers: { ...GRPC, "grpc-encoding": "snappy" },
  },
  { name: "the compressed flag without an encoding", body: envelope(message("k"), 1), headers: GRPC },
  { name: "an unknown flag", body: envelope(message("k"), 0x80), headers: GRPC },
  { name: "a truncated envelope", body: envelope(message("k"), 0, 100), headers: GRPC },
  { name: "a short prefix", body: new Uint8Array([0, 0, 0]), headers: GRPC },
  {
    name: "bytes after the message",
    body: concatBytes(envelope(message("k")), new Uint8Array([1])),
    headers: GRPC,
  },
  { name: "two messages", body: concatBytes(envelope(message("a")), envelope(message("b"))), headers: GRPC },
  { name: "no message", body: new Uint8Array(), headers: GRPC },
  { name: "a message over readMaxBytes", body: envelope(new Uint8Array(READ_MAX_BYTES + 1)), headers: GRPC },
  {
    name: "a message that does not parse",
    body: envelope(new Uint8Array([0xff, 0xff, 0xff])),
    headers: GRPC,
  },
  {
    name: "a message with a wrong wire type",
    body: envelope(new Uint8Array([0x0d, 1, 2, 3, 4])),
    headers: GRPC,
  },
  { name: "the service refuses", shortPath: true, body: envelope(message("connect-error")), headers: GRPC },
  { name: "the service fails", shortPath: true, body: envelope(message("plain-error")), headers: GRPC },
  {
    name: "the service throws undefined",
    shortPath: true,
    body: envelope(message("undefined-error")),
    headers: GRPC,
  },
  {
    name: "a message of 1,000 bytes in 1,000 writes",
    shortPath: true,
    body: envelope(message("k".repeat(994))),
    headers: GRPC,
    writes: 1_000,
  },
  {
    name: "the service sets headers and trailers",
    shortPath: true,
    body: envelope(message("headers")),
    headers: GRPC,
  },
  {
    name: "JSON",
    body: envelope(new TextEncoder().encode('{"dataKeyId":"k","length":2}')),
    headers: { "content-type": "application/grpc+json" },
  },
  {
    name: "an unknown content type",
    body: envelope(message("k")),
    headers: { "content-type": "application/grpc+xml" },
  },
  { name: "GET", body: new Uint8Array(), headers: { ...GRPC, ":method": "GET" } },
];

interface Answer {
  status: number;
  headers: Record<string, unknown>;
  body: string;
  trailers: Record<string, unknown>;
}

/** Sends one request as raw HTTP/2 and collects the answer, without the date header. */
function send(session: http2.ClientHttp2Session, row: Row): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ":path": PATH, ...row.headers });
    const chunks: Uint8Array[] = [];
    let status = 0;
    let headers: Record<string, unknown> = {};
    let trailers: Record<string, unknown> = {};
    stream.on("response", (received) => {
      status = Number(received[":status"]);
      headers = withoutVolatile(received);
    });
    stream.on("trailers", (received) => trailers = withoutVolatile(received));
    stream.on("data", (chunk: Uint8Array) => chunks.push(chunk));
    stream.on("end", () => resolve({ status, headers, body: concatBytes(...chunks).toHex(), trailers }));
    stream.on("error", reject);
    if (stream.writableEnded) return;
    const size = Math.ceil(row.body.byteLength / (row.writes ?? 1)) || 1;
    let offset = 0;
    for (; offset + size < row.body.byteLength; offset += size) {
      stream.write(row.body.subarray(offset, offset + size));
    }
    stream.end(row.body.subarray(offset));
  });
}

function withoutVolatile(headers: http2.IncomingHttpHeaders): Record<string, unknown> {
  const { date: _date, ...rest } = headers;
  return rest;
}

/** An h2c server on a free loopback port for `handler`; closed with the returned function. */
async function listen(
  handler: (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void,
): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http2.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

Deno.test("the gRPC unary short path answers every request exactly as Connect's adapter does", async (t) => {
  const ours = await listen(createRpcHandler({
    routes,
    readMaxBytes: READ_MAX_BYTES,
    contextValues: () => createContextValues(),
    maxRequestBytesPerConnection: 1 << 20,
    maxRequestBytesInFlight: 1 << 20,
    requestTimeoutMs: 30_000,
    maxCallsInProgress: 4,
    maxCallsWaiting: 4,
  }));
  const connects = await listen(connectNodeAdapter({ routes, ...ROUTER_OPTIONS }));
  const ourSession = http2.connect(ours.url);
  const connectSession = http2.connect(connects.url);
  try {
    for (const row of ROWS) {
      await t.step(row.name, async () => {
        const [answer, expected] = await Promise.all([send(ourSession, row), send(connectSession, row)]);
        assert.deepEqual(answer, expected);
      });
    }
    await t.step("the rows cover both paths: answered and refused calls", async () => {
      const plain = await send(ourSession, ROWS[0]);
      assert.equal(plain.trailers["grpc-status"], "0");
      assert.equal(plain.body.length > 10, true);
      const refused = await send(ourSession, ROWS.find((row) => row.name === "the service refuses")!);
      assert.equal(refused.trailers["grpc-status"], String(Code.FailedPrecondition));
      assert.equal(refused.trailers["x-reason"], "a reason");
    });
  } finally {
    ourSession.close();
    connectSession.close();
    await ours.close();
    await connects.close();
  }
});

/** `row` as Connect's handlers receive it, for `path`. */
function universalRequest(path: string, row: Row): UniversalServerRequest {
  const { ":method": method = "POST", ...headers } = row.headers ?? {};
  return {
    httpVersion: "2.0",
    method: String(method),
    url: `http://127.0.0.1${path}`,
    header: new Headers(headers as Record<string, string>),
    body: createAsyncIterable([row.body]),
    signal: new AbortController().signal,
    contextValues: createContextValues(),
  };
}

Deno.test("the gRPC unary short path takes plain binary unary calls and leaves every other to Connect", async (t) => {
  const shortPath = new GrpcUnaryRoutes(ROUTER_OPTIONS);
  routes(shortPath.recording(createConnectRouter()));
  for (const row of ROWS) {
    await t.step(`${row.name}: ${row.shortPath ? "short path" : "Connect"}`, async () => {
      const call = shortPath.prepare(PATH, universalRequest(PATH, row), [row.body]);
      let connect = 0;
      const connectsAnswer = { status: 599, header: new Headers() };
      const answer = await call?.(() => {
        connect++;
        return Promise.resolve(connectsAnswer);
      });
      const taken = call !== undefined && connect === 0;
      assert.equal(taken, row.shortPath ?? false);
      if (call && !taken) assert.equal(answer, connectsAnswer, "a message that does not parse is Connect's");
    });
  }
  await t.step("a path with no unary method registered: Connect", () => {
    const other = "/kms.API/Other";
    assert.equal(shortPath.prepare(other, universalRequest(other, ROWS[0]), [ROWS[0].body]), undefined);
  });
});

Deno.test("the gRPC unary short path takes calls only under router options it applies as Connect does", async (t) => {
  const rows: { name: string; options: ConnectRouterOptions; takes: boolean }[] = [
    { name: "the servers' options", options: ROUTER_OPTIONS, takes: true },
    {
      name: "options Connect applies to JSON only",
      options: { ...ROUTER_OPTIONS, jsonOptions: {} },
      takes: true,
    },
    {
      name: "a cap on deadlines (applied)",
      options: { ...ROUTER_OPTIONS, maxTimeoutMs: 60_000 },
      takes: true,
    },
    { name: "gRPC switched on explicitly", options: { ...ROUTER_OPTIONS, grpc: true }, takes: true },
    { name: "gRPC switched off", options: { ...ROUTER_OPTIONS, grpc: false }, takes: false },
    {
      name: "Connect's compression threshold (1 KiB by default)",
      options: { ...ROUTER_OPTIONS, compressMinBytes: undefined },
      takes: false,
    },
    {
      name: "a request gate",
      options: { ...ROUTER_OPTIONS, requestGate: () => Promise.resolve() } as ConnectRouterOptions,
      takes: false,
    },
    {
      name: "an option unknown to the short path",
      options: { ...ROUTER_OPTIONS, addedLater: 1 } as ConnectRouterOptions,
      takes: false,
    },
  ];
  for (const row of rows) {
    await t.step(`${row.name}: ${row.takes ? "short path" : "Connect"}`, () => {
      const shortPath = new GrpcUnaryRoutes(row.options);
      routes(shortPath.recording(createConnectRouter(row.options)));
      assert.equal(
        shortPath.prepare(PATH, universalRequest(PATH, ROWS[0]), [ROWS[0].body]) !== undefined,
        row.takes,
      );
    });
  }
});
