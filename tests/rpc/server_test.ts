import assert from "node:assert/strict";
import * as http2 from "node:http2";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { API } from "../../src/gen/kms/kms_pb.ts";
import { serveRpc } from "../../src/rpc/server.ts";
import { peerAddressKey } from "../../src/rpc/peer.ts";

Deno.test("serveRpc passes the peer address to handlers and closes idle connections", async () => {
  let peer = "";
  const server = await serveRpc({
    routes: (router) =>
      router.service(API, {
        getDataKey(_req, ctx) {
          peer = ctx.values.get(peerAddressKey);
          return { dataKey: new Uint8Array(1) };
        },
      }),
    hostname: "127.0.0.1",
    port: 0,
    idleTimeoutMs: 200,
  });
  try {
    const baseUrl = `http://127.0.0.1:${server.address.port}`;
    // Deno 2.9.6 can abort in nghttp2 when a client session with streams gets a GOAWAY: close it first.
    const sessionManager = new Http2SessionManager(baseUrl);
    try {
      const client = createClient(API, createGrpcTransport({ baseUrl, sessionManager }));
      await client.getDataKey({ dataKeyId: "x", length: 1 });
    } finally {
      sessionManager.abort();
    }
    assert.equal(peer, "127.0.0.1");

    // A connection that never opens a stream is closed by the server once idle.
    const session = http2.connect(baseUrl);
    session.on("error", () => {});
    const closed = new Promise<void>((resolve) => session.once("close", () => resolve()));
    const start = performance.now();
    await closed;
    assert.ok(performance.now() - start < 5000, "the idle connection was closed by the server");
  } finally {
    await server.shutdown(1000);
  }
});

Deno.test("serveRpc refuses to listen outside its net permissions, with a clear error", async () => {
  await assert.rejects(
    serveRpc({ routes: () => {}, hostname: "192.0.2.1", port: 0 }),
    /listen address 192\.0\.2\.1 is outside this process's net permissions/,
  );
});

Deno.test("serveRpc closes connections beyond the per-peer limit at once", async () => {
  const server = await serveRpc({
    routes: () => {},
    hostname: "127.0.0.1",
    port: 0,
    maxConnectionsPerPeer: 2,
  });
  const connections: Deno.Conn[] = [];
  try {
    for (let i = 0; i < 3; i++) {
      connections.push(await Deno.connect({ hostname: "127.0.0.1", port: server.address.port }));
    }
    // The third connection is closed by the server: reading it ends (or fails) instead of waiting.
    const read = await Promise.race([
      connections[2].read(new Uint8Array(64)).then((n) => n === null ? "closed" : "open", () => "closed"),
      new Promise((resolve) => setTimeout(() => resolve("open"), 2000)),
    ]);
    assert.equal(read, "closed");
    // The first two stay open: the server greets them with its HTTP/2 SETTINGS frame.
    const first = await Promise.race([
      connections[0].read(new Uint8Array(64)).then((n) => n === null ? "closed" : "open", () => "closed"),
      new Promise((resolve) => setTimeout(() => resolve("open"), 300)),
    ]);
    assert.equal(first, "open");
  } finally {
    for (const connection of connections) connection.close();
    await server.shutdown(1000);
  }
});
