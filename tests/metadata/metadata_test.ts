/**
 * The QEMU-style metadata API: the server and the client over real sockets,
 * nodes identified by source address and by their own base URL, unknown
 * callers, malformed answers, a server that is down or hangs.
 */
import assert from "node:assert/strict";
import * as http from "node:http";
import { MetadataClient, MetadataError, type MetadataErrorReason } from "../../src/metadata/client.ts";
import { type InstanceInput, startMetadataServer } from "../../src/metadata/server.ts";

const HASH = "$2a$10$" + "a".repeat(53);

const cluster: InstanceInput[] = [
  { name: "control-plane-0", role: "ControlPlane", vpcIp: "127.0.0.1" },
  { name: "worker-0", role: "Worker", vpcIp: "127.0.0.2" },
];

/** GET `path` from `port` with the source address `localAddress`; status and body. */
function getFrom(
  localAddress: string,
  port: number,
  path: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = http.request({ host: "127.0.0.1", port, path, localAddress }, (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk) => body += chunk);
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
    });
    request.on("error", reject);
    request.end();
  });
}

/** Asserts that `promise` rejects with a MetadataError of `reason` whose message matches `message`. */
async function assertMetadataError(
  promise: Promise<unknown>,
  reason: MetadataErrorReason,
  message: RegExp,
): Promise<MetadataError> {
  const error = await promise.then(() => undefined, (e) => e);
  assert.ok(error instanceof MetadataError, `expected a MetadataError, got ${error}`);
  assert.equal(error.reason, reason, error.message);
  assert.match(error.message, message);
  return error;
}

Deno.test("metadata API: the happy path, by source address and by node URL", async (t) => {
  await using server = await startMetadataServer({ instances: cluster, initSecretHash: HASH });

  await t.step("by source address: /self is the instance whose VPCIP is the caller's", async () => {
    const client = new MetadataClient({ baseUrl: server.url });
    assert.deepEqual(await client.self(), {
      name: "control-plane-0",
      role: "ControlPlane",
      vpcIp: "127.0.0.1",
      providerId: "qemu:///hostname/control-plane-0",
    });
    const worker = await getFrom("127.0.0.2", server.port, "/self");
    assert.equal(worker.status, 200);
    assert.equal(
      worker.body,
      '{"Name":"worker-0","ProviderID":"qemu:///hostname/worker-0","Role":"Worker","VPCIP":"127.0.0.2",' +
        '"SecondaryIPRange":"","AliasIPRanges":null}\n',
      "the original's field names and Go's encoder output",
    );
  });

  await t.step("by node URL: every path answers for the named instance", async () => {
    const client = new MetadataClient({ baseUrl: server.nodeUrl("worker-0") });
    assert.equal(client.baseUrl, `${server.url}nodes/worker-0/`);
    assert.equal((await client.self()).name, "worker-0");
    assert.deepEqual((await client.peers()).map((p) => [p.name, p.role, p.vpcIp]), [
      ["control-plane-0", "ControlPlane", "127.0.0.1"],
      ["worker-0", "Worker", "127.0.0.2"],
    ]);
    assert.deepEqual(await client.endpoint(), { host: "127.0.0.1", port: 6443 });
    assert.equal(await client.initSecretHash(), HASH);
  });

  await t.step("a base URL without its trailing slash keeps its prefix", async () => {
    const client = new MetadataClient({ baseUrl: server.nodeUrl("worker-0").replace(/\/$/, "") });
    assert.equal((await client.self()).name, "worker-0");
  });

  await t.step("/endpoint: the owner's host or host:port, else the first control plane", async () => {
    const client = new MetadataClient({ baseUrl: server.url });
    for (
      const [set, want] of [
        ["10.42.0.100", { host: "10.42.0.100", port: 6443 }],
        ["127.0.0.1:16443", { host: "127.0.0.1", port: 16443 }],
        ["[fd00::1]:7443", { host: "fd00::1", port: 7443 }],
        ["api.cluster.local", { host: "api.cluster.local", port: 6443 }],
        [undefined, { host: "127.0.0.1", port: 6443 }],
      ] as const
    ) {
      server.setEndpoint(set);
      assert.deepEqual(await client.endpoint(), want, String(set));
    }
  });

  await t.step("/log: the message is kept with the caller's instance", async () => {
    await new MetadataClient({ baseUrl: server.nodeUrl("worker-0") }).log("bootstrapper started running...");
    const entry = server.logs.at(-1);
    assert.equal(entry?.instance, "worker-0");
    assert.equal(entry?.message, "bootstrapper started running...");
    assert.equal(entry?.address, "127.0.0.1");
  });
});

