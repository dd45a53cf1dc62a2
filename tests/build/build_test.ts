/**
 * `scripts/build.ts` and its artifacts: the key service bundle, run through
 * its launcher by the pinned Deno, reads secrets inside its baked permissions
 * (/var/config) and cannot read or bind outside them; the join service bundle
 * serves join.API (TLS, the key service client, X.509, YAML: the bundled
 * CommonJS modules too) from inputs inside its permissions, and cannot read
 * outside them (its inputs, /etc/shadow); the CLI's bundle imports none of
 * its lazy built-ins (`node:http2`, …) up front and still verifies the built
 * bootstrapper over them; the console, copied away from the checkout, serves
 * the page built beside it, and says so when it is missing.
 * The launchers find Deno in `$DENO`,
 * on PATH, or beside the checkout's dist/, and say what to install without.
 * The permission matrix is in permission_matrix_test.ts.
 */
import assert from "node:assert/strict";
import { createKeyServiceClient } from "../../src/keyservice/client.ts";
import {
  artifactFlags,
  buildComponent,
  BuildError,
  COMPONENTS,
  launcherScript,
  permissionFlags,
} from "../../scripts/build.ts";
import { HKDF_ZERO } from "../kms/vectors.ts";
import { JOIN_SERVICE_LISTENING } from "../support/join_cluster.ts";
import { runToExit, startService } from "../../src/os/service_process.ts";
import { KEY_SERVICE_LISTENING, REPO_ROOT, writeSecrets } from "../keyservice/key_service_process.ts";
import { withTempDir } from "../support/temp_dir.ts";
import { CONSOLE_LISTENING } from "../../src/console/main.ts";
import { BOOTSTRAPPER_LISTENING } from "../../src/localcluster/node.ts";
import { CONSOLE_FILES, PAGE_DIR_NAME } from "../../src/console/page.ts";
import { buildArtifacts, DIST, PINNED_DENO } from "./artifacts.ts";
import { CONFIG_DIR, ensureConfigDir, joinServiceArgs, writeJoinServiceInputs } from "./service_inputs.ts";

const LAUNCHER = `${REPO_ROOT}dist/key-service`;
const JOIN_SERVICE_LAUNCHER = `${REPO_ROOT}dist/join-service`;
const BOOTSTRAPPER_LAUNCHER = `${REPO_ROOT}dist/bootstrapper`;
const CLI_LAUNCHER = `${REPO_ROOT}dist/cli`;
/** The pinned Deno the launcher runs. */
const LAUNCHER_ENV = { DENO: PINNED_DENO };
const ZERO_UUID = "00000000-0000-0000-0000-000000000000";

Deno.test("permissionFlags() expands a deno.json permission set into explicit flags", () => {
  const config = {
    permissions: {
      svc: {
        read: ["/var/config", "/etc/x"],
        net: true,
        env: { allow: ["A", "B"], deny: ["SECRET"] },
        run: ["tpm2_quote"],
        write: false,
        sys: [],
      },
      all: { all: true },
      relative: { read: ["config"] },
      comma: { net: ["a,b"] },
    },
  };
  assert.deepEqual(permissionFlags(config, "svc"), [
    "--allow-read=/var/config,/etc/x",
    "--allow-net",
    "--allow-env=A,B",
    "--deny-env=SECRET",
    "--allow-run=tpm2_quote",
  ]);
  assert.throws(() => permissionFlags(config, "absent"), {
    message: 'deno.json has no permission set "absent"',
  });
  assert.throws(() => permissionFlags(config, "all"), {
    message: 'permission set "all": "all" is not allowed in an artifact',
  });
  assert.throws(() => permissionFlags(config, "relative"), {
    message: 'permission set "relative": read path "config" must be absolute in an artifact',
  });
  assert.throws(() => permissionFlags(config, "comma"), {
    message: 'permission set "comma": net entry "a,b" has a comma',
  });
});

