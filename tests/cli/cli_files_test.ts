/**
 * The CLI's files and pure parts: the master secret file (created
 * exclusively with mode 0600, never overwritten, malformed ones refused),
 * attestation config errors naming the file and field, the recovery against
 * the reference vector, and the verify report rendered from a fixed result.
 */
import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { readAttestationConfigFile } from "../../src/cli/attestation_config_file.ts";
import { CliError } from "../../src/cli/errors.ts";
import { parseCliArgs } from "../../src/cli/flags.ts";
import {
  loadOrCreateMasterSecretFile,
  parseMasterSecretFile,
  readMasterSecretFile,
} from "../../src/cli/master_secret_file.ts";
import { readInitSecret, saveNodeLogs } from "../../src/cli/init.ts";
import { describeNodeCallError, wrongServerHint } from "../../src/cli/node_errors.ts";
import { saveKubeconfig } from "../../src/cli/kubeconfig_out.ts";
import { recoverDiskKey, RECOVERY_SERVER, runRecover } from "../../src/cli/recover.ts";
import { renderVerifyTable } from "../../src/cli/verify_report.ts";
import { renderVerifyJson, type VerifyResult } from "../../src/verification/report.ts";
import { UsageError } from "../../src/flags/flags.ts";

const bytes = (from: number) => Uint8Array.from({ length: 32 }, (_, i) => from + i);
const REFERENCE_UUID = "0123abcd-0000-4000-8000-00000000cafe";
const REFERENCE_DISK_KEY = "cd38fc179a5154a9bd738351a8d0469a30c9edd57f9d8a31bc0153926daeadb1";

async function tempDir(): Promise<string> {
  return await Deno.makeTempDir({ prefix: "cli-test-" });
}

function rejectsWith(reason: string, pattern: RegExp) {
  return (error: unknown) => {
    assert.ok(error instanceof CliError, String(error));
    assert.equal(error.reason, reason);
    assert.match(error.message, pattern);
    return true;
  };
}

