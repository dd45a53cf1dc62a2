/**
 * The real CLI as a process under its permission set (`-P=cli`) against a
 * real cluster of bootstrapper processes (tests/support/bootstrap_cluster.ts):
 * verify passes against the control plane and fails naming PCR 4 against a
 * tampered node; init with a wrong init secret is refused in plain words;
 * init with a malformed components file fails before any connection; init
 * succeeds, writes the node's admin.conf and the node installs the
 * components of `--kubernetes-components`; recover opens the node's disk; an
 * unreachable node ends at the deadline.
 */
import assert from "node:assert/strict";
import { readNodeState } from "../../src/bootstrapper/node_state.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { deriveClusterId, deriveMeasurementSecret } from "../../src/kms/keys.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";
import { INIT_SECRET, startBootstrapCluster } from "../support/bootstrap_cluster.ts";
import { diskOpensWith } from "../support/cryptsetup.ts";
import { componentHash, tarGz } from "../support/tar.ts";
import { type ProcessResult, runToExit } from "../../src/os/service_process.ts";

/** Runs `cli args` as `deno task cli` would. */
function cli(args: string[], timeoutMs = 60_000): Promise<ProcessResult> {
  return runToExit("deno", ["run", "-P=cli", "--no-prompt", "src/cli/main.ts", ...args], {
    cwd: REPO_ROOT,
    timeoutMs,
  });
}

const output = (result: ProcessResult) => [...result.stdoutLines, ...result.stderrLines].join("\n");

async function diskUuid(disk: string): Promise<string> {
  const result = await new Deno.Command("cryptsetup", { args: ["luksUUID", disk], clearEnv: true }).output();
  return new TextDecoder().decode(result.stdout).trim().toLowerCase();
}

