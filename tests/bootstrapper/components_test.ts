import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import {
  ComponentError,
  ComponentInstaller,
  DEFAULT_IDLE_TIMEOUT_MS,
} from "../../src/bootstrapper/components.ts";
import { type Component, ComponentSchema } from "../../src/gen/components/components_pb.ts";
import { sleep } from "../../src/async/sleep.ts";
import { listFiles, ManualTimers, recordingLogger } from "./support.ts";
import { componentHash as sha256, type TarEntry as Entry, tarGz } from "../support/tar.ts";

/** A local HTTP server answering from a table of paths; `failFirst` answers 503 that many times per path. */
function serve(files: Record<string, Uint8Array>, failFirst = 0) {
  const requests: string[] = [];
  const failures = new Map<string, number>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (request) => {
    const path = new URL(request.url).pathname;
    requests.push(path);
    const failed = failures.get(path) ?? 0;
    if (failed < failFirst) {
      failures.set(path, failed + 1);
      return new Response("try later", { status: 503 });
    }
    const body = files[path];
    return body ? new Response(body as BodyInit) : new Response("not found", { status: 404 });
  });
  return { server, requests, url: (path: string) => `http://127.0.0.1:${server.addr.port}${path}` };
}

const GOOD_ENTRIES: Entry[] = [
  { name: "cni/", type: "5", mode: 0o755 },
  { name: "cni/bridge", mode: 0o755, content: "#!/bin/sh\necho bridge\n" },
  { name: "./cni/README", mode: 0o666, content: "plugins" },
  { name: "cni/bridge-link", type: "2", link: "bridge" },
  { name: "cni/bridge-hard", type: "1", link: "cni/bridge" },
  { name: "crictl", mode: 0o4755, content: "crictl binary" },
];

/** The idle timeout of the stalled-server row (real time; not a backoff's length, which resolve at once). */
const IDLE_TIMEOUT_MS = 1_500;

/**
 * A server whose first answer to each path sends the headers and a few bytes, then nothing more (a
 * stalled mirror); later answers are whole.
 */
function serveStalling(files: Record<string, Uint8Array>) {
  const requests: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (request) => {
    const path = new URL(request.url).pathname;
    requests.push(path);
    const body = files[path];
    if (requests.filter((p) => p === path).length > 1) return new Response(body as BodyInit);
    return new Response(new ReadableStream({ start: (controller) => controller.enqueue(body.slice(0, 4)) }));
  });
  return { server, requests, url: (path: string) => `http://127.0.0.1:${server.addr.port}${path}` };
}

interface Setup {
  root: string;
  tmpDir: string;
  installer: ComponentInstaller;
  timers: ManualTimers;
}

async function setup(): Promise<Setup> {
  const root = await Deno.makeTempDir({ prefix: "components-" });
  const tmpDir = `${root}/tmp`;
  await Deno.mkdir(tmpDir);
  const timers = new ManualTimers();
  // Backoff sleeps resolve at once (recorded), so retries run without real waiting; the idle watchdog
  // runs in real time (the default one never fires in these tests).
  timers.sleep = (ms: number, options?: { signal?: AbortSignal }) => {
    if (ms === IDLE_TIMEOUT_MS || ms === DEFAULT_IDLE_TIMEOUT_MS) return sleep(ms, options?.signal);
    timers.requested.push(ms);
    return Promise.resolve();
  };
  const installer = new ComponentInstaller(
    { timers, logger: recordingLogger().logger },
    { root, tmpDir, attempts: 3, maxDownloadBytes: 1024 * 1024 },
  );
  return { root, tmpDir, installer, timers };
}

function component(url: string, hash: string, installPath: string, extract: boolean): Component {
  return create(ComponentSchema, { url, hash, installPath, extract });
}

