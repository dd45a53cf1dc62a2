/** Atomic file writes: content, mode, replacement, and nothing left behind on failure. */
import assert from "node:assert/strict";
import { AtomicWriteError, removeIfExists, writeFileAtomic } from "../../src/fs/atomic_write.ts";
import { withTempDir } from "../support/temp_dir.ts";

function withDir(test: (dir: string) => Promise<void>): Promise<void> {
  return withTempDir("atomic-write-", test);
}

async function entries(dir: string): Promise<string[]> {
  return (await Array.fromAsync(Deno.readDir(dir))).map((entry) => entry.name).sort();
}

/** A signal that reports "aborted" from its `checks`-th look on, so an abort lands mid-write. */
function abortingAfter(checks: number): AbortSignal {
  let looked = 0;
  const reason = new DOMException("test abort", "AbortError");
  return {
    get aborted() {
      return ++looked > checks;
    },
    reason,
    throwIfAborted() {
      if (++looked > checks) throw reason;
    },
  } as unknown as AbortSignal;
}

Deno.test("writeFileAtomic: writes bytes and text with mode 0600 by default, and the mode given", async () => {
  await withDir(async (dir) => {
    await writeFileAtomic(`${dir}/secret`, new Uint8Array([0, 1, 2, 255]));
    assert.deepEqual(await Deno.readFile(`${dir}/secret`), new Uint8Array([0, 1, 2, 255]));
    assert.equal((await Deno.stat(`${dir}/secret`)).mode! & 0o777, 0o600);

    await writeFileAtomic(`${dir}/public.yaml`, "kind: Policy\n", { mode: 0o644 });
    assert.equal(await Deno.readTextFile(`${dir}/public.yaml`), "kind: Policy\n");
    assert.equal((await Deno.stat(`${dir}/public.yaml`)).mode! & 0o777, 0o644);
    assert.deepEqual(await entries(dir), ["public.yaml", "secret"]);
  });
});

Deno.test("writeFileAtomic: the mode is exact whatever the umask (0o755 survives umask 022)", async () => {
  await withDir(async (dir) => {
    await writeFileAtomic(`${dir}/tool`, "#!/bin/sh\n", { mode: 0o755 });
    assert.equal((await Deno.stat(`${dir}/tool`)).mode! & 0o777, 0o755);
  });
});

/** Runs `writeFileAtomic(path, "data", { mode })` in a child Deno whose umask is `umask`. */
async function writeUnderUmask(umask: number, path: string, mode: number): Promise<void> {
  const dir = path.slice(0, path.lastIndexOf("/"));
  const script = `${dir}/.write_under_umask.ts`;
  const module = new URL("../../src/fs/atomic_write.ts", import.meta.url).href;
  await Deno.writeTextFile(
    script,
    `import { writeFileAtomic } from ${JSON.stringify(module)};\n` +
      `await writeFileAtomic(${JSON.stringify(path)}, "data", { mode: ${mode} });\n`,
  );
  try {
    const output = await new Deno.Command("sh", {
      args: [
        "-c",
        `umask ${umask.toString(8)} && exec "$0" run --no-config --no-prompt --allow-read=${dir} ` +
        `--allow-write=${dir} "$1"`,
        Deno.execPath(),
        script,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(output.success, new TextDecoder().decode(output.stderr));
  } finally {
    await Deno.remove(script);
  }
}

Deno.test("writeFileAtomic: the mode is exact under umask 077 (0o644 stays 0o644)", async () => {
  await withDir(async (dir) => {
    await writeUnderUmask(0o077, `${dir}/kubelet.conf`, 0o644);
    assert.equal(await Deno.readTextFile(`${dir}/kubelet.conf`), "data");
    assert.equal((await Deno.stat(`${dir}/kubelet.conf`)).mode! & 0o777, 0o644);
    assert.deepEqual(await entries(dir), ["kubelet.conf"]);
  });
});

Deno.test("writeFileAtomic: the temporary file is created new: a symlink planted at its name is not followed", async () => {
  await withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/victim`, "victim", { mode: 0o644 });
    // The temporary name's random part comes from crypto.getRandomValues: fixed here, it is predictable.
    // Deno.symlink needs unscoped permissions; ln does not.
    const ln = await new Deno.Command("ln", {
      args: ["-s", `${dir}/victim`, `${dir}/.secret.${"00".repeat(8)}.tmp`],
    })
      .output();
    assert.ok(ln.success, new TextDecoder().decode(ln.stderr));
    const getRandomValues = crypto.getRandomValues;
    crypto.getRandomValues = <T extends ArrayBufferView | null>(array: T): T => {
      if (array) new Uint8Array(array.buffer, array.byteOffset, array.byteLength).fill(0);
      return array;
    };
    try {
      await assert.rejects(writeFileAtomic(`${dir}/secret`, "secret bytes"), (error) => {
        assert.ok(error instanceof AtomicWriteError, String(error));
        assert.equal(error.reason, "failed");
        return true;
      });
    } finally {
      crypto.getRandomValues = getRandomValues;
    }
    assert.equal(await Deno.readTextFile(`${dir}/victim`), "victim");
    assert.equal((await Deno.stat(`${dir}/victim`)).mode! & 0o777, 0o644);
    assert.deepEqual(await entries(dir), [`.secret.${"00".repeat(8)}.tmp`, "victim"], "no target written");
  });
});

Deno.test("writeFileAtomic: replaces an existing file (and its mode) by rename", async () => {
  await withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/state.json`, "old content, longer than the new one", { mode: 0o644 });
    const before = await Deno.stat(`${dir}/state.json`);
    await writeFileAtomic(`${dir}/state.json`, "new");
    assert.equal(await Deno.readTextFile(`${dir}/state.json`), "new");
    const after = await Deno.stat(`${dir}/state.json`);
    assert.equal(after.mode! & 0o777, 0o600);
    // A rename puts a new inode in place; an in-place rewrite would keep the old one.
    assert.notEqual(after.ino, before.ino);
    assert.deepEqual(await entries(dir), ["state.json"]);
  });
});