Deno.test("metadata API: unknown and ambiguous callers, and a table changed while running", async (t) => {
  await using server = await startMetadataServer({ instances: [cluster[1]] });
  const byAddress = new MetadataClient({ baseUrl: server.url });

  const rows: { name: string; run: () => Promise<unknown>; reason: MetadataErrorReason; message: RegExp }[] =
    [
      {
        name: "a caller whose address no instance has",
        run: () => byAddress.self(),
        reason: "not-found",
        message:
          /\/self: answered 404: No matching peer found: no instance has the caller's address 127\.0\.0\.1/,
      },
      {
        name: "an unknown name under /nodes/",
        run: () => new MetadataClient({ baseUrl: server.nodeUrl("ghost") }).peers(),
        reason: "not-found",
        message: /nodes\/ghost\/peers: answered 404: no instance named "ghost"/,
      },
      {
        name: "no init secret hash set",
        run: () => byAddress.initSecretHash(),
        reason: "not-found",
        message: /no init secret hash set/,
      },
      {
        name: "no control plane for /endpoint",
        run: () => byAddress.endpoint(),
        reason: "not-found",
        message: /no control-plane instance/,
      },
    ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const error = await assertMetadataError(row.run(), row.reason, row.message);
      assert.equal(error.retryable, true, "the instance or value may appear later");
      assert.equal(error.status, 404);
    });
  }

  await t.step("an instance added while running is found; a removed one is not", async () => {
    server.setInstance({ name: "control-plane-0", role: "ControlPlane", vpcIp: "127.0.0.1" });
    assert.equal((await byAddress.self()).name, "control-plane-0");
    assert.equal(server.removeInstance("control-plane-0"), true);
    await assertMetadataError(byAddress.self(), "not-found", /No matching peer found/);
  });

  await t.step("several instances with the caller's address: 409 naming them, not retryable", async () => {
    server.setInstance({ name: "node-a", role: "Worker", vpcIp: "127.0.0.1" });
    server.setInstance({ name: "node-b", role: "Worker", vpcIp: "127.0.0.1" });
    const error = await assertMetadataError(
      byAddress.self(),
      "conflict",
      /2 instances .* \(node-a, node-b\)/,
    );
    assert.equal(error.retryable, false);
    assert.equal((await new MetadataClient({ baseUrl: server.nodeUrl("node-b") }).self()).name, "node-b");
  });

  await t.step("the owner's bad input is refused", () => {
    assert.throws(() => server.setInstance({ name: "a/b", role: "Worker" }), /invalid instance name/);
    assert.throws(() => server.setInstance({ name: "x", role: "Boss" as "Worker" }), /invalid role/);
    assert.throws(() => server.setInstance({ name: "x", role: "Worker", vpcIp: "10.0.0" }), /invalid VPC IP/);
  });

  await t.step("unknown paths and wrong methods", async () => {
    assert.equal((await getFrom("127.0.0.1", server.port, "/selfish")).status, 404);
    const post = await fetch(`${server.url}peers`, { method: "POST", body: "x" });
    assert.equal(post.status, 405);
    await post.body?.cancel();
  });
});