Deno.test("cli processes against a bootstrapper cluster: verify, init, recover", async (t) => {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "cli-cluster-" }));
  const stack = new AsyncDisposableStack();
  try {
    const cluster = await startBootstrapCluster(dir, stack);
    const ops = `${dir}/operator`;
    await Deno.mkdir(ops);
    const config = `${ops}/attestation.json`;
    await Deno.writeTextFile(config, cluster.attestationConfigText);
    await Deno.writeTextFile(`${ops}/init-secret`, `${INIT_SECRET}\n`, { mode: 0o600 });
    await Deno.writeTextFile(`${ops}/wrong-secret`, "not the init secret", { mode: 0o600 });
    const masterSecret = `${ops}/constellation-mastersecret.json`;
    const kubeconfig = `${ops}/admin.conf`;
    // The components every node installs: a CNI archive and a single binary, as data: URLs.
    const cniArchive = await tarGz([
      { name: "bin/", type: "5", mode: 0o755 },
      { name: "bin/bridge", content: "#!/bin/sh\necho bridge\n", mode: 0o755 },
    ]);
    const crictl = new TextEncoder().encode("#!/bin/sh\necho crictl\n");
    const components = `${ops}/components.json`;
    await Deno.writeTextFile(
      components,
      JSON.stringify([
        {
          url: `data:application/gzip;base64,${cniArchive.toBase64()}`,
          hash: await componentHash(cniArchive),
          installPath: "/opt/cni",
          extract: true,
        },
        {
          url: `data:application/octet-stream;base64,${crictl.toBase64()}`,
          hash: await componentHash(crictl),
          installPath: "/run/state/bin/crictl",
          extract: false,
        },
      ]),
    );
    const cp = await cluster.controlPlane.start(["--init-api-server", cluster.apiServer.url]);
    const node = `127.0.0.1:${cp.port}`;
    const initArgs = (secretFile: string) => [
      "init",
      ...["--node", node, "--attestation-config", config, "--master-secret", masterSecret],
      ...["--init-secret-file", secretFile, "--kubernetes-version", "v1.30.2"],
      ...["--kubernetes-components", components],
      ...["--kubeconfig-out", kubeconfig, "--logs-out", `${ops}/init.log`, "--timeout", "20"],
    ];

    await t.step("verify passes against the control plane: every configured PCR matches", async () => {
      const table = await cli(["verify", "--node", node, "--attestation-config", config]);
      assert.equal(table.code, 0, output(table));
      assert.match(table.stdoutLines[0], /attestation OK/);
      for (const pcr of [4, 9, 15]) {
        assert.ok(table.stdoutLines.some((l) => new RegExp(`^${pcr} +enforced +ok `).test(l)), output(table));
      }
      const json = await cli(["verify", "--node", node, "--attestation-config", config, "--output", "json"]);
      assert.equal(json.code, 0, output(json));
      const result = JSON.parse(json.stdoutLines.join("\n"));
      assert.equal(result.passed, true);
      assert.deepEqual(result.pcrs.map((r: { index: number; match: boolean }) => [r.index, r.match]), [
        [4, true],
        [9, true],
        [15, true],
      ]);
    });

    await t.step("a node with a tampered PCR 4: verify exits non-zero naming PCR[4]", async () => {
      const tampered = await cluster.addNode("tampered", "Worker", { tamperPcr4: true });
      const process = await tampered.start();
      const result = await cli([
        "verify",
        "--node",
        `127.0.0.1:${process.port}`,
        "--attestation-config",
        config,
      ]);
      assert.equal(result.code, 1, output(result));
      assert.match(result.stdoutLines[0], /attestation FAILED \(measurement-mismatch\)/);
      assert.match(output(result), /^4 +enforced +MISMATCH /m);
      assert.match(output(result), /^9 +enforced +ok /m);
      assert.match(output(result), /mismatching: PCR\[4\] \(enforced\)/);
      await process.stop("SIGKILL");
    });

    await t.step(
      "init with a wrong init secret is refused in plain words; the node keeps serving",
      async () => {
        const result = await cli(initArgs(`${ops}/wrong-secret`));
        assert.equal(result.code, 1, output(result));
        // The first init of this test made the master secret file: said on a line of its own.
        assert.match(
          result.stdoutLines.join("\n"),
          /^created the master secret file .* \(mode 0600\): back it up$/m,
        );
        assert.match(
          result.stderrLines.at(-1)!,
          /^cli: the node refused the init secret from .*wrong-secret/,
        );
        assert.equal(result.stderrLines.filter((l) => /^\s+at /.test(l)).length, 0, "no stack trace");
        await assert.rejects(Deno.stat(kubeconfig));
        assert.equal((await cluster.controlPlane.pcr15()).toHex(), "00".repeat(32));
      },
    );

    await t.step(
      "init with a malformed components file fails naming element and field, before any connection",
      async () => {
        const bad = `${ops}/bad-components.json`;
        await Deno.writeTextFile(
          bad,
          JSON.stringify([{
            url: "https://example.com/x",
            hash: "md5:0",
            installPath: "/opt/x",
            extract: false,
          }]),
        );
        // A listener standing in for the node: the CLI must not connect to it.
        const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
        let connections = 0;
        const accepting = (async () => {
          for await (const connection of listener) {
            connections++;
            connection.close();
          }
        })();
        const args = initArgs(`${ops}/init-secret`).map((a) =>
          a === node ? `127.0.0.1:${(listener.addr as Deno.NetAddr).port}` : a === components ? bad : a
        );
        args[args.indexOf("--master-secret") + 1] = `${ops}/unused-mastersecret.json`;
        const result = await cli(args);
        listener.close();
        await accepting;
        assert.equal(result.code, 1, output(result));
        assert.equal(
          result.stderrLines.at(-1),
          `cli: kubernetes components file ${bad}: element 0: "hash" must be sha256:<64 lower-case hex digits>, got "md5:0" (--kubernetes-components)`,
        );
        assert.equal(result.stderrLines.filter((l) => /^\s+at /.test(l)).length, 0, "no stack trace");
        assert.equal(connections, 0, "no connection to the node");
        await assert.rejects(Deno.stat(`${ops}/unused-mastersecret.json`), "no master secret created");
      },
    );

    let clusterId = "";
    await t.step(
      "init succeeds: the kubeconfig is the node's admin.conf, the cluster ID is printed, components installed",
      async () => {
        const result = await cli(initArgs(`${ops}/init-secret`));
        assert.equal(result.code, 0, output(result));
        assert.deepEqual(await Deno.readFile(kubeconfig), await Deno.readFile(cluster.cpPaths.adminConf));
        const root = cluster.controlPlane.root;
        assert.equal(await Deno.readTextFile(`${root}/opt/cni/bin/bridge`), "#!/bin/sh\necho bridge\n");
        assert.deepEqual(await Deno.readFile(`${root}/run/state/bin/crictl`), crictl);
        assert.equal((await Deno.stat(kubeconfig)).mode! & 0o777, 0o600);
        assert.equal((await Deno.stat(masterSecret)).mode! & 0o777, 0o600);
        clusterId = /^cluster ID: ([0-9a-f]{64})$/m.exec(output(result))?.[1] ?? "";
        const secret = JSON.parse(await Deno.readTextFile(masterSecret));
        const kms = new ClusterKms(Uint8Array.fromBase64(secret.key), Uint8Array.fromBase64(secret.salt));
        const { measurementSalt } = await readNodeState(cluster.cpPaths.nodeState);
        assert.equal(
          clusterId,
          (await deriveClusterId(await deriveMeasurementSecret(kms), measurementSalt)).toHex(),
        );
        assert.ok(!output(result).includes(secret.key), "the master secret is in no output");
        assert.ok(!output(result).includes(INIT_SECRET), "the init secret is in no output");
      },
    );

    await t.step("recover: the key it writes opens the node's state disk", async () => {
      const uuid = await diskUuid(cluster.controlPlane.disk);
      const result = await cli([
        "recover",
        ...["--master-secret", masterSecret, "--disk-uuid", uuid, "--out", `${ops}/disk.key`],
      ]);
      assert.equal(result.code, 0, output(result));
      assert.ok(await diskOpensWith(cluster.controlPlane.disk, await Deno.readFile(`${ops}/disk.key`)));
    });

    await t.step(
      "recover --node: the only control plane reboots, no join service can rejoin it; the operator's master secret brings it back",
      async () => {
        const node0 = cluster.controlPlane;
        await node0.reboot();
        const keyFile = cluster.cpPaths.initialPassphrase;
        await assert.rejects(Deno.stat(keyFile), Deno.errors.NotFound, "a reboot empties /run");
        const rejoin = await node0.startRejoin(["--join-retry-interval", "1"]);
        const recovery = `127.0.0.1:${rejoin.port}`;
        const recoverArgs = (secretFile: string) => [
          "recover",
          ...["--node", recovery, "--master-secret", secretFile, "--attestation-config", config],
        ];

        const otherSecret = `${ops}/other-mastersecret.json`;
        await Deno.writeTextFile(otherSecret, JSON.stringify({ key: "A".repeat(44), salt: "B".repeat(44) }));
        const wrong = await cli(recoverArgs(otherSecret));
        assert.equal(wrong.code, 1, output(wrong));
        assert.match(wrong.stderrLines.at(-1)!, /refused the recovery: the master secret does not open/);
        assert.equal((await node0.pcr15()).toHex(), "00".repeat(32), "nothing bound");

        // Two nodes, the first one down: the second is recovered all the same, and the exit says what failed.
        const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
        const down = `127.0.0.1:${(listener.addr as Deno.NetAddr).port}`;
        listener.close();
        const both = recoverArgs(masterSecret);
        both.splice(1, 0, "--node", down);
        const result = await cli([...both, "--timeout", "5"]);
        assert.equal(result.code, 1, output(result));
        assert.match(output(result), new RegExp(`^recovered node ${recovery}: its state disk`, "m"));
        assert.match(output(result), new RegExp(`^cluster ID: ${clusterId}$`, "m"));
        assert.match(
          result.stderrLines.at(-1)!,
          new RegExp(`^cli: recovered 1 of 2 nodes; node ${down} is unreachable`),
        );
        const status = await rejoin.status;
        assert.equal(status.code, 0, rejoin.stderrLines.slice(-5).join("\n"));
        assert.ok(
          rejoin.stderrLines.some((l) => l.includes('"source":"recovery"')),
          "rebound by the recovery",
        );
        assert.ok(
          await diskOpensWith(node0.disk, await Deno.readFile(keyFile)),
          "the key file opens the disk",
        );
        assert.equal((await Deno.stat(keyFile)).mode! & 0o777, 0o400);
        const secret = JSON.parse(await Deno.readTextFile(masterSecret));
        assert.ok(!output(result).includes(secret.key), "the master secret is in no output");
        assert.ok(!rejoin.stderrLines.some((l) => l.includes(secret.key)), "nor in the node's log");
        // The normal start then sees a bound node: it starts the kubelet.
        const start = await node0.run();
        assert.equal(start.code, 0, start.stderrLines.slice(-5).join("\n"));
        assert.match(start.stderrLines.join("\n"), /bound to a cluster/);
      },
    );

    await t.step("an unreachable node: init retries until --timeout, then names the node", async () => {
      const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
      const closed = (listener.addr as Deno.NetAddr).port;
      listener.close();
      const args = initArgs(`${ops}/init-secret`).map((a) => a === node ? `127.0.0.1:${closed}` : a);
      args[args.indexOf("--kubeconfig-out") + 1] = `${ops}/other.conf`;
      args[args.indexOf("--timeout") + 1] = "3";
      const result = await cli(args);
      assert.equal(result.code, 1, output(result));
      assert.match(
        result.stderrLines.at(-1)!,
        /^cli: node 127\.0\.0\.1:\d+ did not answer within --timeout 3 s/,
      );
      assert.ok(result.stderrLines.some((l) => /waiting for node .* \(attempt 1/.test(l)), output(result));
    });
  } finally {
    await stack.disposeAsync();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
