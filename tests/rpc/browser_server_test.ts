/**
 * The browser listener (`src/rpc/browser_server.ts`) over real HTTP/1.1:
 * CORS for the allow-list and nothing else, only the routes it is given,
 * the per-peer connection cap and idle connections closed; the origin
 * allow-list's parser; and the browser-listener flags.
 */
import assert from "node:assert/strict";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { API, type GetStatusResponse } from "../../src/gen/join/join_pb.ts";
import { parseBrowserListener } from "../../src/flags/browser_listener.ts";
import { UsageError } from "../../src/flags/flags.ts";
import { serveBrowserRpc } from "../../src/rpc/browser_server.ts";
import { OriginError, parseOrigin } from "../../src/rpc/cors.ts";
import type { RpcServer } from "../../src/rpc/server.ts";

const ALLOWED = "http://127.0.0.1:9080";
const STATUS_PATH = "/join.API/GetStatus";

/** A browser listener serving GetStatus alone; counts the calls that reach the handler. */
async function statusListener(
  allowedOrigins: string[],
  limits = {},
): Promise<{ server: RpcServer; url: string; calls: () => number }> {
  let calls = 0;
  const server = await serveBrowserRpc({
    routes: (router) =>
      router.rpc(API.method.getStatus, () => {
        calls++;
        return { attestationVariant: "qemu-vtpm" } as GetStatusResponse;
      }),
    hostname: "127.0.0.1",
    port: 0,
    allowedOrigins,
    limits,
  });
  return { server, url: `http://127.0.0.1:${server.address.port}`, calls: () => calls };
}