Deno.test("master secret file: created exclusively with mode 0600, read back, never overwritten", async () => {
  const dir = await tempDir();
  const path = `${dir}/constellation-mastersecret.json`;
  const first = await loadOrCreateMasterSecretFile(path);
  assert.equal(first.created, true);
  assert.equal(first.secret.key.length, 32);
  assert.equal(first.secret.salt.length, 32);
  assert.equal((await Deno.stat(path)).mode! & 0o777, 0o600);
  const json = JSON.parse(await Deno.readTextFile(path));
  assert.deepEqual(Object.keys(json).sort(), ["key", "salt"]);
  assert.deepEqual(Uint8Array.fromBase64(json.key), first.secret.key);
  const before = await Deno.readFile(path);
  const second = await loadOrCreateMasterSecretFile(path);
  assert.equal(second.created, false);
  assert.deepEqual(second.secret, first.secret);
  assert.deepEqual(await Deno.readFile(path), before, "an existing file is not rewritten");
  assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["constellation-mastersecret.json"]);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("master secret file: malformed files are refused naming the file and field, never a value", async () => {
  const dir = await tempDir();
  const path = `${dir}/ms.json`;
  const key = bytes(0).toBase64();
  const salt = bytes(0x20).toBase64();
  const cases: [string, RegExp][] = [
    ["not json", /ms\.json: not valid JSON/],
    ["[]", /want a JSON object/],
    [JSON.stringify({ key }), /"salt" is missing/],
    [JSON.stringify({ key: "AA==", salt }), /"key" is 1 bytes, want at least 16/],
    [
      JSON.stringify({ key, salt: bytes(0).subarray(0, 16).toBase64() }),
      /"salt" is 16 bytes, want at least 32/,
    ],
    [JSON.stringify({ key: "not base64!", salt }), /"key" must be standard base64/],
    [
      JSON.stringify({ key, salt, extra: 1 }),
      /an unknown field \(known: key, salt; its name is not repeated\)/,
    ],
  ];
  for (const [text, pattern] of cases) {
    await Deno.writeTextFile(path, text, { mode: 0o600 });
    await assert.rejects(readMasterSecretFile(path), rejectsWith("master-secret", pattern));
    // A malformed file is refused, not replaced.
    await assert.rejects(loadOrCreateMasterSecretFile(path), rejectsWith("master-secret", pattern));
    assert.equal(await Deno.readTextFile(path), text);
  }
  try {
    parseMasterSecretFile(JSON.stringify({ key: "not base64!", salt }), path);
  } catch (error) {
    assert.ok(!(error as Error).message.includes(salt));
  }
  await assert.rejects(
    readMasterSecretFile(`${dir}/absent.json`),
    rejectsWith("master-secret", /absent\.json: no such file/),
  );
  await Deno.remove(dir, { recursive: true });
});

Deno.test("master secret file: an unknown field is counted, never named; a key given twice is refused", async (t) => {
  const path = "/ops/ms.json";
  const key = bytes(0).toBase64();
  const salt = bytes(0x20).toBase64();
  // The secret pasted as a field name (a line too high), and a terminal escape sequence.
  const secret = bytes(0x40).toBase64();
  const rows: { name: string; text: string; want: string }[] = [
    {
      name: "a secret as an unknown field's name",
      text: `{"key":"${key}","salt":"${salt}","${secret}":1}`,
      want: "an unknown field (known: key, salt; its name is not repeated)",
    },
    {
      name: "an escape sequence as an unknown field's name",
      text: JSON.stringify({ "\x1b[2Jx": 1, key, salt }),
      want: "an unknown field (known: key, salt; its name is not repeated)",
    },
    {
      name: "three unknown fields",
      text: `{"key":"${key}","salt":"${salt}","${secret}":1,"a":2,"b":3}`,
      want: "3 unknown fields (known: key, salt; their names are not repeated)",
    },
    {
      name: "key given twice (JSON.parse would keep the last)",
      text: `{"key":"${key}","key":"${bytes(0x60).toBase64()}","salt":"${salt}"}`,
      want: 'key "key" is given twice at the top level: give each key once',
    },
    {
      name: "salt given twice, once escaped",
      text: `{"key":"${key}","salt":"${salt}","s\u0061lt":"${salt}"}`,
      want: 'key "salt" is given twice at the top level: give each key once',
    },
    {
      name: "a secret repeated as a key inside a value: not named",
      text: `{"key":{"${secret}":1,"${secret}":2},"key":"${key}","salt":"${salt}"}`,
      want: "a key inside a value is given twice: give each key once",
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.throws(() => parseMasterSecretFile(row.text, path), (error) => {
        assert.ok(error instanceof CliError, String(error));
        assert.equal(error.reason, "master-secret");
        assert.equal(error.message, `master secret file ${path}: ${row.want}`);
        return true;
      });
    });
  }
});

