import assert from "node:assert/strict";
import {
  CONTROL_PLANE_FILE_NAMES,
  ControlPlaneFilesError,
  loadControlPlaneFiles,
} from "../../src/joinservice/controlplanefiles.ts";

async function withPkiDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "pki-test-" });
  try {
    await Deno.mkdir(`${dir}/etcd`);
    for (const name of CONTROL_PLANE_FILE_NAMES) {
      await Deno.writeTextFile(`${dir}/${name}`, `content of ${name}`);
    }
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("loads the eight control-plane files in the original order", async () => {
  await withPkiDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/apiserver.key`, "not shipped");
    const files = await loadControlPlaneFiles({ pkiDir: dir });
    assert.deepEqual(files.map((f) => f.name), [
      "ca.key",
      "sa.key",
      "front-proxy-ca.key",
      "etcd/ca.key",
      "ca.crt",
      "sa.pub",
      "front-proxy-ca.crt",
      "etcd/ca.crt",
    ]);
    for (const file of files) assert.equal(new TextDecoder().decode(file.data), `content of ${file.name}`);
  });
});

Deno.test("a missing file is named in the error, without any file content", async () => {
  for (const missing of ["sa.key", "etcd/ca.crt"]) {
    await withPkiDir(async (dir) => {
      await Deno.remove(`${dir}/${missing}`);
      const error = await loadControlPlaneFiles({ pkiDir: dir }).then(
        () => assert.fail("loaded without " + missing),
        (e) => e,
      );
      assert.ok(error instanceof ControlPlaneFilesError);
      assert.equal(error.reason, "missing");
      assert.equal(error.file, missing);
      assert.equal(error.message, `control-plane file ${missing} not found in ${dir}`);
      assert.ok(!error.message.includes("content of"));
    });
  }
});

Deno.test("an unreadable file is named in the error", async () => {
  await withPkiDir(async (dir) => {
    await Deno.remove(`${dir}/ca.crt`);
    await Deno.mkdir(`${dir}/ca.crt`); // a directory where a file belongs
    await assert.rejects(
      loadControlPlaneFiles({ pkiDir: dir }),
      (error) => {
        assert.ok(error instanceof ControlPlaneFilesError);
        assert.equal(error.reason, "unreadable");
        assert.equal(error.file, "ca.crt");
        assert.match(error.message, new RegExp(`^reading control-plane file ${dir}/ca\\.crt: \\w+$`));
        return true;
      },
    );
  });
});

Deno.test("loading stops when the signal is aborted", async () => {
  await withPkiDir(async (dir) => {
    const controller = new AbortController();
    controller.abort(new Error("shutting down"));
    await assert.rejects(loadControlPlaneFiles({ pkiDir: dir, signal: controller.signal }), /shutting down/);
  });
});
