/** The README's main job (`npm start` → scripts/dev.ts), run as a user runs it. */
import assert from "node:assert/strict";
import { createKeyServiceClient } from "../../src/keyservice/client.ts";
import { startService } from "../support/process.ts";
import { KEY_SERVICE_LISTENING, REPO_ROOT } from "../keyservice/key_service_process.ts";

async function devDirs(): Promise<string[]> {
  const dirs: string[] = [];
  for await (const entry of Deno.readDir("/tmp")) {
    if (entry.name.startsWith("constellation-dev-")) dirs.push(entry.name);
  }
  return dirs;
}

Deno.test("the main job serves keys from a development secret and deletes the secret on exit", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  const before = await devDirs();
  const dev = await startService(
    "deno",
    ["run", "-P=dev", "--no-prompt", "scripts/dev.ts", `--port=${port}`],
    {
      readyMatch: KEY_SERVICE_LISTENING,
      cwd: REPO_ROOT,
    },
  );
  try {
    assert.equal(dev.port, port);
    assert.ok(dev.stdoutLines.some((line) => line.includes(`http://127.0.0.1:${port}/kms.API/GetDataKey`)));
    assert.equal(
      (await devDirs()).filter((d) => !before.includes(d)).length,
      1,
      "one private secret directory",
    );
    using client = createKeyServiceClient({ endpoint: `127.0.0.1:${port}`, timeoutMs: 5000 });
    const key = await client.getDataKey("0123abcd-0000-4000-8000-00000000cafe", 32);
    assert.equal(key.length, 32);
  } finally {
    assert.equal((await dev.stop()).code, 0);
  }
  assert.deepEqual((await devDirs()).filter((d) => !before.includes(d)), [], "the secret directory is gone");
});
