/**
 * The real join service process refusing to start on a bad input: it exits
 * 1 with one log line naming the problem (2 and one usage line for a bad
 * command line), and never listens.
 */
import assert from "node:assert/strict";
import { WorkPool } from "../../src/limits/pool.ts";
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

  // Serving certificates and keys that TLS cannot use: the service must not start with them.
  const { tlsCert, pkiDir } = cluster.paths;
  const garbageCert = `${root}/garbage.crt`;
  await Deno.writeTextFile(garbageCert, "garbage\n");

  const cases: [string, string[], RegExp][] = [
    [
      "missing --tls-cert file",
      ["--tls-cert", `${root}/absent.crt`],
      /^cannot start: --tls-cert file \S+\/absent\.crt: does not exist$/,
    ],
    [
      "missing --tls-key file",
      ["--tls-key", `${root}/absent.key`],
      /^cannot start: --tls-key file \S+\/absent\.key: does not exist$/,
    ],
    [
      "garbage --tls-cert",
      ["--tls-cert", garbageCert],
      /^cannot start: --tls-cert file \S+\/garbage\.crt: no PEM CERTIFICATE block$/,
    ],
    [
      "the certificate given as --tls-key",
      ["--tls-key", tlsCert],
      /^cannot start: --tls-key file \S+\/join-service\.crt: no PEM private key block \(want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY\)$/,
    ],
    [
      "a --tls-key that is not the certificate's",
      ["--tls-key", `${pkiDir}/ca.key`],
      /^cannot start: --tls-key file \S+\/pki\/ca\.key is not the key of the certificate in --tls-cert file \S+\/join-service\.crt$/,
    ],
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
  // Bad command lines: status 2 and one line on stderr naming the flag and what is wrong.
  const usageCases: [string, string[], string][] = [
    [
      "--tls-cert without --tls-key",
      ["--tls-key="],
      "--tls-cert needs --tls-key (give both, or neither for a self-signed certificate)",
    ],
    [
      "--key-service-endpoint without a port",
      ["--key-service-endpoint", "key-service"],
      'invalid --key-service-endpoint "key-service": no port (want host:port, e.g. key-service.kube-system:9000)',
    ],
    ["--port -1", ["--port", "-1"], 'invalid --port "-1": want a number from 0 to 65535'],
    [
      "--verify-queue -1",
      ["--verify-queue", "-1"],
      'invalid --verify-queue "-1": want a positive number',
    ],
    [
      "--listen-address that is not an address",
      ["--listen-address", "nonsense"],
      'invalid --listen-address "nonsense": want an IP address, e.g. 0.0.0.0, 127.0.0.1 or ::',
    ],
    [
      "--metrics-address that is not an address",
      ["--metrics-address", "999.1.1.1"],
      'invalid --metrics-address "999.1.1.1": want an IP address, e.g. 0.0.0.0, 127.0.0.1 or ::',
    ],
  ];
  // A few processes at a time: each loads the whole service, and a crowd of them on two cores (with a cold
  // Deno cache, as in CI) can outlast runJoinServiceToExit's 20 s limit.
  const pool = new WorkPool({ concurrency: 4, maxQueued: cases.length + usageCases.length });
  const run = ([, flags]: [string, string[], unknown]) =>
    pool.run(() => runJoinServiceToExit(cluster.joinServiceArgs(flags)));
  const [results, usageResults] = await Promise.all([
    Promise.all(cases.map(run)),
    Promise.all(usageCases.map(run)),
  ]);
  for (const [i, [name, , message]] of usageCases.entries()) {
    await t.step(`usage error: ${name}`, () => {
      const { code, stderrLines, stdoutLines } = usageResults[i];
      assert.equal(code, 2, stderrLines.join("\n"));
      assert.deepEqual(stdoutLines, []);
      assert.deepEqual(stderrLines, [`join-service: ${message} (see --help)`]);
    });
  }
  await t.step(
    "started without the services' environment, it warns that Deno's roots are trusted",
    async () => {
      const { code, stderrLines } = await runJoinServiceToExit(cluster.joinServiceArgs(cases[0][1]), {});
      assert.equal(code, 1, stderrLines.join("\n"));
      assert.deepEqual(stderrLines.map((line) => JSON.parse(line).level), ["warn", "error"]);
      assert.match(
        JSON.parse(stderrLines[0]).msg,
        /^Deno's root certificates are trusted besides the API server's CA/,
      );
    },
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
