/**
 * The bootstrapper as real processes under their permission set: swtpm per
 * node, file-backed LUKS2 state disks with real cryptsetup, the metadata API
 * served by the test, the recording kubeadm, the fake API server serving the
 * PKI kubeadm wrote, and the real key and join services started from the
 * objects the init created.
 */
import assert from "node:assert/strict";
import { initCluster } from "../../src/init/client.ts";
import { DEFAULT_INIT_TIMEOUT_MS, INIT_CALL_TIMEOUT_MS } from "../../src/bootstrapper/initserver.ts";
import { INIT_DEFAULTS } from "../../src/cli/flags.ts";
import { NodeExchangeError } from "../../src/init/node_exchange.ts";
import { deriveClusterId, deriveMeasurementSecret, deriveStateDiskKey } from "../../src/kms/keys.ts";
import { injectFailures } from "../../src/kubeadmsim/inject.ts";
import { readRecords } from "../../src/kubeadmsim/record.ts";
import { SimRoot } from "../../src/kubeadmsim/root.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import { readNodeState } from "../../src/bootstrapper/node_state.ts";
import { nodePaths } from "../../src/bootstrapper/node_paths.ts";
import { CONTROL_PLANE_FILE_NAMES } from "../../src/joinservice/controlplanefiles.ts";
import { INIT_SECRET, startBootstrapCluster } from "../support/bootstrap_cluster.ts";
import type { BootstrapNode } from "../support/bootstrap_node.ts";
import { diskOpensWith } from "../support/cryptsetup.ts";
import { sha256 } from "../support/digest.ts";
import type { RunningService } from "../../src/os/service_process.ts";
import { componentHash, tarGz } from "../support/tar.ts";

/** SHA256(old ‖ SHA256(data)): what TPM2_PCR_Event does to a SHA-256 PCR. */
async function extended(old: Uint8Array, data: Uint8Array): Promise<string> {
  return (await sha256(old, await sha256(data))).toHex();
}

/** A component as a `data:` URL (the installer takes those as it takes https). */
async function dataComponent(bytes: Uint8Array, installPath: string, extract: boolean) {
  return {
    url: `data:application/octet-stream;base64,${bytes.toBase64()}`,
    hash: await componentHash(bytes),
    installPath,
    extract,
  };
}

/** Lines of a process's stderr that hold `text`. */
function linesWith(process: { stderrLines: readonly string[] }, text: string | RegExp): string[] {
  return process.stderrLines.filter((line) =>
    typeof text === "string" ? line.includes(text) : text.test(line)
  );
}