Deno.test("writeFileAtomic: creates missing parent directories unless told not to", async () => {
  await withDir(async (dir) => {
    await writeFileAtomic(`${dir}/a/b/c.pem`, "x");
    assert.equal(await Deno.readTextFile(`${dir}/a/b/c.pem`), "x");
    await assert.rejects(writeFileAtomic(`${dir}/missing/c.pem`, "x", { createParents: false }), (error) => {
      assert.ok(error instanceof AtomicWriteError);
      assert.equal(error.reason, "failed");
      assert.equal(error.path, `${dir}/missing/c.pem`);
      return true;
    });
  });
});

Deno.test("writeFileAtomic: a failing rename leaves the target untouched and no temporary file", async () => {
  await withDir(async (dir) => {
    // The target is a non-empty directory: the temp file gets written, then the rename fails.
    await Deno.mkdir(`${dir}/target`);
    await Deno.writeTextFile(`${dir}/target/keep`, "kept");
    await assert.rejects(writeFileAtomic(`${dir}/target`, "secret bytes"), (error) => {
      assert.ok(error instanceof AtomicWriteError);
      assert.equal(error.reason, "failed");
      assert.match(error.message, /writing .*target/);
      assert.doesNotMatch(error.message, /secret bytes/);
      return true;
    });
    assert.deepEqual(await entries(dir), ["target"]);
    assert.equal(await Deno.readTextFile(`${dir}/target/keep`), "kept");
  });
});

Deno.test("writeFileAtomic: an abort in the middle of writing leaves the old file and no temporary file", async () => {
  await withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/big`, "old");
    const data = new Uint8Array(3 << 20).fill(7); // three chunks: the abort lands after the first
    await assert.rejects(writeFileAtomic(`${dir}/big`, data, { signal: abortingAfter(2) }), (error) => {
      assert.ok(error instanceof AtomicWriteError);
      assert.equal(error.reason, "aborted");
      return true;
    });
    assert.equal(await Deno.readTextFile(`${dir}/big`), "old");
    assert.deepEqual(await entries(dir), ["big"]);
  });
});

Deno.test("writeFileAtomic: an already aborted signal writes nothing", async () => {
  await withDir(async (dir) => {
    const controller = new AbortController();
    controller.abort();
    await assert.rejects(writeFileAtomic(`${dir}/f`, "x", { signal: controller.signal }), (error) => {
      assert.ok(error instanceof AtomicWriteError);
      assert.equal(error.reason, "aborted");
      return true;
    });
    assert.deepEqual(await entries(dir), []);
  });
});

Deno.test("removeIfExists: removes a file, and reports a missing one without failing", async () => {
  await withDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/f`, "x");
    assert.equal(await removeIfExists(`${dir}/f`), true);
    assert.equal(await removeIfExists(`${dir}/f`), false);
    assert.deepEqual(await entries(dir), []);
  });
});