async function refused(promise: Promise<unknown>, reason: string, message?: RegExp): Promise<void> {
  const error = await promise.then(() => assert.fail("installed"), (e) => e);
  assert.ok(error instanceof ComponentError, String(error));
  assert.equal(error.reason, reason, error.message);
  if (message) assert.match(error.message, message);
}

async function mode(path: string): Promise<number> {
  return (await Deno.lstat(path)).mode! & 0o7777;
}

Deno.test("component installation", async (t) => {
  const archive = await tarGz(GOOD_ENTRIES);
  const binary = new TextEncoder().encode("#!/bin/sh\necho kubelet\n");
  const bad = {
    dotdot: await tarGz([{ name: "ok", content: "fine" }, { name: "cni/../../escape", content: "x" }]),
    absolute: await tarGz([{ name: "/etc/evil", content: "x" }]),
    symlinkOut: await tarGz([{ name: "out", type: "2", link: "../../etc" }]),
    symlinkAbsolute: await tarGz([{ name: "out", type: "2", link: "/etc/passwd" }]),
    belowSymlink: await tarGz([{ name: "dir", type: "2", link: "." }, { name: "dir/file", content: "x" }]),
    // Lexically "etc" inside the prefix; through the archive's own `d/l -> ..`, four levels above it.
    chainedSymlink: await tarGz([
      { name: "d/", type: "5" },
      { name: "d/l", type: "2", link: ".." },
      { name: "e", type: "2", link: "d/l/d/l/d/l/d/l/../../../../../../../../etc" },
    ]),
    // The same with the links the other way round: `d/l` turns the earlier target into "../etc".
    symlinkOnAnEarlierTarget: await tarGz([
      { name: "e", type: "2", link: "d/l/../../etc" },
      { name: "d/", type: "5" },
      { name: "d/l", type: "2", link: ".." },
    ]),
    belowFile: await tarGz([
      { name: "first", content: "one" },
      { name: "a", content: "file a" },
      { name: "a/x", content: "x" },
      { name: "last", content: "last" },
    ]),
    fileOverDirectory: await tarGz([{ name: "a/x", content: "x" }, { name: "a", content: "file a" }]),
    directoryOverFile: await tarGz([{ name: "a", content: "file a" }, { name: "a", type: "5" }]),
    // A hard link to `sub/f` once it is a symlink would copy "../etc" to the prefix's top, outside it.
    hardlinkToSymlink: await tarGz([
      { name: "sub/f", content: "x" },
      { name: "sub/f", type: "2", link: "../etc" },
      { name: "h", type: "1", link: "sub/f" },
    ]),
    hardlinkOut: await tarGz([{ name: "h", type: "1", link: "../outside" }]),
    device: await tarGz([{ name: "dev", type: "3" }]),
    fifo: await tarGz([{ name: "pipe", type: "6" }]),
    notGzip: new TextEncoder().encode("not an archive"),
  };
  const files: Record<string, Uint8Array> = { "/archive.tar.gz": archive, "/kubelet": binary };
  for (const [name, bytes] of Object.entries(bad)) files[`/${name}.tar.gz`] = bytes;
  const http = serve(files);
  const flaky = serve({ "/kubelet": binary }, 2);
  const down = serve({}, 1000);
  const stalling = serveStalling({ "/kubelet": binary });

  const rows: { name: string; run: (s: Setup) => Promise<void> }[] = [
    {
      name: "a good file and archive install with their modes",
      run: async ({ root, installer }) => {
        await installer.install([
          component(http.url("/kubelet"), await sha256(binary), "/run/state/bin/kubelet", false),
          component(http.url("/archive.tar.gz"), await sha256(archive), "/opt/cni/bin", true),
        ]);
        assert.deepEqual(await Deno.readFile(`${root}/run/state/bin/kubelet`), binary);
        assert.equal(await mode(`${root}/run/state/bin/kubelet`), 0o544);
        const prefix = `${root}/opt/cni/bin`;
        assert.deepEqual(await listFiles(prefix), [
          "cni/README",
          "cni/bridge",
          "cni/bridge-hard",
          "cni/bridge-link",
          "crictl",
        ]);
        assert.equal(await mode(`${prefix}/cni`), 0o755);
        assert.equal(await mode(`${prefix}/cni/bridge`), 0o755);
        assert.equal(await mode(`${prefix}/cni/README`), 0o644, "no group/other write");
        assert.equal(await mode(`${prefix}/crictl`), 0o755, "no set-id bits");
        assert.equal(await Deno.readLink(`${prefix}/cni/bridge-link`), "bridge");
        assert.equal(await Deno.readTextFile(`${prefix}/cni/bridge-hard`), "#!/bin/sh\necho bridge\n");
        assert.equal(await Deno.readTextFile(`${prefix}/crictl`), "crictl binary");
      },
    },
    {
      name: "an archive made with `tar -C dir .` (a ./ entry first, as the CNI plugins' releases) installs",
      run: async ({ root, installer }) => {
        const cni = await tarGz([
          { name: "./", type: "5", mode: 0o755 },
          { name: "./bridge", mode: 0o755, content: "bridge" },
          { name: ".", type: "5", mode: 0o700 },
          { name: "./loopback", mode: 0o755, content: "loopback" },
        ]);
        const url = `data:;base64,${cni.toBase64()}`;
        await installer.installOne(component(url, await sha256(cni), "/opt/cni/bin", true));
        assert.deepEqual(await listFiles(`${root}/opt/cni/bin`), ["bridge", "loopback"]);
        assert.equal(await mode(`${root}/opt/cni/bin`), 0o755, "the prefix keeps the install's mode");
      },
    },
    {
      name: "a data: URL installs",
      run: async ({ root, installer }) => {
        const url = `data:;base64,${binary.toBase64()}`;
        await installer.installOne(component(url, await sha256(binary), "/run/state/bin/kubeadm", false));
        assert.deepEqual(await Deno.readFile(`${root}/run/state/bin/kubeadm`), binary);
      },
    },
    {
      name: "reinstalling replaces an existing file and a symlink in place without following it",
      run: async ({ root, installer }) => {
        const outside = `${root}/outside`;
        await Deno.writeTextFile(outside, "untouched");
        await Deno.mkdir(`${root}/opt/cni/bin`, { recursive: true });
        const ln = await new Deno.Command("ln", { args: ["-s", outside, `${root}/opt/cni/bin/crictl`] })
          .output();
        assert.ok(ln.success);
        await installer.installOne(
          component(http.url("/archive.tar.gz"), await sha256(archive), "/opt/cni/bin", true),
        );
        assert.equal(await Deno.readTextFile(outside), "untouched");
        assert.equal(await Deno.readTextFile(`${root}/opt/cni/bin/crictl`), "crictl binary");
      },
    },
    {
      name: "wrong hash refused, nothing installed, not retried",
      run: async ({ root, installer }) => {
        const before = http.requests.length;
        await refused(
          installer.installOne(
            component(http.url("/kubelet"), `sha256:${"00".repeat(32)}`, "/run/state/bin/kubelet", false),
          ),
          "hash-mismatch",
          /does not match expected hash/,
        );
        assert.equal(http.requests.length - before, 1);
        assert.deepEqual(await listFiles(`${root}/run`), []);
      },
    },
    ...([
      ["a `../` entry", "dotdot", "unsafe-archive", /"\.\." element/],
      ["an absolute path", "absolute", "unsafe-archive", /absolute path/],
      ["a symlink escaping the prefix", "symlinkOut", "unsafe-archive", /points outside/],
      ["an absolute symlink", "symlinkAbsolute", "unsafe-archive", /absolute or empty target/],
      ["an entry below a symlink of the archive", "belowSymlink", "unsafe-archive", /below a symlink/],
      ["a symlink through a symlink of the archive", "chainedSymlink", "unsafe-archive", /through a symlink/],
      [
        "a symlink on an earlier symlink's way",
        "symlinkOnAnEarlierTarget",
        "unsafe-archive",
        /"d\/l" is named like a directory/,
      ],
      ["an entry below a file of the archive", "belowFile", "unsafe-archive", /"a\/x" lies below a file/],
      ["a file named like a directory", "fileOverDirectory", "unsafe-archive", /named like a directory/],
      ["a directory named like a file", "directoryOverFile", "unsafe-archive", /named like a file/],
      ["a hard link to a symlink", "hardlinkToSymlink", "unsafe-archive", /not point to an earlier file/],
      ["a hard link escaping the prefix", "hardlinkOut", "unsafe-archive", /"\.\." element/],
      ["a device file", "device", "unsafe-archive", /refused type \(device/],
      ["a FIFO", "fifo", "unsafe-archive", /refused type \(fifo/],
      ["a file that is not a tar.gz", "notGzip", "malformed-archive", /decompress/],
    ] as const).map(([what, name, reason, message]) => ({
      name: `${what} refused; nothing installed`,
      run: async ({ root, installer }: Setup) => {
        await refused(
          installer.installOne(
            component(http.url(`/${name}.tar.gz`), await sha256(bad[name]), "/opt/cni/bin", true),
          ),
          reason,
          message,
        );
        assert.deepEqual(await listFiles(`${root}/opt`), []);
        assert.deepEqual(await listFiles(root), [], "nothing anywhere under the root");
      },
    })),
    {
      name: "a server failing twice, then answering: installed after two backoffs",
      run: async ({ root, installer, timers }) => {
        await installer.installOne(
          component(flaky.url("/kubelet"), await sha256(binary), "/run/state/bin/kubelet", false),
        );
        assert.deepEqual(await Deno.readFile(`${root}/run/state/bin/kubelet`), binary);
        assert.deepEqual(flaky.requests, ["/kubelet", "/kubelet", "/kubelet"]);
        assert.deepEqual(timers.requested, [1000, 2000]);
      },
    },
    {
      name: "a server that stops sending: the attempt is given up after the idle timeout and retried",
      run: async ({ root, tmpDir, timers }) => {
        const installer = new ComponentInstaller(
          { timers, logger: recordingLogger().logger },
          { root, tmpDir, idleTimeoutMs: IDLE_TIMEOUT_MS },
        );
        await installer.installOne(
          component(stalling.url("/kubelet"), await sha256(binary), "/run/state/bin/kubelet", false),
        );
        assert.deepEqual(await Deno.readFile(`${root}/run/state/bin/kubelet`), binary);
        assert.deepEqual(stalling.requests, ["/kubelet", "/kubelet"]);
        assert.deepEqual(timers.requested, [1000], "one backoff");
      },
    },
    {
      name: "a server that keeps failing: bounded attempts, then download-failed",
      run: async ({ installer, timers }) => {
        await refused(
          installer.installOne(
            component(down.url("/kubelet"), await sha256(binary), "/run/state/bin/kubelet", false),
          ),
          "download-failed",
          /3 download attempts failed; last: the server answered 503/,
        );
        assert.deepEqual(timers.requested, [1000, 2000]);
      },
    },
    {
      name: "by default a failing server is retried until the caller's deadline, backoff capped at 30 s",
      run: async ({ root, tmpDir }) => {
        const deadline = new AbortController();
        const backoffs: number[] = [];
        const timers = {
          sleep: (ms: number, options?: { signal?: AbortSignal }) => {
            if (ms === DEFAULT_IDLE_TIMEOUT_MS) return sleep(ms, options?.signal);
            backoffs.push(ms);
            if (backoffs.length === 9) deadline.abort(new Error("joining: no answer within 900000 ms"));
            return Promise.resolve();
          },
        };
        const installer = new ComponentInstaller({ timers, logger: recordingLogger().logger }, {
          root,
          tmpDir,
        });
        const error = await installer.installOne(
          component(down.url("/kubelet"), await sha256(binary), "/run/state/bin/kubelet", false),
          { signal: deadline.signal },
        ).then(() => assert.fail("installed"), (e) => e);
        assert.match(String(error), /joining: no answer within 900000 ms/);
        assert.deepEqual(backoffs, [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000]);
      },
    },
    {
      name: "an abort while the archive is checked stops the check at once",
      run: async ({ root, tmpDir }) => {
        // The archive's last entry is unsafe: a check pass that read on would end "unsafe-archive".
        const entries: Entry[] = [...Array(50).keys()].map((i) => ({ name: `f${i}`, content: "x" }));
        const late = await tarGz([...entries, { name: "/etc/evil", content: "x" }]);
        const controller = new AbortController();
        // The download's last read aborts, so the abort lands after the download, before extraction.
        const fetchAborting = () => {
          let sent = false;
          const body = new ReadableStream<Uint8Array>({
            pull: (stream) => {
              if (sent) {
                controller.abort(new Error("deadline"));
                stream.close();
              } else stream.enqueue(late);
              sent = true;
            },
          });
          return Promise.resolve(new Response(body));
        };
        const installer = new ComponentInstaller(
          { fetch: fetchAborting, logger: recordingLogger().logger },
          { root, tmpDir },
        );
        await assert.rejects(
          installer.installOne(
            component("https://example.test/late.tar.gz", await sha256(late), "/opt/x", true),
            {
              signal: controller.signal,
            },
          ),
          /^Error: deadline$/,
        );
        assert.deepEqual(await listFiles(`${root}/opt`), []);
      },
    },
    {
      name: "a download over the size bound is refused",
      run: async ({ root, tmpDir }) => {
        const installer = new ComponentInstaller(
          { logger: recordingLogger().logger },
          { root, tmpDir, maxDownloadBytes: 10 },
        );
        await refused(
          installer.installOne(
            component(http.url("/kubelet"), await sha256(binary), "/run/state/bin/kubelet", false),
          ),
          "too-large",
        );
      },
    },
    {
      name: "bad install paths and hashes are refused before downloading",
      run: async ({ installer }) => {
        const before = http.requests.length;
        const hash = await sha256(binary);
        await refused(
          installer.installOne(component(http.url("/kubelet"), hash, "run/state/bin/x", false)),
          "invalid-component",
        );
        await refused(
          installer.installOne(component(http.url("/kubelet"), hash, "/run/../etc/x", false)),
          "invalid-component",
        );
        // The root itself, however written: an archive there would write anywhere on the node.
        for (const root of ["/", "/.", "//", "/./"]) {
          await refused(
            installer.installOne(component(http.url("/archive.tar.gz"), hash, root, true)),
            "invalid-component",
            /is not an absolute path other than "\/", without "\.\.", control characters/,
          );
        }
        await refused(
          installer.installOne(component(http.url("/kubelet"), "sha256:ABC", "/run/x", false)),
          "invalid-component",
        );
        await refused(
          installer.installOne(component("file:///etc/passwd", hash, "/run/x", false)),
          "invalid-component",
        );
        assert.equal(http.requests.length, before);
      },
    },
  ];
  try {
    for (const row of rows) {
      await t.step(row.name, async () => {
        const s = await setup();
        try {
          await row.run(s);
          assert.deepEqual(await listFiles(s.tmpDir), [], "no temporary download left");
          const leftovers = (await listFiles(s.root)).filter((path) =>
            path.endsWith(".tmp") || path.endsWith(".download")
          );
          assert.deepEqual(leftovers, [], "no temporary file left");
        } finally {
          await Deno.remove(s.root, { recursive: true });
        }
      });
    }
  } finally {
    await Promise.all([
      http.server.shutdown(),
      flaky.server.shutdown(),
      down.server.shutdown(),
      stalling.server.shutdown(),
    ]);
  }
});