Deno.test("a lazy built-in that Deno does not have is named, and leaves nothing in dist/", async () => {
  await withTempDir("build-lazy-builtin-", async (root) => {
    const config = JSON.parse(await Deno.readTextFile(`${REPO_ROOT}deno.json`));
    const cli = COMPONENTS.find((component) => component.name === "cli")!;
    await assert.rejects(
      buildComponent(root, { config, denoVersion: "2.9.6" }, {
        ...cli,
        entry: `${REPO_ROOT}${cli.entry}`,
        lazyBuiltins: ["http2", "htp2"],
      }),
      (error: Error) =>
        error instanceof BuildError &&
        /^lazyBuiltins: "htp2" is not a Node built-in module/.test(error.message),
    );
    assert.deepEqual(await Array.fromAsync(Deno.readDir(`${root}/dist`)), []);
  });
});

Deno.test("a build without esbuild on PATH says what to install, and leaves nothing in dist/", async () => {
  await withTempDir("build-no-esbuild-", async (root) => {
    const config = JSON.parse(await Deno.readTextFile(`${REPO_ROOT}deno.json`));
    const keyService = COMPONENTS.find((component) => component.name === "key-service")!;
    const path = Deno.env.get("PATH")!;
    // A directory without esbuild (not /usr/bin, where Debian's may be).
    Deno.env.set("PATH", root);
    try {
      await assert.rejects(
        buildComponent(root, { config, denoVersion: "2.9.6" }, {
          ...keyService,
          entry: `${REPO_ROOT}${keyService.entry}`,
        }),
        (error: Error) =>
          error instanceof BuildError && /^esbuild is not on PATH \(run `npm ci`/.test(error.message),
      );
    } finally {
      Deno.env.set("PATH", path);
    }
    assert.deepEqual(await Array.fromAsync(Deno.readDir(`${root}/dist`)), []);
  });
});

Deno.test("launcherScript() quotes every flag for the shell and names the Deno to install", () => {
  const script = launcherScript({ name: "svc", entry: "src/svc.ts", permissionSet: "svc" }, [
    "--allow-net=[::1]",
    "--allow-read=/it's",
  ], "2.9.6");
  assert.match(script, /^#!\/bin\/sh\n/);
  assert.ok(
    script.includes(
      `exec "$deno" run --no-config --no-prompt '--allow-net=[::1]' '--allow-read=/it'\\''s' "$dir/svc.js" "$@"`,
    ),
    script,
  );
  assert.ok(script.includes("install Deno 2.9.6 on PATH"), script);
});

/** The PATH of a machine without Deno: the launcher cannot find one there. */
const PATH_WITHOUT_DENO = "/usr/bin:/bin";

Deno.test("a launcher finds Deno on PATH, else the checkout's pinned one, else says what to install", async (t) => {
  await buildArtifacts();
  for (const dir of PATH_WITHOUT_DENO.split(":")) {
    await assert.rejects(Deno.stat(`${dir}/deno`), Deno.errors.NotFound, `this test needs no deno in ${dir}`);
  }
  await withTempDir("launcher-", async (dir) => {
    await t.step("deno on PATH comes first", async () => {
      // A deno that leaves a mark, then is the pinned one.
      await Deno.mkdir(`${dir}/bin`);
      await Deno.writeTextFile(
        `${dir}/bin/deno`,
        `#!/bin/sh\ntouch ${dir}/path-deno-ran\nexec ${PINNED_DENO} "$@"\n`,
        { mode: 0o755 },
      );
      const result = await runToExit(LAUNCHER, ["--help"], {
        env: { PATH: `${dir}/bin:${PATH_WITHOUT_DENO}` },
      });
      assert.equal(result.code, 0, result.stderrLines.join("\n"));
      assert.match(result.stdoutLines[0], /^Usage: key-service/);
      assert.ok((await Deno.stat(`${dir}/path-deno-ran`)).isFile, "the deno on PATH ran");
    });

    await t.step("without one on PATH, the checkout's pinned Deno beside dist/", async () => {
      const result = await runToExit(LAUNCHER, ["--help"], { env: { PATH: PATH_WITHOUT_DENO }, cwd: "/" });
      assert.equal(result.code, 0, result.stderrLines.join("\n"));
      assert.match(result.stdoutLines[0], /^Usage: key-service/);
    });

    await t.step("without either, it names what to install or set, and exits 127", async () => {
      // The launcher and its bundle, away from any checkout, run as the #! line runs the launcher.
      await Deno.copyFile(LAUNCHER, `${dir}/key-service`);
      await Deno.copyFile(`${LAUNCHER}.js`, `${dir}/key-service.js`);
      const result = await runToExit("sh", [`${dir}/key-service`, "--help"], {
        env: { PATH: PATH_WITHOUT_DENO },
        cwd: "/",
      });
      assert.equal(result.code, 127);
      assert.deepEqual(result.stdoutLines, []);
      assert.deepEqual(result.stderrLines, [
        `key-service: no Deno found: DENO is not set, no deno on PATH (${PATH_WITHOUT_DENO}), no ${
          dir.replace(/\/[^/]+$/, "")
        }/node_modules/deno/deno.`,
        "key-service: install Deno 2.9.6 on PATH, run npm ci in the checkout, or set DENO=/path/to/deno.",
      ]);
    });

    await t.step("DENO overrides both", async () => {
      const result = await runToExit("sh", [`${dir}/key-service`, "--help"], {
        env: { PATH: PATH_WITHOUT_DENO, DENO: PINNED_DENO },
        cwd: "/",
      });
      assert.equal(result.code, 0, result.stderrLines.join("\n"));
      assert.match(result.stdoutLines[0], /^Usage: key-service/);
    });
  });
});

Deno.test("the built services run under exactly their permission sets", async (t) => {
  const built = (await buildArtifacts()).join("\n");
  for (const component of COMPONENTS) {
    assert.match(built, new RegExp(`^built dist/${component.name}\\.js \\(\\d+ KiB, esbuild\\)$`, "m"));
    assert.match(built, new RegExp(`^built dist/${component.name} \\(launcher: `, "m"));
  }
  // No bundle decodes a descriptor at start (scripts/embedded_descriptors.ts), so none holds protobuf-es's
  // descriptor of descriptor.proto, which only that decoding needs.
  for (const name of ["key-service", "join-service", "bootstrapper"]) {
    const bundle = await Deno.readTextFile(`${DIST}${name}.js`);
    assert.ok(
      !bundle.includes('"google/protobuf/descriptor.proto"'),
      `${name}.js holds descriptor.proto's descriptor`,
    );
    assert.ok(
      bundle.includes('$typeName:"google.protobuf.FileDescriptorProto"'),
      `${name}.js: no inlined descriptor`,
    );
  }
  // The CLI's lazily imported Connect code holds only the well-known types it uses.
  assert.ok(!(await Deno.readTextFile(`${DIST}cli.js`)).includes('name:"google/protobuf/api.proto"'));
  const launcher = await Deno.readTextFile(LAUNCHER);
  assert.ok(
    launcher.includes("--allow-read=/var/config '--allow-net=0.0.0.0,127.0.0.1,localhost,[::],[::1]'"),
    launcher,
  );
  assert.equal((await Deno.stat(LAUNCHER)).mode! & 0o777, 0o755);

  const createdConfigDir = await ensureConfigDir();
  const inside = await writeSecrets(
    { masterSecret: new Uint8Array(32), salt: new Uint8Array(32) },
    CONFIG_DIR,
  );
  const outside = await writeSecrets({ masterSecret: new Uint8Array(32), salt: new Uint8Array(32) });
  /** The built key service on a free loopback port, with the secrets under /var/config. */
  const startBuiltKeyService = () =>
    startService(LAUNCHER, [
      ...["--port", "0", "--listen-address", "127.0.0.1"],
      ...["--master-secret", inside.masterSecretPath, "--salt", inside.saltPath],
    ], { readyMatch: KEY_SERVICE_LISTENING, env: LAUNCHER_ENV, cwd: "/" });
  try {
    await t.step("it serves the HKDFZero key from secrets under /var/config", async () => {
      const service = await startBuiltKeyService();
      try {
        using client = createKeyServiceClient({ endpoint: `127.0.0.1:${service.port}`, timeoutMs: 5000 });
        assert.equal((await client.getDataKey(ZERO_UUID, 32)).toHex(), HKDF_ZERO.output);
      } finally {
        assert.equal((await service.stop()).code, 0);
      }
    });

    await t.step("it cannot read a master secret outside its permissions", async () => {
      const result = await runToExit(LAUNCHER, [
        "--port",
        "0",
        "--listen-address",
        "127.0.0.1",
        "--master-secret",
        outside.masterSecretPath,
        "--salt",
        inside.saltPath,
      ], { env: LAUNCHER_ENV, cwd: "/" });
      assert.equal(result.code, 1);
      assert.equal(result.stderrLines.length, 1, result.stderrLines.join("\n"));
      const { level, msg } = JSON.parse(result.stderrLines[0]);
      assert.equal(level, "error");
      assert.ok(msg.includes(outside.masterSecretPath), msg);
      assert.match(msg, /outside this process's read permissions/);
    });

    await t.step("it cannot listen outside its net permissions", async () => {
      const result = await runToExit(LAUNCHER, [
        "--port",
        "0",
        "--listen-address",
        "192.0.2.1",
        "--master-secret",
        inside.masterSecretPath,
        "--salt",
        inside.saltPath,
      ], { env: LAUNCHER_ENV, cwd: "/" });
      assert.equal(result.code, 1);
      assert.equal(result.stderrLines.length, 1, result.stderrLines.join("\n"));
      assert.match(
        JSON.parse(result.stderrLines[0]).msg,
        /listen address 192\.0\.2\.1 is outside this process's net permissions/,
      );
    });

    await t.step("the join service serves join.API from inputs inside its permissions", async () => {
      const dir = await Deno.makeTempDir({ dir: CONFIG_DIR, prefix: "join-service-test-" });
      const keyService = await startBuiltKeyService();
      try {
        await writeJoinServiceInputs(dir);
        const joinService = await startService(JOIN_SERVICE_LAUNCHER, joinServiceArgs(dir, keyService.port), {
          readyMatch: JOIN_SERVICE_LISTENING,
          env: LAUNCHER_ENV,
          cwd: "/",
        });
        try {
          // A challenge takes TLS (a certificate made at start), Connect, and the key service (its MAC key).
          const call = await runToExit("buf", [
            ...["curl", "--schema", "proto", "--protocol", "grpc", "--insecure", "--data", "{}"],
            `https://127.0.0.1:${joinService.port}/join.API/GetChallenge`,
          ], { cwd: REPO_ROOT });
          assert.equal(call.code, 0, `${call.stderrLines.join("\n")}\n${joinService.stderrLines.join("\n")}`);
          const { nonce, expiresAtUnixMs } = JSON.parse(call.stdoutLines.join("\n"));
          assert.ok(Uint8Array.fromBase64(nonce).length > 32, nonce);
          assert.ok(Number(expiresAtUnixMs) > Date.now(), expiresAtUnixMs);
        } finally {
          assert.equal((await joinService.stop()).code, 0);
        }
      } finally {
        assert.equal((await keyService.stop()).code, 0);
        await Deno.remove(dir, { recursive: true });
      }
    });

    await t.step(
      "the bootstrapper starts with its state disk under /dev, which only cryptsetup opens, the CLI verifies it, " +
        "and a missing disk is named",
      async () => {
        const help = await runToExit(BOOTSTRAPPER_LAUNCHER, ["--help"], { env: LAUNCHER_ENV, cwd: "/" });
        assert.equal(help.code, 0);
        assert.match(help.stdoutLines[0], /^Usage: bootstrapper \[rejoin\]/);
        // A real state disk is a /dev path, which Deno 2.9.6 refuses without --allow-all; /dev/shm is one
        // here, written by a shell for that reason. Blank: the disk is read only once the node serves.
        const disk = `/dev/shm/bootstrapper-build-test-${crypto.randomUUID()}.img`;
        const root = await Deno.makeTempDir({ prefix: "bootstrapper-root-" });
        try {
          assert.equal((await runToExit("sh", ["-c", `head -c 4096 /dev/zero > ${disk}`])).code, 0);
          await Deno.mkdir(`${root}/run/cryptsetup-keys.d`, { recursive: true });
          await Deno.writeFile(`${root}/run/cryptsetup-keys.d/state.key`, new Uint8Array(32).fill(7));
          const args = (stateDisk: string) => [
            ...["--attestation-variant", "dummy", "--tpm", "none", "--root", root, "--state-disk", stateDisk],
            ...["--metadata-url", "http://127.0.0.1:9", "--systemctl", "none", "--journalctl", "none"],
            ...["--port", "0", "--listen-address", "127.0.0.1"],
          ];
          const node = await startService(BOOTSTRAPPER_LAUNCHER, args(disk), {
            readyMatch: BOOTSTRAPPER_LISTENING,
            env: LAUNCHER_ENV,
            cwd: "/",
          });
          try {
            // A command that calls a node: the CLI's bundle looks node:http2 up only now (scripts/build.ts).
            const config = `${root}/attestation-config.json`;
            await Deno.writeTextFile(config, '{"variant":"dummy"}\n');
            const verify = await runToExit(CLI_LAUNCHER, [
              ...["verify", "--node", `127.0.0.1:${node.port}`, "--attestation-config", config],
            ], { env: LAUNCHER_ENV, cwd: "/" });
            assert.equal(verify.code, 0, verify.stderrLines.join("\n"));
            assert.match(verify.stdoutLines[0], /^node 127\.0\.0\.1:\d+ \(dummy\): attestation OK$/);
          } finally {
            await node.stop();
          }
          const missing = await runToExit(BOOTSTRAPPER_LAUNCHER, args(`${disk}.absent`), {
            env: LAUNCHER_ENV,
            cwd: "/",
          });
          assert.equal(missing.code, 1);
          const { msg } = JSON.parse(missing.stderrLines.at(-1)!);
          assert.match(msg, /state disk \/dev\/shm\/.*\.absent: does not exist or cannot be opened/);
        } finally {
          await runToExit("sh", ["-c", `rm -f ${disk}`]);
          await Deno.remove(root, { recursive: true });
        }
      },
    );

    await t.step("the CLI runs, and cannot read outside its permissions (/proc)", async () => {
      // The built-ins only its commands that call a node use: not imported by the bundle, and not looked
      // up by `cli --help` (a preloaded module records every lookup).
      const cli = COMPONENTS.find((component) => component.name === "cli")!;
      const lazyBuiltins = cli.lazyBuiltins ?? [];
      assert.ok(lazyBuiltins.includes("http2"));
      const bundle = await Deno.readTextFile(`${CLI_LAUNCHER}.js`);
      for (const builtin of lazyBuiltins) {
        assert.doesNotMatch(bundle, new RegExp(`(from|import)\\s*\\(?\\s*"(node:)?${builtin}"`), builtin);
      }
      const recorder = await Deno.makeTempFile({ prefix: "builtin-lookups-", suffix: ".js" });
      try {
        await Deno.writeTextFile(
          recorder,
          `const lookUp = process.getBuiltinModule.bind(process);
process.getBuiltinModule = (id) => {
  console.error("looked up " + id);
  return lookUp(id);
};
`,
        );
        const config = JSON.parse(await Deno.readTextFile(`${REPO_ROOT}deno.json`));
        const recorded = await runToExit(PINNED_DENO, [
          ...["run", "--no-config", "--no-prompt", ...artifactFlags(config, cli), "--preload", recorder],
          ...[`${CLI_LAUNCHER}.js`, "--help"],
        ], { cwd: "/" });
        assert.equal(recorded.code, 0, recorded.stderrLines.join("\n"));
        const lookedUp = recorded.stderrLines.filter((line) => line.startsWith("looked up "));
        for (const builtin of lazyBuiltins) {
          assert.ok(!lookedUp.includes(`looked up node:${builtin}`), builtin);
        }
      } finally {
        await Deno.remove(recorder);
      }
      const help = await runToExit(CLI_LAUNCHER, ["--help"], { env: LAUNCHER_ENV, cwd: "/" });
      assert.equal(help.code, 0, help.stderrLines.join("\n"));
      assert.match(help.stdoutLines.join("\n"), /verify/);
      const result = await runToExit(CLI_LAUNCHER, [
        ...["recover", "--master-secret", "/proc/self/environ", "--disk-uuid"],
        ...["0123abcd-0000-4000-8000-00000000cafe", "--print-hex"],
      ], { env: LAUNCHER_ENV, cwd: "/" });
      assert.equal(result.code, 1);
      assert.match(result.stderrLines.join("\n"), /cli: .*\/proc\/self\/environ/);
      assert.doesNotMatch(result.stderrLines.join("\n"), /\n\s+at /, "no stack trace");
    });

    await t.step(
      "the console, copied away from the checkout, serves its page and a local cluster's config",
      async () => {
        await withTempDir("console-artifact-", async (dir) => {
          // The launcher, its bundle and its page, as they would be shipped; run from /.
          for (const file of ["console", "console.js"]) {
            await Deno.copyFile(`${DIST}${file}`, `${dir}/${file}`);
          }
          const stateDir = `${dir}/cluster`;
          await Deno.mkdir(stateDir);
          await Deno.writeTextFile(`${stateDir}/attestation-config.json`, '{"variant":"dummy"}\n');
          const args = ["--port", "0", "--local-cluster", stateDir];
          // Run as its #! line runs it (sh), as the tests may run only the checkout's dist/.
          const pageless = await runToExit("sh", [`${dir}/console`, ...args], {
            env: LAUNCHER_ENV,
            cwd: "/",
          });
          assert.equal(pageless.code, 1);
          assert.match(pageless.stderrLines.join("\n"), /^console: no page in .*\/console-web\/: /);

          await Deno.mkdir(`${dir}/${PAGE_DIR_NAME}`);
          for (const file of CONSOLE_FILES) {
            await Deno.copyFile(`${DIST}${PAGE_DIR_NAME}/${file}`, `${dir}/${PAGE_DIR_NAME}/${file}`);
          }
          const served = await startService("sh", [`${dir}/console`, ...args], {
            readyMatch: CONSOLE_LISTENING,
            env: LAUNCHER_ENV,
            cwd: "/",
          });
          try {
            const get = (path: string) => fetch(`http://127.0.0.1:${served.port}${path}`);
            const page = await get("/app.js");
            assert.equal(page.status, 200);
            assert.deepEqual(
              new Uint8Array(await page.arrayBuffer()),
              await Deno.readFile(`${DIST}${PAGE_DIR_NAME}/app.js`),
            );
            assert.match(await (await get("/")).text(), /^<!doctype html>/);
            assert.equal(await (await get("/api/attestation-config")).text(), '{"variant":"dummy"}\n');
          } finally {
            assert.equal((await served.stop()).code, 0);
          }
        });
      },
    );

    await t.step("the join service cannot read its inputs outside its permissions", async () => {
      const result = await runToExit(JOIN_SERVICE_LAUNCHER, [
        "--attestation-variant",
        "qemu-vtpm",
        "--key-service-endpoint",
        "127.0.0.1:9000",
        "--api-server-endpoint",
        "10.0.0.1:6443",
        "--config-dir",
        outside.dir,
      ], { env: LAUNCHER_ENV, cwd: "/" });
      assert.equal(result.code, 1);
      assert.equal(result.stderrLines.length, 1, result.stderrLines.join("\n"));
      const { msg } = JSON.parse(result.stderrLines[0]);
      assert.ok(msg.includes(`${outside.dir}/measurementSalt`), msg);
      assert.match(msg, /outside this process's read permissions/);
    });

    await t.step("the join service cannot read /etc/shadow, given as its kubeconfig", async () => {
      const dir = await Deno.makeTempDir({ dir: CONFIG_DIR, prefix: "join-service-test-" });
      try {
        await writeJoinServiceInputs(dir);
        const result = await runToExit(JOIN_SERVICE_LAUNCHER, [
          ...["--attestation-variant", "dummy", "--key-service-endpoint", "127.0.0.1:9000"],
          ...["--api-server-endpoint", "10.0.0.1:6443", "--kubeconfig", "/etc/shadow"],
          ...["--config-dir", `${dir}/config`, "--kubernetes-dir", `${dir}/kubernetes`],
        ], { env: LAUNCHER_ENV, cwd: "/" });
        assert.equal(result.code, 1);
        const { msg } = JSON.parse(result.stderrLines.at(-1)!);
        assert.match(
          msg,
          /^cannot start: reading kubeconfig \/etc\/shadow: Requires read access to "\/etc\/shadow"/,
        );
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    });
  } finally {
    await Deno.remove(inside.dir, { recursive: true });
    await Deno.remove(outside.dir, { recursive: true });
    if (createdConfigDir) await Deno.remove(CONFIG_DIR).catch(() => {});
  }
});