Deno.test("bootstrapper processes: init, joins, failures and rejoin on one cluster", async (t) => {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "bootstrap-cluster-" }));
  const stack = new AsyncDisposableStack();
  try {
    const cluster = await startBootstrapCluster(dir, stack);
    const { controlPlane, cpPaths, validator, controlPlanes, kms, measurementSalt } = cluster;
    // The Kubernetes components every node installs: a CNI plugin archive and a single binary.
    const cniArchive = await tarGz([
      { name: "bin/", type: "5", mode: 0o755 },
      { name: "bin/bridge", content: "#!/bin/sh\necho bridge\n", mode: 0o755 },
    ]);
    const components = [
      await dataComponent(cniArchive, "/opt/cni", true),
      await dataComponent(
        new TextEncoder().encode("#!/bin/sh\necho crictl\n"),
        "/run/state/bin/crictl",
        false,
      ),
    ];
    const initRequest = (secret?: string) => cluster.initRequest(secret, components);
    const assertComponentsInstalled = async (root: string) => {
      assert.equal(await Deno.readTextFile(`${root}/opt/cni/bin/bridge`), "#!/bin/sh\necho bridge\n");
      assert.equal(await Deno.readTextFile(`${root}/run/state/bin/crictl`), "#!/bin/sh\necho crictl\n");
    };

    // Init creates the cluster objects through the fake API server (on a node: its own, at 127.0.0.1:6443).
    const cpProcess = await controlPlane.start(["--init-api-server", cluster.apiServer.url]);
    using cpConnection = connectRpc({
      baseUrl: `https://127.0.0.1:${cpProcess.port}`,
      skipServerVerification: true,
    });

    await t.step(
      "the init server lets an Init run past the RPC layer's 30 s: kubeadm init takes minutes",
      async () => {
        const line = await cpProcess.waitForLine(/"msg":"listening"/);
        const { callTimeoutSeconds } = JSON.parse(line);
        // The node's own deadline for the work past the lock, plus time to answer; below the CLI's default wait.
        assert.equal(callTimeoutSeconds * 1000, INIT_CALL_TIMEOUT_MS);
        assert.ok(
          INIT_CALL_TIMEOUT_MS > DEFAULT_INIT_TIMEOUT_MS,
          "the deadline's failure still reaches the CLI",
        );
        assert.ok(INIT_CALL_TIMEOUT_MS < INIT_DEFAULTS.initTimeoutSeconds * 1000, "the CLI waits longer");
      },
    );

    await t.step("a wrong init secret is refused; no lock is taken and the node keeps serving", async () => {
      await assert.rejects(
        initCluster(initRequest("not the init secret"), {
          transport: cpConnection.transport,
          validator,
          controlPlanes,
        }),
        (err) => {
          assert.ok(err instanceof NodeExchangeError, String(err));
          assert.match(err.message, /init secret/);
          return true;
        },
      );
      assert.equal((await controlPlane.pcr15()).toHex(), "00".repeat(32));
    });

    let clusterId: Uint8Array;
    await t.step(
      "init: the opened kubeconfig is kubeadm's admin.conf; PCR 15, disk and node state are bound",
      async () => {
        const logs: Uint8Array[] = [];
        const result = await initCluster(initRequest(INIT_SECRET), {
          transport: cpConnection.transport,
          validator,
          controlPlanes,
          onLog: (chunk) => logs.push(chunk),
        });
        clusterId = result.clusterId;
        assert.deepEqual(result.kubeconfig, await Deno.readFile(cpPaths.adminConf));
        const measurementSecret = await deriveMeasurementSecret(kms);
        assert.equal(
          result.clusterId.toHex(),
          (await deriveClusterId(measurementSecret, measurementSalt)).toHex(),
        );
        assert.equal(
          (await controlPlane.pcr15()).toHex(),
          await extended(new Uint8Array(32), result.clusterId),
        );
        const uuid = await diskUuid(controlPlane.disk);
        assert.ok(
          await diskOpensWith(controlPlane.disk, await deriveStateDiskKey(kms, uuid)),
          "the disk key opens the disk",
        );
        assert.ok(
          !await diskOpensWith(controlPlane.disk, await Deno.readFile(cpPaths.initialPassphrase)),
          "the first-boot passphrase no longer does",
        );
        await assertComponentsInstalled(controlPlane.root);
        const state = await readNodeState(cpPaths.nodeState);
        assert.equal(state.role, "ControlPlane");
        assert.deepEqual(state.measurementSalt, measurementSalt);
        const [preflight] = await readRecords(new SimRoot(controlPlane.root));
        assert.equal(preflight.exitCode, 0);
        // The process is done once Init is: exit 0, nothing listens any more.
        assert.equal((await exited(cpProcess)).code, 0);
        assert.match(cpProcess.stderrLines.at(-1)!, /init done; bootstrapper done/);
        assert.equal(linesWith(cpProcess, INIT_SECRET).length, 0, "the init secret is in no log line");
      },
    );

    const joinFlags = await cluster.prepareServices();
    const addNode = cluster.addNode;

    let worker: BootstrapNode;
    let workerInitPort = 0;
    await t.step(
      "a worker finds the join service down, keeps retrying, then joins; kubeadm join fails twice first",
      async () => {
        worker = await addNode("worker-1", "Worker");
        await injectFailures(new SimRoot(worker.root), {
          join: { count: 2, message: "injected: etcd not ready" },
        });
        const process = await worker.start(joinFlags);
        workerInitPort = process.port;
        await process.waitForLine(/join service refused or unreachable/, 20_000);
        const joinService = await cluster.startJoinService();
        assert.equal((await exited(process)).code, 0, process.stderrLines.slice(-5).join("\n"));
        const paths = nodePaths(worker.root);
        const state = await readNodeState(paths.nodeState);
        assert.equal(state.role, "Worker");
        assert.deepEqual(state.measurementSalt, measurementSalt);
        assert.equal((await worker.pcr15()).toHex(), await extended(new Uint8Array(32), clusterId));
        const uuid = await diskUuid(worker.disk);
        assert.ok(await diskOpensWith(worker.disk, await deriveStateDiskKey(kms, uuid)));
        assert.match(await Deno.readTextFile(paths.kubeletCert), /BEGIN CERTIFICATE/);
        assert.equal((await Deno.stat(paths.kubeletKey)).mode! & 0o777, 0o600);
        const joins = (await readRecords(new SimRoot(worker.root))).filter((r) => r.command === "join");
        assert.deepEqual(joins.map((r) => r.exitCode), [1, 1, 0], "kubeadm join: two failures, then success");
        assert.deepEqual(await worker.systemctlCalls(), ["start kubelet.service"]);
        const token = /"token":"([a-z0-9]{6}\.[a-z0-9]{16})"/;
        assert.equal(linesWith(process, token).length, 0, "no bootstrap token in the log");
        assert.ok(linesWith(joinService, '"outcome":"issued"').length >= 1);
      },
    );

    await t.step("Init on a node whose join took the lock: its init server stopped listening", async () => {
      using connection = connectRpc({
        baseUrl: `https://127.0.0.1:${workerInitPort}`,
        skipServerVerification: true,
      });
      await assert.rejects(
        initCluster(initRequest(INIT_SECRET), { transport: connection.transport, validator, controlPlanes }),
        (err) => err instanceof NodeExchangeError && err.reason === "unavailable",
      );
    });

    await t.step("a control plane joins: the ticket's control-plane files are in its PKI", async () => {
      const node = await addNode("control-plane-1", "ControlPlane");
      const process = await node.start(joinFlags);
      assert.equal((await exited(process)).code, 0, process.stderrLines.slice(-5).join("\n"));
      const paths = nodePaths(node.root);
      for (const name of CONTROL_PLANE_FILE_NAMES) {
        assert.deepEqual(
          await Deno.readFile(`${paths.pkiDir}/${name}`),
          await Deno.readFile(`${cpPaths.pkiDir}/${name}`),
        );
      }
      assert.equal((await readNodeState(paths.nodeState)).role, "ControlPlane");
      // Its join service does not run here: later nodes must not try it.
      cluster.metadata.removeInstance("control-plane-1");
    });

    await t.step("measurements that differ: the node keeps retrying and its log names the PCR", async () => {
      const node = await addNode("worker-tampered", "Worker", { tamperPcr4: true });
      const process = await node.start(joinFlags);
      const deadline = Date.now() + 20_000;
      while (linesWith(process, /PCR\[4\]/).length < 2 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.ok(linesWith(process, /PCR\[4\]/).length >= 2, "refused, named, and retried");
      assert.equal((await node.pcr15()).toHex(), "00".repeat(32), "not bound");
      assert.equal((await process.stop()).code, 0, "stopped cleanly before any lock");
    });

    await t.step("an unusable TPM or state disk stops the start: exit 1, the problem named", async (t) => {
      const node = await addNode("worker-unusable", "Worker");
      const missingDisk = ["--state-disk", `${dir}/no-such-disk.img`];
      // Nothing listens on port 1: the TPM's tools cannot connect.
      const unreachableTpm = ["--tpm", "swtpm:host=127.0.0.1,port=1"];
      const rows = [
        {
          name: "no state disk",
          flags: missingDisk,
          want: /cannot start: .*no-such-disk\.img: does not exist/,
        },
        { name: "an unreachable TPM", flags: unreachableTpm, want: /cannot start: .*tpm2_pcrread/ },
        {
          name: "both: the TPM's problem is the one named",
          flags: [...unreachableTpm, ...missingDisk],
          want: /cannot start: .*tpm2_pcrread/,
        },
      ];
      for (const [i, row] of rows.entries()) {
        await t.step(row.name, async () => {
          // Its own temporary directory: the TPM issuer's key contexts (made before the disk is checked) must
          // not outlive the process.
          const tmp = `${dir}/tmp-unusable-${i}`;
          await Deno.mkdir(tmp);
          const result = await node.run([...joinFlags, ...row.flags], { TMPDIR: tmp });
          assert.equal(result.code, 1, result.stderrLines.slice(-3).join("\n"));
          assert.match(result.stderrLines.at(-1)!, row.want);
          assert.equal(linesWith(result, /cannot start/).length, 1, "one problem named");
          assert.deepEqual(await Array.fromAsync(Deno.readDir(tmp)), [], "nothing left in its TMPDIR");
        });
      }
      assert.equal((await node.pcr15()).toHex(), "00".repeat(32), "not bound");
    });

    await t.step(
      "kubeadm join failing three times is terminal: exit 1, said last, no secret file left, and so on restart",
      async () => {
        const node = await addNode("worker-2", "Worker");
        await injectFailures(new SimRoot(node.root), {
          join: { count: 3, message: "injected: kubelet crashed" },
        });
        const process = await node.start(joinFlags);
        assert.equal((await exited(process)).code, 1);
        assert.match(process.stderrLines.at(-1)!, /join failed after the node lock: .*kubeadm join failed 3/);
        const paths = nodePaths(node.root);
        for (const file of [paths.kubeletKey, paths.kubeletCert, paths.nodeState]) {
          await assert.rejects(Deno.stat(file), Deno.errors.NotFound, `${file} removed`);
        }
        // Restarted as systemd's Restart=on-failure does: PCR 15 is set, but the node is not set up.
        const restart = await node.run(joinFlags);
        assert.equal(restart.code, 1, restart.stderrLines.slice(-3).join("\n"));
        assert.match(
          restart.stderrLines.at(-1)!,
          /node is bound to a cluster but not set up: .*wipe the node/,
        );
        assert.deepEqual(await node.systemctlCalls(), [], "no kubelet started");
      },
    );

    await t.step("components that fail their checks are never installed; the join is terminal", async (t) => {
      const traversal = await tarGz([{ name: "../../../etc/cron.d/evil", content: "* * * * * root sh" }]);
      const rows = [
        {
          name: "a wrong sha256 hash",
          component: {
            ...await dataComponent(cniArchive, "/opt/cni", true),
            hash: `sha256:${"0".repeat(64)}`,
          },
          want: /hash|sha256/i,
        },
        {
          name: "an archive with ../ entries",
          component: await dataComponent(traversal, "/opt/cni", true),
          want: /\.\./,
        },
      ];
      for (const [i, row] of rows.entries()) {
        await t.step(row.name, async () => {
          await cluster.setComponents([row.component]);
          const node = await addNode(`worker-components-${i}`, "Worker");
          const process = await node.start(joinFlags);
          assert.equal((await exited(process)).code, 1);
          assert.match(process.stderrLines.at(-1)!, /join failed after the node lock/);
          assert.match(process.stderrLines.join("\n"), row.want);
          await assert.rejects(Deno.stat(`${node.root}/opt/cni`), Deno.errors.NotFound, "nothing installed");
          await assert.rejects(Deno.stat(`${dir}/worker-components-${i}/etc`), Deno.errors.NotFound);
          const left = await Array.fromAsync(Deno.readDir(`${node.root}/tmp`)).catch(() => []);
          assert.deepEqual(left.map((entry) => entry.name), [], "no temp file left");
        });
      }
      await cluster.setComponents(components);
    });

    await t.step(
      "rejoin after a reboot: the disk's key file is back, PCR 15 is bound again",
      async () => {
        await worker.reboot();
        assert.equal((await worker.pcr15()).toHex(), "00".repeat(32), "a reboot resets PCR 15");
        const keyFile = nodePaths(worker.root).initialPassphrase;
        await assert.rejects(Deno.stat(keyFile), Deno.errors.NotFound, "a reboot empties /run");
        const rejoin = await worker.run(["rejoin", ...joinFlags]);
        assert.equal(rejoin.code, 0, rejoin.stderrLines.slice(-5).join("\n"));
        assert.match(rejoin.stderrLines.join("\n"), /rejoined/);
        // The key the image's systemd-cryptsetup maps the state disk with: the cluster's, and it opens it.
        const key = await Deno.readFile(keyFile);
        assert.ok(await diskOpensWith(worker.disk, key));
        assert.equal((await worker.pcr15()).toHex(), await extended(new Uint8Array(32), clusterId));
        // The normal start then sees a bound node: it starts the kubelet and serves nothing.
        const start = await worker.run(joinFlags);
        assert.equal(start.code, 0, start.stderrLines.slice(-5).join("\n"));
        assert.match(start.stderrLines.join("\n"), /bound to a cluster/);
        assert.deepEqual(await worker.systemctlCalls(), ["start kubelet.service", "start kubelet.service"]);
      },
    );
  } finally {
    await stack.disposeAsync();
    await Deno.remove(dir, { recursive: true });
  }
});

/** The process's exit status; kills it (and fails) if it has not exited within `timeoutMs`. */
async function exited(process: RunningService, timeoutMs = 60_000): Promise<Deno.CommandStatus> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"late">((resolve) => timer = setTimeout(() => resolve("late"), timeoutMs));
  const status = await Promise.race([process.status, late]);
  clearTimeout(timer);
  if (status !== "late") return status;
  await process.stop("SIGKILL");
  throw new Error(
    `the bootstrapper did not exit within ${timeoutMs} ms; its last lines:\n${
      process.stderrLines.slice(-8).join("\n")
    }`,
  );
}

/** The LUKS UUID of `disk`, lower-case. */
async function diskUuid(disk: string): Promise<string> {
  const output = await new Deno.Command("cryptsetup", { args: ["luksUUID", disk], clearEnv: true }).output();
  return new TextDecoder().decode(output.stdout).trim().toLowerCase();
}