Deno.test("attestation config: errors name the file and the field", async () => {
  const dir = await tempDir();
  const path = `${dir}/attestation.json`;
  const pcr = "ab".repeat(32);
  const cases: [unknown, RegExp][] = [
    [{ variant: "qemu-vtpm", akTrust: { trustAnyKey: true } }, /attestation\.json: measurements are missing/],
    [
      { variant: "qemu-vtpm", measurements: { "4": { expected: "abcd" } }, akTrust: { trustAnyKey: true } },
      /attestation\.json: measurement "4": expected must be hex of 32 or 48 bytes/,
    ],
    [{ variant: "qemu-vtpm", measurements: { "4": pcr } }, /akTrust is missing/],
    [{ variant: "sev-snp" }, /unknown attestation variant "sev-snp"/],
    [{ measurements: {} }, /variant is missing/],
    [
      {
        variant: "qemu-vtpm",
        measurements: { "4": pcr },
        akTrust: { allowedKeyDigests: ["11".repeat(32)], controlPlaneKeyDigests: ["00".repeat(32)] },
      },
      /controlPlaneKeyDigests\[0\] is not in allowedKeyDigests/,
    ],
  ];
  for (const [config, pattern] of cases) {
    await Deno.writeTextFile(path, JSON.stringify(config));
    await assert.rejects(readAttestationConfigFile(path), rejectsWith("config", pattern));
  }
  await Deno.writeTextFile(path, "{");
  await assert.rejects(
    readAttestationConfigFile(path),
    rejectsWith("config", /attestation\.json: invalid JSON/),
  );
  await assert.rejects(
    readAttestationConfigFile(`${dir}/absent.json`),
    rejectsWith("config", /cannot read attestation config .*absent\.json: no such file/),
  );
  await Deno.writeTextFile(
    path,
    JSON.stringify({ variant: "qemu-vtpm", measurements: { "4": pcr }, akTrust: { trustAnyKey: true } }),
  );
  const loaded = await readAttestationConfigFile(path);
  assert.equal(loaded.config.variant, "qemu-vtpm");
  assert.deepEqual([...loaded.config.measurements.keys()], [4]);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("attestation config: a file over 1 MiB is refused unread; names and values from it are escaped and cut", async (t) => {
  const dir = await tempDir();
  const path = `${dir}/attestation.json`;
  try {
    const rows: { name: string; text: string; want: string }[] = [
      {
        name: "a 50 MB variant",
        text: JSON.stringify({ variant: "v".repeat(50_000_000) }),
        want: "50000014 bytes, larger than the 1048576 bytes an attestation config may have",
      },
      {
        name: "a long variant under the limit",
        text: JSON.stringify({ variant: "v".repeat(500_000) }),
        want: `unknown attestation variant "${"v".repeat(63)}…; known: dummy, qemu-vtpm`,
      },
      {
        name: "an unknown field with an escape sequence",
        text: JSON.stringify({ variant: "dummy", "\x1b[2Jx": 1 }),
        want: 'unknown field "\\u001b[2Jx" (known: variant, measurements, akTrust)',
      },
    ];
    for (const row of rows) {
      await t.step(row.name, async () => {
        await Deno.writeTextFile(path, row.text);
        await assert.rejects(readAttestationConfigFile(path), (error) => {
          assert.ok(error instanceof CliError, String(error));
          assert.equal(error.reason, "config");
          assert.equal(error.message, `attestation config ${path}: ${row.want}`);
          return true;
        });
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("recover: the disk key of the reference vector, to a new 0600 file or as hex on request", async () => {
  const dir = await tempDir();
  const secretPath = `${dir}/ms.json`;
  await Deno.writeTextFile(
    secretPath,
    JSON.stringify({ key: bytes(0).toBase64(), salt: bytes(0x20).toBase64() }),
  );
  assert.equal((await recoverDiskKey(secretPath, REFERENCE_UUID)).toHex(), REFERENCE_DISK_KEY);
  assert.equal((await recoverDiskKey(secretPath, REFERENCE_UUID.toUpperCase())).toHex(), REFERENCE_DISK_KEY);
  const lines: string[] = [];
  await runRecover({
    masterSecret: secretPath,
    diskUuid: REFERENCE_UUID,
    output: { file: `${dir}/disk.key` },
  }, (l) => lines.push(l));
  assert.equal((await Deno.readFile(`${dir}/disk.key`)).toHex(), REFERENCE_DISK_KEY);
  assert.equal((await Deno.stat(`${dir}/disk.key`)).mode! & 0o777, 0o600);
  assert.ok(!lines.join("\n").includes(REFERENCE_DISK_KEY), "the key is not printed unless asked");
  assert.match(lines.join("\n"), /cryptsetup open --key-file .*disk\.key/);
  await assert.rejects(
    runRecover(
      { masterSecret: secretPath, diskUuid: REFERENCE_UUID, output: { file: `${dir}/disk.key` } },
      () => {},
    ),
    rejectsWith("output", /disk\.key already exists/),
  );
  const printed: string[] = [];
  await runRecover(
    { masterSecret: secretPath, diskUuid: REFERENCE_UUID, output: "stdout-hex" },
    (l) => printed.push(l),
  );
  assert.deepEqual(printed, [REFERENCE_DISK_KEY]);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("command line: one-line usage errors", () => {
  const usage = (args: string[], pattern: RegExp) =>
    assert.throws(() => parseCliArgs(args), (e) => e instanceof UsageError && pattern.test(e.message));
  usage([], /missing command/);
  usage(["deploy"], /unknown command "deploy"/);
  usage(["recover", "--master-secret", "m", "--disk-uuid", "nope", "--out", "k"], /invalid --disk-uuid/);
  usage(["recover", "--master-secret", "m", "--disk-uuid", REFERENCE_UUID], /--out FILE .* or --print-hex/);
  const recoverNode = ["recover", "--node", "10.0.0.1:9999", "--master-secret", "m"];
  usage(recoverNode, /missing --attestation-config/);
  usage(
    [...recoverNode, "--attestation-config", "a", "--disk-uuid", REFERENCE_UUID],
    /--node or --disk-uuid, not both/,
  );
  usage([...recoverNode, "--attestation-config", "a", "--print-hex"], /--node or --print-hex, not both/);
  usage(
    ["recover", "--master-secret", "m", "--attestation-config", "a", "--print-hex"],
    /--attestation-config needs --node/,
  );
  usage(["recover", "--master-secret", "m"], /missing --disk-uuid \(or --node\)/);
  usage(
    [
      "recover",
      "--master-secret",
      "m",
      "--disk-uuid",
      REFERENCE_UUID,
      "--disk-uuid",
      REFERENCE_UUID,
      "--out",
      "k",
    ],
    /^--disk-uuid is given twice \(cli recover\)$/,
  );
  usage(
    ["recover", "--master-secret", "m", "--disk-uuid", REFERENCE_UUID, "--out=a", "--out", "b"],
    /^--out is given twice/,
  );
  assert.deepEqual(parseCliArgs([...recoverNode, "--attestation-config", "a", "--timeout", "5"]), {
    command: "recover-node",
    recover: { nodes: ["10.0.0.1:9999"], masterSecret: "m", attestationConfig: "a", timeoutMs: 5000 },
  });
  // Every control plane in one command, in the order given.
  const twoNodes = [...recoverNode, "--node", "[fd00::2]:9999", "--attestation-config", "a"];
  assert.deepEqual(parseCliArgs(twoNodes), {
    command: "recover-node",
    recover: {
      nodes: ["10.0.0.1:9999", "[fd00::2]:9999"],
      masterSecret: "m",
      attestationConfig: "a",
      timeoutMs: 30_000,
    },
  });
  usage(
    [...recoverNode, "--node", "10.0.0.1:9999", "--attestation-config", "a"],
    /^--node 10.0.0.1:9999 is given twice$/,
  );
  usage([...recoverNode, "--node", "10.0.0.2", "--attestation-config", "a"], /invalid --node "10.0.0.2"/);
  usage(["verify", "--node", "10.0.0.1", "--attestation-config", "a"], /invalid --node/);
  usage(["verify", "--node", "10.0.0.1:9000", "--attestation-config", "a", "--output", "yaml"], /--output/);
  usage(["init", "--node", "10.0.0.1:9000"], /missing --attestation-config/);
  const init = [
    "init",
    "--node",
    "10.0.0.1:9000",
    "--attestation-config",
    "a",
    "--master-secret",
    "./m.json",
  ];
  const more = ["--init-secret-file", "s", "--kubernetes-version", "v1.30.2"];
  usage([...init, ...more, "--logs-out", "m.json"], /--logs-out must not be the file of --master-secret/);
  usage(
    [...init, ...more, "--logs-out", "constellation-admin.conf"],
    /--logs-out must not be the file of --kubeconfig-out/,
  );
  assert.equal(parseCliArgs(["init", "--help"]), "help");
  usage(
    [...init, "--init-secret-file", "s", "--kubernetes-version", "latest"],
    /^--kubernetes-version must be an exact version/,
  );
  usage([...init, ...more, "--cluster-name", "My_Cluster"], /^--cluster-name must be a DNS label/);
  // A timer longer than 2^31-1 ms fires at once: refused rather than an init that "times out" at once.
  usage(
    [...init, ...more, "--init-timeout", "99999999"],
    /^invalid --init-timeout "99999999": at most 2147483 seconds$/,
  );
  usage(
    ["verify", "--node", "10.0.0.1:9000", "--attestation-config", "a", "--timeout", "0.0001"],
    /at least 0.001 seconds/,
  );
});

Deno.test("command line: init's output files may be no other file of the command, also through a symlink", async (t) => {
  const dir = await Deno.realPath(await tempDir());
  try {
    // (`ln`: the tests' permission set cannot make symlinks with Deno.symlink.)
    const ln = async (target: string, link: string) =>
      assert.ok((await new Deno.Command("ln", { args: ["-s", target, link] }).output()).success);
    await Deno.mkdir(`${dir}/ops`);
    await ln(`${dir}/ops`, `${dir}/linked-ops`);
    await Deno.writeTextFile(`${dir}/ops/init-secret`, "init secret");
    await ln(`${dir}/ops/init-secret`, `${dir}/secret-link`);
    const init = (...more: string[]) => [
      ...["init", "--node", "10.0.0.1:9000", "--attestation-config", `${dir}/ops/config.json`],
      ...["--master-secret", `${dir}/ops/master-secret.json`, "--init-secret-file", `${dir}/ops/init-secret`],
      ...["--kubernetes-version", "v1.30.2", "--kubernetes-components", `${dir}/ops/components.json`],
      ...more,
    ];
    const rows: { name: string; args: string[]; want: RegExp }[] = [
      {
        name: "--logs-out names the attestation config",
        args: init("--logs-out", `${dir}/ops/config.json`),
        want: /^--logs-out must not be the file of --attestation-config \(both name .*\/ops\/config.json\)$/,
      },
      {
        name: "--logs-out names the init secret file",
        args: init("--logs-out", `${dir}/ops/init-secret`),
        want: /^--logs-out must not be the file of --init-secret-file/,
      },
      {
        name: "--logs-out names the components file",
        args: init("--logs-out", `${dir}/ops/components.json`),
        want: /^--logs-out must not be the file of --kubernetes-components/,
      },
      {
        name: "--logs-out names the init secret file through a symlinked directory",
        args: init("--logs-out", `${dir}/linked-ops/init-secret`),
        want: /^--logs-out must not be the file of --init-secret-file/,
      },
      {
        name: "--logs-out names the master secret file (not there yet) through a symlinked directory",
        args: init("--logs-out", `${dir}/linked-ops/master-secret.json`),
        want: /^--logs-out must not be the file of --master-secret/,
      },
      {
        name: "--logs-out names the kubeconfig through a relative path",
        args: init("--kubeconfig-out", `${dir}/ops/admin.conf`, "--logs-out", `${dir}/ops/../ops/admin.conf`),
        want: /^--logs-out must not be the file of --kubeconfig-out/,
      },
      {
        name: "--logs-out is a symlink to the init secret file",
        args: init("--logs-out", `${dir}/secret-link`),
        want: /^--logs-out must not be the file of --init-secret-file/,
      },
      {
        name: "--kubeconfig-out names the attestation config",
        args: init("--kubeconfig-out", `${dir}/ops/config.json`),
        want: /^--kubeconfig-out must not be the file of --attestation-config/,
      },
    ];
    for (const row of rows) {
      await t.step(row.name, () => {
        assert.throws(
          () => parseCliArgs(row.args),
          (e) => e instanceof UsageError && row.want.test(e.message),
        );
      });
    }
    await t.step("files of their own are taken", () => {
      const command = parseCliArgs(
        init("--kubeconfig-out", `${dir}/linked-ops/admin.conf`, "--logs-out", `${dir}/linked-ops/init.log`),
      );
      assert.ok(command !== "help" && command.command === "init");
      assert.equal(command.init.logsOut, `${dir}/linked-ops/init.log`);
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("command line: an empty --kubeconfig-out or --logs-out is refused, not replaced by the default", async (t) => {
  const init = [
    ...["init", "--node", "10.0.0.1:9000", "--attestation-config", "a", "--master-secret", "m.json"],
    ...["--init-secret-file", "s", "--kubernetes-version", "v1.30.2"],
  ];
  for (const flag of ["--kubeconfig-out", "--logs-out"]) {
    for (const [name, args] of [[`${flag}=`, [`${flag}=`]], [`${flag} ""`, [flag, ""]]] as const) {
      await t.step(name, () => {
        assert.throws(
          () => parseCliArgs([...init, ...args]),
          (e) => e instanceof UsageError && e.message === `${flag} must not be empty`,
        );
      });
    }
  }
});

const RESULT: VerifyResult = {
  node: "10.0.0.5:9000",
  variant: "qemu-vtpm",
  passed: false,
  reason: "measurement-mismatch",
  message: "measurements differ",
  pcrs: [
    { index: 4, expected: "aa".repeat(32), actual: "bb".repeat(32), enforced: true, match: false },
    { index: 8, expected: "cc".repeat(32), actual: "dd".repeat(32), enforced: false, match: false },
    { index: 9, expected: "ee".repeat(32), actual: "ee".repeat(32), enforced: true, match: true },
  ],
};

Deno.test("verify report: a table of every PCR, mismatches highlighted only with colour, and JSON", () => {
  const plain = renderVerifyTable(RESULT, false);
  assert.equal(
    plain,
    [
      "node 10.0.0.5:9000 (qemu-vtpm): attestation FAILED (measurement-mismatch)",
      `PCR  POLICY     MATCH     EXPECTED${" ".repeat(58)}ACTUAL`,
      `4    enforced   MISMATCH  ${"aa".repeat(32)}  ${"bb".repeat(32)}`,
      `8    warn-only  MISMATCH  ${"cc".repeat(32)}  ${"dd".repeat(32)}`,
      `9    enforced   ok        ${"ee".repeat(32)}  ${"ee".repeat(32)}`,
      "mismatching: PCR[4] (enforced), PCR[8] (warn-only)",
      "",
    ].join("\n"),
  );
  assert.ok(!plain.includes("\x1b["));
  const colored = renderVerifyTable(RESULT, true);
  assert.ok(colored.includes(`\x1b[31m4    enforced   MISMATCH`));
  assert.ok(colored.includes(`\x1b[33m8    warn-only`));
  assert.ok(!colored.includes("\x1b[31m9 "));
  assert.deepEqual(JSON.parse(renderVerifyJson(RESULT)), RESULT);
  const unknown = renderVerifyTable({
    ...RESULT,
    reason: "untrusted-key",
    message: "attestation key not trusted",
    pcrs: [{ index: 4, expected: "aa".repeat(32), actual: null, enforced: true, match: null }],
  }, false);
  assert.match(unknown, /^4 +enforced +unknown +a+ +-$/m);
  assert.match(unknown, /why: attestation key not trusted/);
  // A validator's message may quote what the node sent: no escape sequence reaches the terminal.
  const hostile = renderVerifyTable({
    ...RESULT,
    reason: "malformed",
    message: "document is not JSON: \x1b]0;PWNED\x07\x1b[31mRED\u009b2J",
    pcrs: [],
  }, false);
  assert.match(hostile, /why: document is not JSON: \\u001b\]0;PWNED\\u0007\\u001b\[31mRED\\u009b2J/);
  // deno-lint-ignore no-control-regex
  assert.ok(!/[\x00-\x09\x0b-\x1f\x7f-\x9f]/.test(hostile), hostile);
});

Deno.test("init's kubeconfig: where asked, else beside it, else a private temp directory, else an error naming the cluster", async (t) => {
  const kubeconfig = new TextEncoder().encode("apiVersion: v1\nkind: Config\n");
  const clusterId = bytes(0xa0);
  const dir = await tempDir();
  try {
    await t.step("where asked", async () => {
      const saved = await saveKubeconfig(`${dir}/admin.conf`, kubeconfig, clusterId);
      assert.deepEqual(saved, { path: `${dir}/admin.conf`, failures: [] });
      assert.deepEqual(await Deno.readFile(saved.path), kubeconfig);
      assert.equal((await Deno.stat(saved.path)).mode! & 0o777, 0o600);
    });
    await t.step("an existing file is kept: the copy goes beside it, named with the cluster ID", async () => {
      const saved = await saveKubeconfig(`${dir}/admin.conf`, kubeconfig, clusterId);
      assert.equal(saved.path, `${dir}/admin.conf.a0a1a2a3`);
      assert.match(saved.failures.join("\n"), /admin.conf already exists; it is never overwritten/);
      assert.deepEqual(await Deno.readFile(saved.path), kubeconfig);
    });
    await t.step("a directory that went away: a new private temp directory", async () => {
      const saved = await saveKubeconfig(`${dir}/gone/admin.conf`, kubeconfig, clusterId);
      assert.equal(saved.failures.length, 2);
      assert.match(saved.path, /\/cli-kubeconfig-[^/]+\/admin\.conf$/);
      assert.deepEqual(await Deno.readFile(saved.path), kubeconfig);
      assert.equal((await Deno.stat(saved.path)).mode! & 0o777, 0o600);
      await Deno.remove(saved.path.slice(0, saved.path.lastIndexOf("/")), { recursive: true });
    });
    await t.step("nowhere: the error says the cluster exists and why each place failed", async () => {
      await assert.rejects(
        saveKubeconfig(`${dir}/gone/admin.conf`, kubeconfig, clusterId, {
          makeTempDir: () => Promise.reject(new Error("no space left on device")),
        }),
        rejectsWith(
          "output",
          /^the cluster was initialized \(cluster ID a0a1.*\), but its admin kubeconfig could not be written anywhere \(.*gone\/admin.conf.*; .*; no space left on device\)/,
        ),
      );
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a failed init's node logs: saved 0600 and named, or a note that they were not, never the failure's replacement", async () => {
  const dir = await tempDir();
  try {
    const logs = new TextEncoder().encode("kubeadm init: preflight failed\n");
    assert.equal(await saveNodeLogs(`${dir}/init.log`, logs), `; the node's logs are in ${dir}/init.log`);
    assert.deepEqual(await Deno.readFile(`${dir}/init.log`), logs);
    assert.equal((await Deno.stat(`${dir}/init.log`)).mode! & 0o777, 0o600);
    assert.match(
      await saveNodeLogs(`${dir}/missing/init.log`, logs),
      /^; the node's logs were not saved: cannot write node logs .*missing\/init.log/,
    );
    // A symlink at the logs path is replaced, never followed to what it names.
    await Deno.writeTextFile(`${dir}/master-secret.json`, "{}");
    // (`ln`: the tests' permission set cannot make symlinks with Deno.symlink.)
    const ln = await new Deno.Command("ln", {
      args: ["-s", `${dir}/master-secret.json`, `${dir}/linked.log`],
    })
      .output();
    assert.ok(ln.success);
    assert.ok((await Deno.lstat(`${dir}/linked.log`)).isSymlink);
    await saveNodeLogs(`${dir}/linked.log`, logs);
    assert.equal(await Deno.readTextFile(`${dir}/master-secret.json`), "{}");
    assert.ok((await Deno.lstat(`${dir}/linked.log`)).isFile);
    assert.deepEqual(await Deno.readFile(`${dir}/linked.log`), logs);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name:
    "an init secret file the CLI may not read: said in the CLI's words, not Deno's flag, which no operator can add",
  // As under the cli permission set, which denies /proc.
  permissions: { read: false },
  fn: async () => {
    await assert.rejects(
      readInitSecret("/proc/self/environ"),
      rejectsWith(
        "input",
        /^cannot read init secret file \/proc\/self\/environ: outside the CLI's read permissions \(deno\.json permission set "cli"\) \(--init-secret-file\)$/,
      ),
    );
  },
});

Deno.test("a node call's error in the operator's words: a timeout is unreachable, Ctrl-C canceled", () => {
  const aborted = (reason: unknown) => {
    const controller = new AbortController();
    controller.abort(reason);
    return controller.signal;
  };
  const node = "10.0.0.5:9000";
  const late = describeNodeCallError(
    new Error("aborted"),
    node,
    AbortSignal.any([aborted(new DOMException("signal timed out", "TimeoutError"))]),
  );
  assert.equal(late.reason, "unreachable");
  assert.match(late.message, /^node 10.0.0.5:9000 did not answer within --timeout: check --node/);
  const interrupted = describeNodeCallError(new Error("aborted"), node, aborted(new Error("SIGINT")));
  assert.equal(interrupted.reason, "canceled");
  assert.equal(interrupted.message, "the call to node 10.0.0.5:9000 was canceled");
  // Another server on that port (HTTP 404, e.g. the init port given to cli recover): said so.
  const elsewhere = describeNodeCallError(
    new ConnectError("HTTP 404", Code.Unimplemented),
    node,
    undefined,
    RECOVERY_SERVER,
  );
  assert.equal(elsewhere.reason, "refused");
  assert.match(
    elsewhere.message,
    /refused: HTTP 404; this is not the recovery server: check --node \(its port is 9999 by default/,
  );
  assert.equal(wrongServerHint(Code.PermissionDenied, RECOVERY_SERVER), "", "a real refusal gets no hint");
});

Deno.test("command line: cli recover's two ways take only their own flags, and a whole disk UUID", async (t) => {
  const offline = ["recover", "--master-secret", "m"];
  const online = ["recover", "--node", "10.0.0.1:9999", "--master-secret", "m", "--attestation-config", "a"];
  const rows: { name: string; args: string[]; want: RegExp }[] = [
    {
      name: "a disk UUID with text after it",
      args: [...offline, "--disk-uuid", `${REFERENCE_UUID}0`, "--print-hex"],
      want: /^invalid --disk-uuid "0123abcd-0000-4000-8000-00000000cafe0"/,
    },
    {
      name: "a disk UUID with text before it",
      args: [...offline, "--disk-uuid", `x${REFERENCE_UUID}`, "--print-hex"],
      want: /^invalid --disk-uuid/,
    },
    {
      name: "a disk UUID followed by a newline",
      args: [...offline, "--disk-uuid", `${REFERENCE_UUID}\n`, "--print-hex"],
      want: /^invalid --disk-uuid/,
    },
    {
      name: "a disk UUID without its dashes",
      args: [...offline, "--disk-uuid", REFERENCE_UUID.replaceAll("-", ""), "--print-hex"],
      want: /^invalid --disk-uuid/,
    },
    {
      name: "--timeout without --node",
      args: [...offline, "--disk-uuid", REFERENCE_UUID, "--print-hex", "--timeout", "5"],
      want: /^--timeout needs --node$/,
    },
    { name: "--node with --out", args: [...online, "--out", "k"], want: /^give --node or --out, not both$/ },
    {
      name: "--out and --print-hex",
      args: [...offline, "--disk-uuid", REFERENCE_UUID, "--out", "k", "--print-hex"],
      want: /^give --out or --print-hex, not both$/,
    },
    {
      name: "an empty --out",
      args: [...offline, "--disk-uuid", REFERENCE_UUID, "--out", ""],
      want: /^missing --out$/,
    },
    {
      name: "an empty --node",
      args: ["recover", "--node", "", "--master-secret", "m"],
      want: /^missing --node$/,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.throws(() => parseCliArgs(row.args), (e) => e instanceof UsageError && row.want.test(e.message));
    });
  }
  await t.step("an upper-case disk UUID is taken as given (the key derivation lower-cases it)", () => {
    const upper = REFERENCE_UUID.toUpperCase();
    assert.deepEqual(parseCliArgs([...offline, "--disk-uuid", upper, "--out", "k"]), {
      command: "recover",
      recover: { masterSecret: "m", diskUuid: upper, output: { file: "k" } },
    });
  });
});
