import assert from "node:assert/strict";
import { readSecretFile, SecretFileError } from "../../src/secrets/secret_file.ts";

async function withTempDir(fn: (dir: string) => Promise<void>) {
  const dir = await Deno.makeTempDir({ prefix: "secret-file-test-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("readSecretFile() returns the raw bytes, trailing newline included", async () => {
  await withTempDir(async (dir) => {
    const bytes = new Uint8Array(17).fill(0x41);
    bytes[16] = 0x0a;
    await Deno.writeFile(`${dir}/secret`, bytes);
    assert.deepEqual(
      await readSecretFile(`${dir}/secret`, { description: "master secret", minLength: 16 }),
      bytes,
    );
  });
});

Deno.test("readSecretFile() names the file and the problem, never the content", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/short`, "SECRETSECRET");
    const cases: [string, string, string][] = [
      [`${dir}/short`, "too-short", `master secret file ${dir}/short: too short: 12 bytes, want at least 16`],
      [`${dir}/absent`, "missing", `master secret file ${dir}/absent: does not exist`],
      [dir, "unreadable", `master secret file ${dir}: cannot be read: `],
    ];
    for (const [path, reason, message] of cases) {
      await assert.rejects(readSecretFile(path, { description: "master secret", minLength: 16 }), (err) => {
        assert.ok(err instanceof SecretFileError);
        assert.equal(err.reason, reason);
        assert.equal(err.path, path);
        assert.ok(err.message.startsWith(message), err.message);
        assert.ok(!err.message.includes("SECRET"));
        assert.ok(!err.message.includes("\n"));
        return true;
      });
    }
  });
});

Deno.test("readSecretFile() accepts a file of exactly minLength bytes, refuses one byte fewer", async (t) => {
  await withTempDir(async (dir) => {
    const rows: { name: string; length: number; accepted: boolean }[] = [
      { name: "minLength bytes", length: 16, accepted: true },
      { name: "minLength - 1 bytes", length: 15, accepted: false },
    ];
    for (const row of rows) {
      await t.step(row.name, async () => {
        const bytes = new Uint8Array(row.length).fill(0x42);
        await Deno.writeFile(`${dir}/secret`, bytes);
        const read = readSecretFile(`${dir}/secret`, { description: "salt", minLength: 16 });
        if (row.accepted) assert.deepEqual(await read, bytes);
        else {await assert.rejects(read, (err) =>
            err instanceof SecretFileError && err.reason === "too-short");}
      });
    }
  });
});
