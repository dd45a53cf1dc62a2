/**
 * Calls over HTTP/1.1 (TLS, ALPN "http/1.1") to `serveRpc`: the call
 * deadline closes the connection carrying the call, and a pipelined call
 * whose connection is gone before its turn never reaches the service.
 */
import assert from "node:assert/strict";
import type { HandlerContext } from "@connectrpc/connect";
import { API, type GetDataKeyRequest } from "../../src/gen/kms/kms_pb.ts";
import { sleep } from "../../src/async/sleep.ts";
import { concatBytes } from "../../src/bytes/concat.ts";
import { createSelfSignedCertificate } from "../../src/x509/selfsigned.ts";
import { serveRpc, type ServeRpcOptions } from "../../src/rpc/server.ts";

/** A Connect unary GetDataKey in JSON over HTTP/1.1, for key ID `id` (also sent as header X-Key-Id). */
function connectJsonCall(id: string): Uint8Array {
  const body = JSON.stringify({ dataKeyId: id, length: 1 });
  return new TextEncoder().encode(
    `POST /kms.API/GetDataKey HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n` +
      `Connect-Protocol-Version: 1\r\nX-Key-Id: ${id}\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
  );
}

/**
 * A TLS server whose GetDataKey runs `getDataKey`; `started` lists the key IDs that reached it.
 */
async function http1Server(
  getDataKey: (request: GetDataKeyRequest, context: HandlerContext) => Promise<void>,
  options: Pick<ServeRpcOptions, "limits" | "httpHandler">,
) {
  const started: string[] = [];
  const tls = createSelfSignedCertificate({ commonName: "localhost", dnsNames: ["localhost"] });
  const server = await serveRpc({
    routes: (router) =>
      router.service(API, {
        async getDataKey(request, context) {
          started.push(request.dataKeyId);
          await getDataKey(request, context);
          return { dataKey: new Uint8Array(request.length) };
        },
      }),
    hostname: "127.0.0.1",
    port: 0,
    tls,
    ...options,
  });
  const { port } = server.address;
  return {
    started,
    /** A new HTTP/1.1 connection to the server. */
    connect: () =>
      Deno.connectTls({ hostname: "localhost", port, caCerts: [tls.cert], alpnProtocols: ["http/1.1"] }),
    /** One call for `id` on a new HTTP/1.1 connection (fetch's): its status and body. */
    call: async (id: string) => {
      const client = Deno.createHttpClient({ caCerts: [tls.cert], http2: false });
      try {
        const response = await fetch(`https://localhost:${port}/kms.API/GetDataKey`, {
          method: "POST",
          headers: { "Content-Type": "application/json", "Connect-Protocol-Version": "1" },
          body: JSON.stringify({ dataKeyId: id, length: 1 }),
          client,
        });
        return { status: response.status, body: await response.text() };
      } finally {
        client.close();
      }
    },
    [Symbol.asyncDispose]: () => server.shutdown(1000),
  };
}

/** Resolves "closed" once `connection` reads its end (or fails), "open" if it has not `ms` later. */
async function closedWithin(connection: Deno.Conn, ms: number): Promise<"closed" | "open"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const buffer = new Uint8Array(4096);
  const readToEnd = async () => {
    try {
      while (await connection.read(buffer) !== null) { /* an answer would be read and dropped */ }
    } catch { /* reset: closed as well */ }
    return "closed" as const;
  };
  try {
    return await Promise.race([
      readToEnd(),
      new Promise<"open">((resolve) => timer = setTimeout(() => resolve("open"), ms)),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("serveRpc over HTTP/1.1: a call past the request timeout has its connection closed; later calls are served", async () => {
  let cancelled = 0;
  await using server = await http1Server(
    (request, context) =>
      request.dataKeyId === "hang"
        // Never answers; ends only when the call is cancelled.
        ? new Promise<void>((_resolve, reject) =>
          context.signal.addEventListener("abort", () => {
            cancelled++;
            reject(context.signal.reason);
          })
        )
        : Promise.resolve(),
    { limits: { requestTimeoutMs: 300 } },
  );
  const connection = await server.connect();
  try {
    await connection.write(connectJsonCall("hang"));
    const start = performance.now();
    // node:http's own request timeout checks only every 30 s: the call's deadline must close it.
    assert.equal(await closedWithin(connection, 1500), "closed", "the connection was closed at the deadline");
    assert.ok(performance.now() - start >= 250, "not closed before the deadline");
    assert.deepEqual(server.started, ["hang"]);
  } finally {
    connection.close();
  }
  await sleep(50);
  assert.equal(cancelled, 1, "the service saw its call cancelled");
  const later = await server.call("later");
  assert.equal(later.status, 200, later.body);
  assert.deepEqual(server.started, ["hang", "later"]);
});

Deno.test("serveRpc over HTTP/1.1: a pipelined call whose connection is gone before it is taken up never reaches the service", async () => {
  await using server = await http1Server(() => Promise.resolve(), {
    // The call "closer" has its connection closed as it arrives: the calls pipelined behind it in the same
    // bytes arrive with their socket gone already.
    httpHandler: (req) => {
      if (req.headers["x-key-id"] !== "closer") return false;
      req.socket?.destroy();
      return true;
    },
  });
  const connection = await server.connect();
  try {
    await connection.write(concatBytes(connectJsonCall("closer"), connectJsonCall("behind")));
    assert.equal(await closedWithin(connection, 2000), "closed");
  } finally {
    connection.close();
  }
  await sleep(300);
  assert.deepEqual(server.started, [], "no call ran for the connection that was gone");
  // Nothing was left holding the server: a call on a new connection is served.
  const later = await server.call("later");
  assert.equal(later.status, 200, later.body);
  assert.deepEqual(server.started, ["later"]);
});