/** A Connect unary call as a browser sends it (JSON), with `origin` when given. */
async function call(url: string, path: string, origin?: string): Promise<Response> {
  return await fetch(`${url}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "connect-protocol-version": "1",
      ...(origin === undefined ? {} : { origin }),
    },
    body: "{}",
  });
}

async function preflight(url: string, origin: string, extra: Record<string, string> = {}): Promise<Response> {
  const response = await fetch(`${url}${STATUS_PATH}`, {
    method: "OPTIONS",
    headers: {
      origin,
      "access-control-request-method": "POST",
      "access-control-request-headers": "content-type,connect-protocol-version",
      ...extra,
    },
  });
  await response.body?.cancel();
  return response;
}

Deno.test("a preflight from an allowed origin gets what Connect's browser calls need", async () => {
  const { server, url } = await statusListener([ALLOWED]);
  try {
    const response = await preflight(url, ALLOWED, { "access-control-request-private-network": "true" });
    assert.equal(response.status, 204);
    assert.equal(response.headers.get("access-control-allow-origin"), ALLOWED);
    assert.match(response.headers.get("access-control-allow-methods")!, /POST/);
    const allowedHeaders = response.headers.get("access-control-allow-headers")!.toLowerCase();
    for (const header of ["content-type", "connect-protocol-version", "connect-timeout-ms"]) {
      assert.ok(allowedHeaders.includes(header), header);
    }
    assert.equal(response.headers.get("access-control-allow-private-network"), "true");
    assert.equal(response.headers.get("vary"), "Origin");
  } finally {
    await server.shutdown(1000);
  }
});

Deno.test("an origin not on the list is refused: its preflight and its calls get 403, no handler runs", async () => {
  for (const allowed of [[ALLOWED], []]) {
    const { server, url, calls } = await statusListener(allowed);
    try {
      for (const origin of ["http://evil.example", "http://localhost:9080", "null"]) {
        const answer = await preflight(url, origin);
        assert.equal(answer.status, 403, origin);
        assert.equal(answer.headers.get("access-control-allow-origin"), null);
        const refused = await call(url, STATUS_PATH, origin);
        assert.equal(refused.status, 403);
        assert.equal(refused.headers.get("access-control-allow-origin"), null);
        assert.match(await refused.text(), /is not allowed to call this service \(see --cors-allow-origin\)/);
      }
      assert.equal(calls(), 0, "no refused call reached the handler");
    } finally {
      await server.shutdown(1000);
    }
  }
});

Deno.test("calls from the allowed origin, and without an origin (curl), are answered", async () => {
  const { server, url, calls } = await statusListener([ALLOWED]);
  try {
    const fromPage = await call(url, STATUS_PATH, ALLOWED);
    assert.equal(fromPage.status, 200);
    assert.equal(fromPage.headers.get("access-control-allow-origin"), ALLOWED);
    assert.match(fromPage.headers.get("access-control-expose-headers")!, /Grpc-Status/i);
    assert.deepEqual(await fromPage.json(), { attestationVariant: "qemu-vtpm" });
    const fromTool = await call(url, STATUS_PATH);
    assert.equal(fromTool.status, 200);
    assert.equal(fromTool.headers.get("access-control-allow-origin"), null);
    await fromTool.body?.cancel();
    // connect-web, the page's client, over the same port.
    const client = createClient(API, createConnectTransport({ baseUrl: url }));
    assert.equal((await client.getStatus({})).attestationVariant, "qemu-vtpm");
    assert.equal(calls(), 3);
  } finally {
    await server.shutdown(1000);
  }
});

Deno.test("only the routes given are served: the ticket methods are not there", async () => {
  const { server, url } = await statusListener([ALLOWED]);
  try {
    for (const path of ["/join.API/IssueJoinTicket", "/join.API/GetChallenge", "/init.API/Init", "/"]) {
      const response = await call(url, path, ALLOWED);
      await response.body?.cancel();
      assert.equal(response.status, 404, path);
    }
  } finally {
    await server.shutdown(1000);
  }
});

Deno.test("the browser listener caps connections per peer and closes idle ones", async () => {
  const { server } = await statusListener([ALLOWED], { maxConnectionsPerPeer: 2, idleTimeoutMs: 300 });
  const port = server.address.port;
  const open: Deno.TcpConn[] = [];
  try {
    for (let i = 0; i < 3; i++) open.push(await Deno.connect({ hostname: "127.0.0.1", port }));
    const buffer = new Uint8Array(16);
    // The third connection is over the cap: closed at once.
    assert.equal(await open[2].read(buffer), null);
    // The first two send nothing: closed once idle.
    const start = performance.now();
    assert.equal(await open[0].read(buffer), null);
    assert.ok(performance.now() - start < 5_000);
  } finally {
    for (const conn of open) {
      try {
        conn.close();
      } catch {
        // already closed
      }
    }
    await server.shutdown(1000);
  }
});

Deno.test("origins on the allow-list are exact web origins", () => {
  for (
    const good of [
      "http://127.0.0.1:9080",
      "https://console.example",
      "http://[::1]:9080",
      "http://localhost:1",
    ]
  ) {
    assert.equal(parseOrigin(good), good);
  }
  const bad: [string, RegExp][] = [
    ["*", /wildcards are not allowed/],
    ["null", /opaque origin null/],
    ["http://127.0.0.1:9080/", /browsers send it as "http:\/\/127.0.0.1:9080"/],
    ["http://Console.example", /browsers send it as "http:\/\/console.example"/],
    ["http://console.example:80", /browsers send it as "http:\/\/console.example"/],
    ["ftp://console.example", /not http or https/],
    ["127.0.0.1:9080", /not http or https|not a URL/],
    ["console", /not a URL/],
  ];
  for (const [value, message] of bad) {
    assert.throws(() => parseOrigin(value), (error: unknown) => {
      assert.ok(error instanceof OriginError, value);
      assert.match(error.message, message, value);
      return true;
    });
  }
});

Deno.test("browser-listener flags: off without --browser-port; origins repeated or comma-separated", () => {
  assert.equal(parseBrowserListener({}, "0.0.0.0"), undefined);
  assert.deepEqual(
    parseBrowserListener({
      "browser-port": "9001",
      "cors-allow-origin": ["http://127.0.0.1:9080,https://console.example", "http://127.0.0.1:9080"],
    }, "0.0.0.0"),
    { port: 9001, address: "0.0.0.0", allowedOrigins: ["http://127.0.0.1:9080", "https://console.example"] },
  );
  assert.deepEqual(
    parseBrowserListener({ "browser-port": "0", "browser-address": "127.0.0.1" }, "0.0.0.0"),
    { port: 0, address: "127.0.0.1", allowedOrigins: [] },
  );
  const usage = (values: Parameters<typeof parseBrowserListener>[0], message: RegExp) =>
    assert.throws(() => parseBrowserListener(values, "0.0.0.0"), (error: unknown) => {
      assert.ok(error instanceof UsageError);
      assert.match(error.message, message);
      return true;
    });
  usage({ "cors-allow-origin": [ALLOWED] }, /need --browser-port/);
  usage({ "browser-address": "127.0.0.1" }, /need --browser-port/);
  usage({ "browser-port": "9001", "cors-allow-origin": ["*"] }, /^--cors-allow-origin: invalid origin "\*"/);
  usage({ "browser-port": "x" }, /--browser-port/);
  usage({ "browser-port": "9001", "browser-address": "localhost" }, /--browser-address/);
});
