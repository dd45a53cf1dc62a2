/** The key service alone with a generated development secret (`deno task dev` → scripts/dev.ts), run as a user runs it. */
import assert from "node:assert/strict";
import { createKeyServiceClient } from "../../src/keyservice/client.ts";
import { runToExit, startService } from "../../src/os/service_process.ts";
import { KEY_SERVICE_LISTENING, REPO_ROOT } from "../keyservice/key_service_process.ts";

/** The banner's first line; group 1 is the port it names. */
const BANNER = /^Key service \(development master secret, generated for this run\) on 127\.0\.0\.1:(\d+)\.$/;

async function devDirs(): Promise<string[]> {
  const dirs: string[] = [];
  for await (const entry of Deno.readDir("/tmp")) {
    if (entry.name.startsWith("constellation-dev-")) dirs.push(entry.name);
  }
  return dirs;
}

/** The main job's `deno run` arguments with `flags`. */
const devArgs = (flags: string[]) => ["run", "-P=dev", "--no-prompt", "scripts/dev.ts", ...flags];

Deno.test("the main job prints its banner once the key service listens, and deletes the secret on exit", async () => {
  const before = await devDirs();
  // Port 0: the banner can only name the real port if it was taken from the service's "listening" line.
  const dev = await startService("deno", devArgs(["--port=0"]), { readyMatch: BANNER, cwd: REPO_ROOT });
  try {
    // Called at once, with no retry: the banner promises the service is already up.
    using client = createKeyServiceClient({ endpoint: `127.0.0.1:${dev.port}`, timeoutMs: 5000 });
    const key = await client.getDataKey("0123abcd-0000-4000-8000-00000000cafe", 32);
    assert.equal(key.length, 32);

    const listening = JSON.parse(await dev.waitForLine(KEY_SERVICE_LISTENING, 5000));
    assert.equal(listening.port, dev.port);
    assert.equal(dev.stdoutLines.filter((line) => BANNER.test(line)).length, 1, "one banner");
    assert.ok(
      dev.stdoutLines.some((line) => line.includes(`http://127.0.0.1:${dev.port}/kms.API/GetDataKey`)),
      dev.stdoutLines.join("\n"),
    );
    assert.equal(
      (await devDirs()).filter((d) => !before.includes(d)).length,
      1,
      "one private secret directory",
    );
  } finally {
    assert.equal((await dev.stop()).code, 0);
  }
  assert.deepEqual((await devDirs()).filter((d) => !before.includes(d)), [], "the secret directory is gone");
});

Deno.test("the main job refuses a bad port in one line, with no banner", async () => {
  const before = await devDirs();
  for (const port of ["abc", "-1", "65536"]) {
    const result = await runToExit("deno", devArgs(["--port", port]), { cwd: REPO_ROOT });
    assert.equal(result.code, 2, result.stderrLines.join("\n"));
    assert.deepEqual(result.stderrLines, [
      `dev: invalid --port "${port}": want a number from 0 to 65535 (see --help)`,
    ]);
    assert.deepEqual(result.stdoutLines, []);
  }
  assert.deepEqual((await devDirs()).filter((d) => !before.includes(d)), [], "no secret directory");
});

Deno.test("the main job on a port in use fails with the key service's error and no banner", async () => {
  const before = await devDirs();
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = taken.addr.port;
  const result = await runToExit("deno", devArgs([`--port=${port}`]), { cwd: REPO_ROOT });
  assert.equal(result.code, 1, result.stderrLines.join("\n"));
  assert.deepEqual(result.stdoutLines, []);
  const errors = result.stderrLines.filter((line) => line.startsWith("{")).map((line) => JSON.parse(line));
  assert.deepEqual(errors.map((entry) => [entry.level, entry.component]), [["error", "key-service"]]);
  assert.match(errors[0].msg, new RegExp(`^cannot start: listen EADDRINUSE: .*127\\.0\\.0\\.1:${port}$`));
  assert.deepEqual((await devDirs()).filter((d) => !before.includes(d)), [], "the secret directory is gone");
});
