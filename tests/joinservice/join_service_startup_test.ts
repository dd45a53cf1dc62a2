/**
 * The real join service process refusing to start on a bad input: it exits
 * 1 with one log line naming the problem, and never listens.
 */
import assert from "node:assert/strict";
import { runJoinServiceToExit, startJoinCluster } from "../support/join_cluster.ts";

/** Copies the directory tree `from` to `to`. */
async function copyDir(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for await (const entry of Deno.readDir(from)) {
    if (entry.isDirectory) await copyDir(`${from}/${entry.name}`, `${to}/${entry.name}`);
    else await Deno.copyFile(`${from}/${entry.name}`, `${to}/${entry.name}`);
  }
}

Deno.test("the join service process exits 1 with one clear line on a bad input, and never listens", async (t) => {
  await using cluster = await startJoinCluster();
  await cluster.joinService.stop();
  const { root, configDir, kubernetesDir } = cluster.paths;

  /** A copy of the config or Kubernetes directory (inside the readable root), changed by `change`. */
  const variantOf = async (dir: string, name: string, change: (copied: string) => Promise<void>) => {
    const copied = `${root}/${name}`;
    await copyDir(dir, copied);
    await change(copied);
    return copied;
  };
  const noConfig = await variantOf(
    configDir,
    "config-without-attestation",
    (dir) => Deno.remove(`${dir}/attestationConfig`),
  );
  const garbageKey = await variantOf(kubernetesDir, "kubernetes-garbage-key", (dir) =>
    Deno.writeTextFile(
      `${dir}/pki/ca.key`,
      `-----BEGIN EC PRIVATE KEY-----\n${btoa("this is not a key at all")}\n-----END EC PRIVATE KEY-----\n`,
    ));
  const noPemKey = await variantOf(
    kubernetesDir,
    "kubernetes-no-pem-key",
    (dir) => Deno.writeTextFile(`${dir}/pki/ca.key`, "not PEM at all\n"),
  );
  const noCaData = await variantOf(kubernetesDir, "kubernetes-admin-without-ca", async (dir) => {
    const adminConf = await Deno.readTextFile(`${dir}/admin.conf`);
    await Deno.writeTextFile(
      `${dir}/admin.conf`,
      adminConf.replace(/^\s*certificate-authority-data:.*\n/m, ""),
    );
  });

  const cases: [string, string[], RegExp][] = [
    [
      "missing attestationConfig",
      ["--config-dir", noConfig],
      /^cannot start: cannot read attestation config .*\/attestationConfig: /,
    ],
    [
      "garbage PEM in pki/ca.key",
      ["--kubernetes-dir", garbageKey],
      /^cannot start: .*\/pki\/ca\.key: malformed EC PRIVATE KEY$/,
    ],
    [
      "no PEM in pki/ca.key",
      ["--kubernetes-dir", noPemKey],
      /^cannot start: cluster CA unusable: no PEM data found in .*\/pki\/ca\.key$/,
    ],
    [
      "admin.conf without CA data",
      ["--kubernetes-dir", noCaData],
      /^cannot start: \S+\/admin\.conf: certificate-authority-data of cluster "fake" does not contain any valid/,
    ],
    [
      "unknown variant",
      ["--attestation-variant", "sev-snp-typo"],
      /^cannot start: unknown attestation variant "sev-snp-typo"; known: dummy, qemu-vtpm$/,
    ],
  ];
  const results = await Promise.all(
    cases.map(([, flags]) => runJoinServiceToExit(cluster.joinServiceArgs(flags))),
  );
  for (const [i, [name, , message]] of cases.entries()) {
    await t.step(name, () => {
      const { code, stderrLines, stdoutLines } = results[i];
      assert.equal(code, 1, stderrLines.join("\n"));
      assert.deepEqual(stdoutLines, []);
      assert.equal(stderrLines.length, 1, stderrLines.join("\n"));
      const line = JSON.parse(stderrLines[0]);
      assert.equal(line.level, "error");
      assert.equal(line.component, "join-service");
      assert.match(line.msg, message);
    });
  }
});
