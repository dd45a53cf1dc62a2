/**
 * readRegularFile (src/fs/read_regular_file.ts): an input that is not a
 * regular file is named at once instead of blocking a read forever (a named
 * pipe), through the readers of the CLI's and the services' input files.
 */
import assert from "node:assert/strict";
import { NotARegularFileError, readRegularFile } from "../../src/fs/read_regular_file.ts";
import { readMasterSecretFile } from "../../src/cli/master_secret_file.ts";
import { readSecretFile } from "../../src/secrets/secret_file.ts";
import { runToExit } from "../../src/os/service_process.ts";

Deno.test("readRegularFile reads files and names a named pipe or a directory without blocking", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "regular-file-" });
  try {
    const fifo = `${dir}/pipe`;
    const made = await runToExit("sh", ["-c", `mkfifo '${fifo}'`]);
    assert.equal(made.code, 0, made.stderrLines.join("\n"));
    await Deno.writeFile(`${dir}/file`, new Uint8Array([1, 2, 3]));

    await t.step("a regular file, and a symlink to one", async () => {
      assert.deepEqual(await readRegularFile(`${dir}/file`), new Uint8Array([1, 2, 3]));
    });
    await t.step("a named pipe: refused at once", async () => {
      await assert.rejects(
        readRegularFile(fifo),
        NotARegularFileError,
        `${fifo} is a named pipe, not a regular file`,
      );
    });
    await t.step("a directory: refused", async () => {
      await assert.rejects(
        readRegularFile(dir),
        NotARegularFileError,
        `${dir} is a directory, not a regular file`,
      );
    });
    await t.step("a missing file: Deno's NotFound, as before", async () => {
      await assert.rejects(readRegularFile(`${dir}/absent`), Deno.errors.NotFound);
    });
    await t.step("the CLI's master secret file and a service's secret file given a named pipe", async () => {
      await assert.rejects(readMasterSecretFile(fifo), /is a named pipe, not a regular file/);
      await assert.rejects(
        readSecretFile(fifo, { description: "master secret", minLength: 16 }),
        /master secret file .*pipe: cannot be read: .* is a named pipe/,
      );
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
