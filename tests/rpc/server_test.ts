import assert from "node:assert/strict";
import * as http2 from "node:http2";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { create, toBinary } from "@bufbuild/protobuf";
import { API, GetDataKeyRequestSchema } from "../../src/gen/kms/kms_pb.ts";
import { sleep } from "../../src/async/sleep.ts";
import { concatBytes } from "../../src/bytes/concat.ts";
import { createSelfSignedCertificate } from "../../src/x509/selfsigned.ts";
import { connectRpc, type RpcProtocol } from "../../src/rpc/client.ts";
import { serveRpc, type ServeRpcOptions } from "../../src/rpc/server.ts";
import { peerAddressKey } from "../../src/rpc/peer.ts";
import { callOverloadedKey } from "../../src/rpc/overload.ts";

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
    limits: { idleTimeoutMs: 200 },
  });
  try {
    const baseUrl = `http://127.0.0.1:${server.address.port}`;
    {
      using connection = connectRpc({ baseUrl });
      await createClient(API, connection.transport).getDataKey({ dataKeyId: "x", length: 1 });
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

Deno.test({
  name: "serveRpc refuses to listen outside its net permissions, with a clear error",
  // As a service runs: net granted for loopback only (the test set grants any address, for local clusters).
  permissions: { net: ["127.0.0.1"], read: "inherit", env: "inherit", sys: "inherit" },
}, async () => {
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
    limits: { maxConnectionsPerPeer: 2 },
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

Deno.test("serveRpc refuses a call whose body would exceed its connection's request-byte budget", async () => {
  const server = await serveRpc({
    routes: (router) => router.service(API, { getDataKey: () => ({ dataKey: new Uint8Array(1) }) }),
    hostname: "127.0.0.1",
    port: 0,
    limits: { maxRequestBytesPerConnection: 1024 },
  });
  try {
    using connection = connectRpc({ baseUrl: `http://127.0.0.1:${server.address.port}` });
    const client = createClient(API, connection.transport);
    await assert.rejects(client.getDataKey({ dataKeyId: "x".repeat(2000), length: 1 }), (err) => {
      const error = ConnectError.from(err);
      assert.equal(Code[error.code], "ResourceExhausted");
      assert.match(error.rawMessage, /too many request bytes in flight/);
      return true;
    });
    // The bytes of a finished call are given back: small calls go through on the same connection.
    for (let i = 0; i < 5; i++) await client.getDataKey({ dataKeyId: "x".repeat(500), length: 1 });
  } finally {
    await server.shutdown(1000);
  }
});

Deno.test("serveRpc cancels a call that is not finished within the request timeout", async () => {
  const server = await serveRpc({
    routes: (router) => router.service(API, { getDataKey: () => ({ dataKey: new Uint8Array(1) }) }),
    hostname: "127.0.0.1",
    port: 0,
    limits: { requestTimeoutMs: 300 },
  });
  const session = http2.connect(`http://127.0.0.1:${server.address.port}`);
  session.on("error", () => {});
  try {
    // Headers, then a body that never ends.
    const stream = session.request({
      ":method": "POST",
      ":path": "/kms.API/GetDataKey",
      "content-type": "application/grpc",
      te: "trailers",
    });
    stream.on("error", () => {});
    stream.write(new Uint8Array([0, 0, 0, 0, 10]));
    const start = performance.now();
    const rstCode = await new Promise<number>((resolve) =>
      stream.once("close", () => resolve(stream.rstCode))
    );
    assert.equal(rstCode, http2.constants.NGHTTP2_CANCEL);
    assert.ok(performance.now() - start < 3000, "cancelled at the deadline, not later");
  } finally {
    session.destroy();
    await server.shutdown(1000);
  }
});

Deno.test("serveRpc works on at most maxCallsInProgress unary calls at once; the others wait, in order", async () => {
  let running = 0;
  let mostRunning = 0;
  const started: string[] = [];
  const release: (() => void)[] = [];
  const server = await serveRpc({
    routes: (router) =>
      router.service(API, {
        async getDataKey(request) {
          started.push(request.dataKeyId);
          mostRunning = Math.max(mostRunning, ++running);
          await new Promise<void>((resolve) => release.push(resolve));
          running--;
          return { dataKey: new Uint8Array(1) };
        },
      }),
    hostname: "127.0.0.1",
    port: 0,
    limits: { maxCallsInProgress: 2 },
  });
  try {
    using connection = connectRpc({ baseUrl: `http://127.0.0.1:${server.address.port}` });
    const client = createClient(API, connection.transport);
    const calls: Promise<unknown>[] = [];
    for (const id of ["a", "b", "c", "d"]) {
      calls.push(client.getDataKey({ dataKeyId: id, length: 1 }));
      // One at a time, so that they arrive in this order.
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.deepEqual(started, ["a", "b"]);
    // Each answer lets the next waiting call in.
    while (started.length < 4 || release.length > 0) {
      release.shift()?.();
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await Promise.all(calls);
    assert.deepEqual(started, ["a", "b", "c", "d"]);
    assert.equal(mostRunning, 2);
  } finally {
    await server.shutdown(1000);
  }
});

/**
 * A server with room for one call in progress, and a client whose call "busy" holds it until
 * `release()`; `started` lists the key IDs the service has taken up, and `overloaded` those it got
 * flagged as beyond the server's bounds (which it refuses, with the flag's message).
 */
async function serverWithBusyCall(
  options: {
    readMaxBytes?: number;
    maxRequestBytesPerConnection?: number;
    maxCallsWaiting?: number;
    overloadRefusedByService?: ServeRpcOptions["overloadRefusedByService"];
    protocol?: RpcProtocol;
  } = {},
) {
  const started: string[] = [];
  const overloaded: string[] = [];
  let release = () => {};
  const server = await serveRpc({
    routes: (router) =>
      router.service(API, {
        async getDataKey(request, context) {
          const busyMessage = context.values.get(callOverloadedKey);
          if (busyMessage !== undefined) {
            overloaded.push(request.dataKeyId);
            throw new ConnectError(`refused by the service: ${busyMessage}`, Code.ResourceExhausted);
          }
          started.push(request.dataKeyId);
          if (request.dataKeyId === "busy") await new Promise<void>((resolve) => release = resolve);
          return { dataKey: new Uint8Array(1) };
        },
      }),
    hostname: "127.0.0.1",
    port: 0,
    readMaxBytes: options.readMaxBytes,
    overloadRefusedByService: options.overloadRefusedByService,
    limits: {
      maxCallsInProgress: 1,
      ...(options.maxRequestBytesPerConnection
        ? { maxRequestBytesPerConnection: options.maxRequestBytesPerConnection }
        : {}),
      ...(options.maxCallsWaiting !== undefined ? { maxCallsWaiting: options.maxCallsWaiting } : {}),
    },
  });
  const connection = connectRpc({
    baseUrl: `http://127.0.0.1:${server.address.port}`,
    protocol: options.protocol,
  });
  const client = createClient(API, connection.transport);
  const busy = client.getDataKey({ dataKeyId: "busy", length: 1 });
  busy.catch(() => {}); // awaited by release(); a test failing before that must not fail the module too
  await new Promise((resolve) => setTimeout(resolve, 50));
  return {
    client,
    started,
    overloaded,
    /** Lets "busy" finish and waits for its answer. */
    release: async () => {
      release();
      await busy;
    },
    [Symbol.asyncDispose]: async () => {
      connection.close();
      await server.shutdown(1000);
    },
  };
}

Deno.test("serveRpc: a waiting call its client cancels never reaches the service", async () => {
  await using busy = await serverWithBusyCall();
  const controller = new AbortController();
  const waiting = busy.client.getDataKey({ dataKeyId: "cancelled", length: 1 }, {
    signal: controller.signal,
  });
  await new Promise((resolve) => setTimeout(resolve, 50));
  controller.abort();
  await assert.rejects(waiting, (err) => ConnectError.from(err).code === Code.Canceled);
  await new Promise((resolve) => setTimeout(resolve, 50));
  await busy.release();
  await busy.client.getDataKey({ dataKeyId: "next", length: 1 });
  assert.deepEqual(busy.started, ["busy", "next"]);
});

Deno.test("serveRpc refuses a message over readMaxBytes at once, without waiting for a call in progress", async () => {
  await using busy = await serverWithBusyCall({ readMaxBytes: 1024 });
  await assert.rejects(busy.client.getDataKey({ dataKeyId: "x".repeat(4000), length: 1 }), (err) => {
    const error = ConnectError.from(err);
    assert.equal(Code[error.code], "ResourceExhausted");
    assert.match(error.rawMessage, /readMaxBytes/);
    return true;
  });
  await busy.release();
});

Deno.test("serveRpc refuses a call over its connection's byte budget at once, without waiting for a call in progress", async () => {
  await using busy = await serverWithBusyCall({ maxRequestBytesPerConnection: 1024 });
  await assert.rejects(busy.client.getDataKey({ dataKeyId: "x".repeat(2000), length: 1 }), (err) => {
    const error = ConnectError.from(err);
    assert.equal(Code[error.code], "ResourceExhausted");
    assert.match(error.rawMessage, /too many request bytes in flight/);
    return true;
  });
  await busy.release();
});

/** How `call` ended: its error, or "served"; "waited" if it had not ended 2 s later. */
function answeredAtOnce(call: Promise<unknown>): Promise<unknown> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    call.then(() => "served", (err: unknown) => err),
    new Promise((resolve) => timer = setTimeout(() => resolve("waited"), 2000)),
  ]).finally(() => clearTimeout(timer));
}

Deno.test("serveRpc: a call beyond maxCallsInProgress + maxCallsWaiting is refused at once; the others complete", async (t) => {
  const busyMessage = "server busy: 1 calls in progress and 1 waiting; retry later";
  const rows: {
    name: string;
    protocol?: RpcProtocol;
    overloadRefusedByService?: ServeRpcOptions["overloadRefusedByService"];
    /** The message the third call's client reads. */
    wantMessage: string;
    /** The calls the service saw flagged as beyond the bounds. */
    wantOverloaded: string[];
  }[] = [
    ...(["grpc", "grpc-web", "connect"] as const).map((protocol) => ({
      name: `refused by the RPC layer (the default), ${protocol}: the service never sees it`,
      protocol,
      wantMessage: busyMessage,
      wantOverloaded: [],
    })),
    {
      name: "passed to a method that refuses it itself: the service sees the flag and its message",
      overloadRefusedByService: [API.method.getDataKey],
      wantMessage: `refused by the service: ${busyMessage}`,
      wantOverloaded: ["third"],
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      await using busy = await serverWithBusyCall({
        maxCallsWaiting: 1,
        overloadRefusedByService: row.overloadRefusedByService,
        protocol: row.protocol,
      });
      const waiting = busy.client.getDataKey({ dataKeyId: "waiting", length: 1 });
      waiting.catch(() => {}); // awaited below
      await new Promise((resolve) => setTimeout(resolve, 50));
      // "busy" is in progress and "waiting" waits: the third gets its answer while both are still open.
      const third = await answeredAtOnce(busy.client.getDataKey({ dataKeyId: "third", length: 1 }));
      const error = ConnectError.from(third);
      assert.equal(Code[error.code], "ResourceExhausted", String(third));
      assert.equal(error.rawMessage, row.wantMessage);
      assert.deepEqual(busy.overloaded, row.wantOverloaded);
      assert.deepEqual(busy.started, ["busy"], "nothing beyond the bound was worked on");
      await busy.release();
      await waiting;
      assert.deepEqual(busy.started, ["busy", "waiting"]);
    });
  }
});

Deno.test("serveRpc with maxCallsWaiting 0 lets no call wait: the second is refused at once", async () => {
  await using busy = await serverWithBusyCall({ maxCallsWaiting: 0 });
  const second = await answeredAtOnce(busy.client.getDataKey({ dataKeyId: "second", length: 1 }));
  const error = ConnectError.from(second);
  assert.equal(Code[error.code], "ResourceExhausted", String(second));
  assert.equal(error.rawMessage, "server busy: 1 calls in progress and 0 waiting; retry later");
  await busy.release();
  await busy.client.getDataKey({ dataKeyId: "after", length: 1 });
  assert.deepEqual(busy.started, ["busy", "after"]);
});

Deno.test("serveRpc: pipelined HTTP/1.1 calls whose connection closed give their bytes back, never run, and crash nothing", async () => {
  // Deno's node:http emits no "close" on the response of a pipelined call whose connection went first: the
  // call held its request bytes for good, waited and then ran for no one, and its deadline timer threw.
  let started = 0;
  const tls = createSelfSignedCertificate({ commonName: "localhost", dnsNames: ["localhost"] });
  const server = await serveRpc({
    routes: (router) =>
      router.service(API, {
        async getDataKey(request) {
          started++;
          await sleep(20);
          return { dataKey: new Uint8Array(request.length) };
        },
      }),
    hostname: "127.0.0.1",
    port: 0,
    tls,
    limits: { maxRequestBytesInFlight: 64 * 1024, requestTimeoutMs: 1000, maxCallsInProgress: 1 },
  });
  const { port } = server.address;
  /** A Connect unary GetDataKey over HTTP/1.1, its body carrying `idBytes` bytes of key ID. */
  const call = (idBytes: number) => {
    const body = toBinary(
      GetDataKeyRequestSchema,
      create(GetDataKeyRequestSchema, {
        dataKeyId: "k".repeat(idBytes),
        length: 32,
      }),
    );
    const head =
      `POST /kms.API/GetDataKey HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/proto\r\n` +
      `Connect-Protocol-Version: 1\r\nContent-Length: ${body.length}\r\n\r\n`;
    return { head, body };
  };
  try {
    const { head, body } = call(4000);
    const pipelined = concatBytes(
      ...Array.from({ length: 200 }, () => [new TextEncoder().encode(head), body]).flat(),
    );
    await Promise.all(Array.from({ length: 8 }, async () => {
      const connection = await Deno.connectTls({
        hostname: "localhost",
        port,
        caCerts: [tls.cert],
        alpnProtocols: ["http/1.1"],
      });
      await connection.write(pipelined).catch(() => {});
      await sleep(300);
      connection.close();
    }));
    const startedWhenGone = started;
    // Past every call's deadline: a throw in a deadline timer fails this test as an uncaught error.
    await sleep(1500);
    assert.ok(
      started - startedWhenGone <= 1,
      `${started - startedWhenGone} calls ran after their client left`,
    );

    // Every byte was given back: a call that needs most of the budget goes through.
    const probe = call(50_000);
    const client = Deno.createHttpClient({ caCerts: [tls.cert], http2: false });
    try {
      const response = await fetch(`https://localhost:${port}/kms.API/GetDataKey`, {
        method: "POST",
        headers: { "Content-Type": "application/proto", "Connect-Protocol-Version": "1" },
        body: probe.body,
        client,
      });
      const answer = await response.text();
      assert.equal(response.status, 200, answer);
    } finally {
      client.close();
    }
  } finally {
    await server.shutdown(1000);
  }
});