Deno.test("metadata client: malformed answers are errors naming the field, never a crash", async (t) => {
  let answer: { status?: number; type?: string; body: string } = { body: "" };
  await using malformedAnswers = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () =>
      new Response(answer.body, {
        status: answer.status ?? 200,
        headers: { "content-type": answer.type ?? "application/json" },
      }),
  );
  const client = new MetadataClient({ baseUrl: `http://127.0.0.1:${malformedAnswers.addr.port}/` });
  const good = {
    Name: "worker-0",
    ProviderID: "qemu:///hostname/worker-0",
    Role: "Worker",
    VPCIP: "10.42.1.2",
  };

  const rows: {
    name: string;
    body: string;
    status?: number;
    call: (c: MetadataClient) => Promise<unknown>;
    reason: MetadataErrorReason;
    message: RegExp;
  }[] = [
    {
      name: "not JSON",
      body: "<html>",
      call: (c) => c.self(),
      reason: "malformed",
      message: /\/self: the answer is not JSON/,
    },
    {
      name: "a list for /self",
      body: "[]",
      call: (c) => c.self(),
      reason: "malformed",
      message: /want a JSON object, got a list/,
    },
    { name: "no Name", body: "{}", call: (c) => c.self(), reason: "malformed", message: /Name: is missing/ },
    {
      name: "an empty Name",
      body: JSON.stringify({ ...good, Name: "" }),
      call: (c) => c.self(),
      reason: "malformed",
      message: /Name: is empty/,
    },
    {
      name: "a numeric Name",
      body: JSON.stringify({ ...good, Name: 7 }),
      call: (c) => c.self(),
      reason: "malformed",
      message: /Name: want a string, got number 7/,
    },
    {
      name: "an unknown Role",
      body: JSON.stringify({ ...good, Role: "Unknown" }),
      call: (c) => c.self(),
      reason: "malformed",
      message: /Role: "Unknown" is not a role/,
    },
    {
      name: "a VPCIP that is no address",
      body: JSON.stringify({ ...good, VPCIP: "10.42.1" }),
      call: (c) => c.self(),
      reason: "malformed",
      message: /VPCIP: "10.42.1" is not an IP address/,
    },
    {
      name: "a VPCIP of a megabyte is quoted cut short (the message is logged on every retry)",
      body: JSON.stringify({ ...good, VPCIP: "x".repeat(1_000_000) }),
      call: (c) => c.self(),
      reason: "malformed",
      message: /^[^]{0,200}VPCIP: "x{63}… is not an IP address$/,
    },
    {
      name: "AliasIPRanges not a list of strings",
      body: JSON.stringify({ ...good, AliasIPRanges: [1] }),
      call: (c) => c.self(),
      reason: "malformed",
      message: /AliasIPRanges: want a list of strings/,
    },
    {
      name: "/peers not a list",
      body: JSON.stringify(good),
      call: (c) => c.peers(),
      reason: "malformed",
      message: /want a JSON list of instances, got an object/,
    },
    {
      name: "a bad entry in /peers names its index",
      body: JSON.stringify([good, { ...good, Role: "boss" }]),
      call: (c) => c.peers(),
      reason: "malformed",
      message: /\[1\]\.Role: "boss" is not a role/,
    },
    {
      name: "/endpoint not a string",
      body: "42",
      call: (c) => c.endpoint(),
      reason: "malformed",
      message: /want the endpoint as a non-empty JSON string, got 42/,
    },
    {
      name: "/endpoint not a host",
      body: '"http://10.0.0.1/"',
      call: (c) => c.endpoint(),
      reason: "malformed",
      message: /is not a host or host:port/,
    },
    {
      name: "/endpoint with port 0",
      body: '"10.0.0.1:0"',
      call: (c) => c.endpoint(),
      reason: "malformed",
      message: /the endpoint "10\.0\.0\.1:0" has an invalid port/,
    },
    {
      name: "/endpoint with a port over 65535",
      body: '"[fd00::1]:65536"',
      call: (c) => c.endpoint(),
      reason: "malformed",
      message: /the endpoint "\[fd00::1\]:65536" has an invalid port/,
    },
    {
      name: "/initsecrethash not a bcrypt hash",
      body: "secret",
      call: (c) => c.initSecretHash(),
      reason: "malformed",
      message: /not a bcrypt hash \(6 characters\)/,
    },
    {
      name: "an answer over 1 MiB",
      body: `"${"a".repeat(1024 * 1024)}"`,
      call: (c) => c.endpoint(),
      reason: "malformed",
      message: /larger than 1048576 bytes/,
    },
    {
      name: "a 500 is worth retrying",
      body: "leases unavailable\n",
      status: 500,
      call: (c) => c.peers(),
      reason: "unavailable",
      message: /answered 500: leases unavailable/,
    },
    {
      name: "a 400 is not",
      body: "",
      status: 400,
      call: (c) => c.peers(),
      reason: "rejected",
      message: /answered 400: \(no message\)/,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      answer = { body: row.body, status: row.status };
      const error = await assertMetadataError(row.call(client), row.reason, row.message);
      assert.equal(error.retryable, row.reason === "unavailable");
    });
  }

  await t.step("Go's null for no peers is the empty list; unknown fields are ignored", async () => {
    answer = { body: "null\n" };
    assert.deepEqual(await client.peers(), []);
    answer = { body: JSON.stringify({ ...good, Role: "control-plane", Zone: "a" }) };
    assert.equal((await client.self()).role, "ControlPlane");
  });
});

