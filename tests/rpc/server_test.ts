import assert from "node:assert/strict";
import * as http2 from "node:http2";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
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
    const client = createClient(API, createGrpcTransport({ baseUrl }));
    await client.getDataKey({ dataKeyId: "x", length: 1 });
    assert.equal(peer, "127.0.0.1");

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
