/**
 * The console's build and web server, without a browser: the page's bundle
 * holds the shared validator and report and nothing that needs Deno or
 * Node.js; the server serves the page and, pointed at a local cluster, its
 * status without paths or process IDs and its attestation config; it answers
 * only GET, only to its own name, and always with its content security
 * policy; its command line keeps it on loopback.
 */
import assert from "node:assert/strict";
import { buildConsole } from "../../src/console/build.ts";
import { CONSOLE_FILES } from "../../src/console/page.ts";
import { parseConsoleFlags } from "../../src/console/main.ts";
import { CONTENT_SECURITY_POLICY, serveConsole } from "../../src/console/server.ts";
import { UsageError } from "../../src/flags/flags.ts";
import type { ClusterStatus } from "../../src/localcluster/status.ts";

Deno.test("the console's bundle: the shared validator and report, nothing that needs Deno or Node.js", async () => {
  const dir = await Deno.makeTempDir({ prefix: "console-build-" });
  try {
    await buildConsole(dir);
    for (const file of CONSOLE_FILES) assert.ok((await Deno.stat(`${dir}/${file}`)).size > 0, file);
    const sources: string[] = JSON.parse(await Deno.readTextFile(`${dir}/app.js.map`)).sources;
    const ours = sources.filter((source) => !source.includes("node_modules/")).map((source) =>
      source.slice(source.lastIndexOf("/src/") + 1)
    );
    // The page verifies with the modules the CLI and the join service use.
    for (
      const module of [
        "src/verification/report.ts",
        "src/attestation/registry.ts",
        "src/attestation/tpm/validator.ts",
        "src/attestation/config.ts",
        "src/atls/verifier.ts",
      ]
    ) {
      assert.ok(ours.includes(module), `the bundle holds ${module}`);
    }
    // …and nothing that drives a TPM, runs a process or writes logs to stderr.
    for (const module of ours) {
      assert.doesNotMatch(
        module,
        /^src\/(os|rpc\/server|attestation\/tpm\/(issuer|tools|pcr)|log\/logger)\b/,
        module,
      );
    }
    const code = await Deno.readTextFile(`${dir}/app.js`);
    assert.doesNotMatch(code, /\bDeno\.[a-z]/, "no Deno API in the page");
    assert.doesNotMatch(code, /from\s*"node:|require\("node:/, "no Node.js module in the page");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the console server: the page, the cluster's status and config, and nothing else", async () => {
  const dir = await Deno.makeTempDir({ prefix: "console-files-" });
  const stateDir = await Deno.makeTempDir({ prefix: "console-cluster-" });
  try {
    await Deno.writeTextFile(`${dir}/index.html`, "<!doctype html><title>page</title>");
    await Deno.writeTextFile(`${dir}/app.js`, "console.log(1);");
    await Deno.writeTextFile(`${dir}/style.css`, "body{}");
    const status: ClusterStatus = {
      state: "running",
      stateDir,
      supervisorPid: 4242,
      network: {
        kind: "netns",
        hostAddress: "10.42.0.1",
        bridge: "c11n0",
        namespaces: ["c11n-1"],
        owner: "/tmp/state",
      },
      startedAt: "2025-01-01T00:00:00Z",
      kubeconfig: `${stateDir}/admin.conf`,
      logs: `${stateDir}/logs`,
      clusterId: "ab".repeat(32),
      nodes: [{
        name: "worker-0",
        role: "Worker",
        index: 1,
        address: "10.42.0.3",
        phase: "refused",
        reason: "PCR[4] mismatch",
        initEndpoint: "10.42.0.3:9000",
        attestationEndpoint: "10.42.0.3:9001",
        log: `${stateDir}/logs/worker-0.log`,
      }],
      processes: [{ name: "worker-0/bootstrapper", pid: 4343 }],
    };
    await Deno.writeTextFile(`${stateDir}/cluster.json`, JSON.stringify(status));
    const config = '{"variant":"dummy"}\n';
    await Deno.writeTextFile(`${stateDir}/attestation-config.json`, config);
    await using server = await serveConsole({ dir, hostname: "127.0.0.1", port: 0, localCluster: stateDir });
    const get = (path: string, init: RequestInit = {}) => fetch(new URL(path, server.url), init);

    const page = await get("/");
    assert.equal(page.status, 200);
    assert.equal(page.headers.get("content-type"), "text/html; charset=utf-8");
    assert.equal(page.headers.get("content-security-policy"), CONTENT_SECURITY_POLICY);
    assert.equal(page.headers.get("x-content-type-options"), "nosniff");
    assert.equal(await page.text(), "<!doctype html><title>page</title>");
    const script = await get("/app.js");
    assert.equal(script.headers.get("content-type"), "text/javascript; charset=utf-8");
    await script.body?.cancel();

    const cluster = await get("/api/cluster");
    assert.equal(cluster.status, 200);
    const text = await cluster.text();
    assert.deepEqual(JSON.parse(text), {
      state: "running",
      clusterId: "ab".repeat(32),
      network: "netns",
      startedAt: "2025-01-01T00:00:00Z",
      nodes: [{
        name: "worker-0",
        role: "Worker",
        address: "10.42.0.3",
        phase: "refused",
        reason: "PCR[4] mismatch",
        attestationEndpoint: "10.42.0.3:9001",
      }],
    });
    assert.ok(!text.includes(stateDir) && !text.includes("4343"), "no paths or process IDs");
    const served = await get("/api/attestation-config");
    assert.equal(await served.text(), config);

    for (
      const [path, init, want] of [
        ["/api/cluster", { method: "POST", body: "x" }, 405],
        ["/../cluster.json", {}, 404],
        ["/api/logs", {}, 404],
        ["/src/console/main.ts", {}, 404],
      ] as const
    ) {
      const response = await get(path, init);
      await response.body?.cancel();
      assert.equal(response.status, want, path);
    }
    // A page on another site that rebinds its name to 127.0.0.1 is not this server.
    assert.match(await rawGet(server.port, `attacker.example:${server.port}`), /^HTTP\/1\.1 421 /);
    assert.match(await rawGet(server.port, `localhost:${server.port}`), /^HTTP\/1\.1 200 /);
  } finally {
    await Deno.remove(dir, { recursive: true });
    await Deno.remove(stateDir, { recursive: true });
  }
});

/** The status line of `GET /` sent with the Host header `host` (fetch sets its own). */
async function rawGet(port: number, host: string): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(
      new TextEncoder().encode(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`),
    );
    const buffer = new Uint8Array(256);
    const n = await conn.read(buffer);
    return new TextDecoder().decode(buffer.subarray(0, n ?? 0)).split("\r\n")[0];
  } finally {
    conn.close();
  }
}

Deno.test("without a local cluster the console says how to point it at one", async () => {
  const dir = await Deno.makeTempDir({ prefix: "console-files-" });
  try {
    await using server = await serveConsole({ dir, hostname: "127.0.0.1", port: 0 });
    for (const path of ["/api/cluster", "/api/attestation-config"]) {
      const response = await fetch(new URL(path, server.url));
      assert.equal(response.status, 404);
      assert.match(await response.text(), /not pointed at a local cluster \(--local-cluster <state-dir>\)/);
    }
    const missing = await fetch(server.url);
    assert.equal(missing.status, 404, "an unbuilt page is a 404 naming the file");
    assert.match(await missing.text(), /index\.html is not built/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the console listens on loopback only (browsers give WebCrypto to secure contexts)", () => {
  assert.deepEqual(parseConsoleFlags([]), { port: 9080, listenAddress: "127.0.0.1" });
  const parsed = parseConsoleFlags([
    "--port",
    "0",
    "--listen-address",
    "::1",
    "--local-cluster",
    ".dev/cluster",
  ]);
  assert.ok(parsed !== "help");
  assert.equal(parsed.listenAddress, "::1");
  assert.ok(parsed.localCluster?.endsWith("/.dev/cluster"));
  for (const address of ["0.0.0.0", "10.0.0.5", "localhost"]) {
    assert.throws(() => parseConsoleFlags(["--listen-address", address]), (error: unknown) => {
      assert.ok(error instanceof UsageError);
      assert.match(error.message, /want a loopback address/);
      return true;
    });
  }
});

Deno.test("the console server: only its own address and port in Host, only GET and HEAD", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "console-files-" });
  try {
    await Deno.writeTextFile(`${dir}/index.html`, "<!doctype html><title>page</title>");
    await using server = await serveConsole({ dir, hostname: "127.0.0.1", port: 0 });
    const port = server.port;
    const hosts: { name: string; host: string; want: number }[] = [
      { name: "its address", host: `127.0.0.1:${port}`, want: 200 },
      { name: "localhost", host: `localhost:${port}`, want: 200 },
      { name: "IPv6 loopback", host: `[::1]:${port}`, want: 200 },
      { name: "its address on another port", host: `127.0.0.1:${port + 1}`, want: 421 },
      { name: "its address without a port", host: "127.0.0.1", want: 421 },
      { name: "a name that starts with localhost", host: `localhost.attacker.example:${port}`, want: 421 },
      { name: "its port after another name", host: `127.0.0.1.attacker.example:${port}`, want: 421 },
      { name: "the wildcard address", host: `0.0.0.0:${port}`, want: 421 },
      { name: "another loopback address", host: `127.0.0.2:${port}`, want: 421 },
    ];
    for (const row of hosts) {
      await t.step(`Host: ${row.name}`, async () => {
        assert.match(await rawGet(port, row.host), new RegExp(`^HTTP/1\\.1 ${row.want} `));
      });
    }
    for (const method of ["PUT", "DELETE", "PATCH", "OPTIONS"]) {
      await t.step(`${method} is refused with the methods that are allowed`, async () => {
        const response = await fetch(server.url, { method, body: method === "OPTIONS" ? undefined : "x" });
        await response.body?.cancel();
        assert.equal(response.status, 405);
        assert.equal(response.headers.get("allow"), "GET, HEAD");
      });
    }
    await t.step("HEAD is answered without a body", async () => {
      const response = await fetch(server.url, { method: "HEAD" });
      assert.equal(response.status, 200);
      assert.equal(response.headers.get("content-security-policy"), CONTENT_SECURITY_POLICY);
      assert.equal(await response.text(), "");
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