Deno.test("metadata client: a redirect is not followed, and a 3xx is an error even with a valid answer", async (t) => {
  const good = {
    Name: "worker-0",
    ProviderID: "qemu:///hostname/worker-0",
    Role: "Worker",
    VPCIP: "10.42.1.2",
  };
  const elsewhere: string[] = [];
  await using other = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    elsewhere.push(`${request.method} ${new URL(request.url).pathname}`);
    return new Response(JSON.stringify(good), { headers: { "content-type": "application/json" } });
  });
  let answer = { status: 302, body: "" };
  await using redirecting = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request) =>
      new Response(answer.body, {
        status: answer.status,
        headers: {
          location: `http://127.0.0.1:${other.addr.port}${new URL(request.url).pathname}`,
          "content-type": "application/json",
        },
      }),
  );
  const client = new MetadataClient({ baseUrl: `http://127.0.0.1:${redirecting.addr.port}/` });
  const rows: { name: string; status: number; body: string; call: () => Promise<unknown> }[] = [
    { name: "/self answered 302", status: 302, body: JSON.stringify(good), call: () => client.self() },
    { name: "/peers answered 301", status: 301, body: JSON.stringify([good]), call: () => client.peers() },
    { name: "/endpoint answered 303", status: 303, body: '"10.0.0.1:6443"', call: () => client.endpoint() },
    { name: "/initsecrethash answered 308", status: 308, body: HASH, call: () => client.initSecretHash() },
    { name: "/log answered 307", status: 307, body: "", call: () => client.log("booting") },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      answer = { status: row.status, body: row.body };
      elsewhere.length = 0;
      const outcome = await row.call().then(() => "answered", (error: unknown) => error);
      assert.deepEqual(elsewhere, [], "the redirect target saw no request");
      const error = await assertMetadataError(
        Promise.reject(outcome),
        "rejected",
        new RegExp(`answered ${row.status}`),
      );
      assert.equal(error.status, row.status);
      assert.equal(error.retryable, false);
    });
  }
});

Deno.test("metadata client: a server that is down or does not answer", async (t) => {
  await t.step("down: unreachable, worth retrying, naming the URL", async () => {
    const server = await startMetadataServer({ instances: cluster });
    const url = server.url;
    await server.close();
    const error = await assertMetadataError(
      new MetadataClient({ baseUrl: url }).self(),
      "unreachable",
      new RegExp(`^metadata API ${url.replaceAll(".", "\\.")}self: cannot connect`),
    );
    assert.equal(error.retryable, true);
  });

  let release: () => void = () => {};
  const released = new Promise<void>((resolve) => release = resolve);
  await using hanging = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async () => {
    await released;
    return new Response("null");
  });
  const client = new MetadataClient({ baseUrl: `http://127.0.0.1:${hanging.addr.port}`, timeoutMs: 200 });
  try {
    await t.step("no answer: a timeout error after the client's timeout", async () => {
      const started = performance.now();
      const error = await assertMetadataError(client.peers(), "timeout", /no answer within 200 ms/);
      assert.equal(error.retryable, true);
      assert.ok(performance.now() - started < 2000);
    });

    await t.step("a per-call timeout overrides the client's", async () => {
      await assertMetadataError(client.peers({ timeoutMs: 50 }), "timeout", /within 50 ms/);
    });

    await t.step("the caller's signal: rejects with its reason", async () => {
      const controller = new AbortController();
      const call = client.peers({ signal: controller.signal, timeoutMs: 10_000 });
      controller.abort(new Error("shutting down"));
      await assert.rejects(call, /shutting down/);
      await assert.rejects(client.peers({ signal: controller.signal }), /shutting down/);
    });
  } finally {
    release();
  }
});

Deno.test("metadata client: refuses base URLs it cannot use", () => {
  assert.throws(() => new MetadataClient({ baseUrl: "ftp://10.42.0.1/" }), /must be http or https/);
  assert.throws(() => new MetadataClient({ baseUrl: "http://10.42.0.1/?x=1" }), /query or fragment/);
});
