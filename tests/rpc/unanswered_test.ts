/**
 * `isUnanswered`: calls whose connection or stream was lost on the way are
 * told apart from errors the server sent, over real HTTP/2 connections to a
 * server that dies mid-call, resets the stream, or answers with an error.
 */
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { API } from "../../src/gen/kms/kms_pb.ts";
import { createKeyServiceClient } from "../../src/keyservice/client.ts";
import { keySource } from "../../src/joinservice/keysource.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import { Rejection } from "../../src/rpc/rejection.ts";
import { isUnanswered } from "../../src/rpc/unanswered.ts";

/** What the server does with the one call it gets. */
type Behaviour = "die" | "reset-cancel" | "reset-internal" | "answer-internal";

/** An h2c server that treats every call as `behaviour` says; resolves to its port and a closer. */
async function server(behaviour: Behaviour) {
  const sockets = new Set<import("node:net").Socket>();
  const h2 = http2.createServer();
  h2.on("connection", (socket) => sockets.add(socket));
  h2.on("stream", (stream) => {
    stream.on("error", () => {}); // its own reset, reported to the server's side too
    switch (behaviour) {
      case "die": // as a process that is killed: its (only) connection ends, nothing more is sent
        for (const socket of sockets) socket.destroy();
        break;
      case "reset-cancel":
        stream.close(http2.constants.NGHTTP2_CANCEL);
        break;
      case "reset-internal":
        stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
        break;
      case "answer-internal":
        stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
        stream.on(
          "wantTrailers",
          () => stream.sendTrailers({ "grpc-status": "13", "grpc-message": "broken" }),
        );
        stream.end();
        break;
    }
  });
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
  const port = (h2.address() as { port: number }).port;
  return {
    port,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => h2.close(resolve));
    },
  };
}

async function callError(behaviour: Behaviour): Promise<unknown> {
  const { port, close } = await server(behaviour);
  using connection = connectRpc({ baseUrl: `http://127.0.0.1:${port}` });
  try {
    const client = createClient(API, connection.transport);
    return await client.getDataKey({ dataKeyId: "x", length: 32 }).then(() => undefined, (e: unknown) => e);
  } finally {
    await close();
  }
}

Deno.test("isUnanswered(): a call whose server died or reset the stream was lost; a server's error was not", async () => {
  for (const behaviour of ["die", "reset-cancel", "reset-internal"] as const) {
    const error = await callError(behaviour);
    assert.ok(error instanceof ConnectError, `${behaviour}: ${error}`);
    assert.ok(isUnanswered(error), `${behaviour}: ${Code[error.code]} ${error.rawMessage}`);
  }
  const answered = await callError("answer-internal");
  assert.ok(answered instanceof ConnectError);
  assert.equal(answered.code, Code.Internal);
  assert.equal(isUnanswered(answered), false);
  assert.equal(isUnanswered(new ConnectError("request canceled", Code.Canceled)), false);
  assert.equal(isUnanswered(new ConnectError("no", Code.PermissionDenied)), false);
  assert.equal(isUnanswered(new Error("not an RPC error")), false);
});

Deno.test("a key service that dies mid-call is unavailable to the join service, not an internal error", async () => {
  for (const behaviour of ["die", "reset-cancel"] as const) {
    const { port, close } = await server(behaviour);
    try {
      using client = createKeyServiceClient({ endpoint: `127.0.0.1:${port}`, timeoutMs: 2000 });
      const error = await keySource(client).getDataKey("measurementSecret", 32, {}).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(error instanceof Rejection, `${behaviour}: ${error}`);
      assert.equal(error.reason, "key-service-unavailable", `${behaviour}: ${error.message}`);
      assert.equal(Code[error.code], "Unavailable");
      assert.match(error.message, /^key service unavailable: /);
    } finally {
      await close();
    }
  }
});
