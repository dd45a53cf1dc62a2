/**
 * End to end on a local cluster (`src/localcluster/`) of 2 control planes and
 * 3 workers, every node on its own swtpm, LUKS2 state disk and network
 * namespace: what the ticket flow created, and the attacks and faults a
 * cluster must survive (a node with other measurements, a worker asking to
 * be a control plane, a dummy node, the join service killed while nodes
 * join, a rebooted worker, a rebooted control plane), and the whole cluster powered off and recovered
 * (`recoverLocalCluster`: the control planes through the real `cli recover`).
 */
import assert from "node:assert/strict";
import { nodePaths } from "../../src/bootstrapper/node_paths.ts";
import { BOOTSTRAP_TOKEN_TTL_MS } from "../../src/joinservice/bootstraptoken.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { deriveStateDiskKey } from "../../src/kms/keys.ts";
import { type LocalCluster, recoverLocalCluster, startLocalCluster } from "../../src/localcluster/cluster.ts";
import { runToExit } from "../../src/os/service_process.ts";
import { REPO_ROOT } from "../../src/localcluster/node.ts";
import { diskOpensWith } from "../support/cryptsetup.ts";
import { sha256 } from "../support/digest.ts";
import { printLogTails } from "../support/fresh_local_cluster.ts";

/** SHA256(old ‖ SHA256(data)): what TPM2_PCR_Event does to a SHA-256 PCR. */
async function extended(old: Uint8Array, data: Uint8Array): Promise<string> {
  return (await sha256(old, await sha256(data))).toHex();
}

/** `kubectl get <what> -n kube-system -o json` with the cluster's admin kubeconfig. */
async function kubectlJson(cluster: LocalCluster, what: string): Promise<{ items: KubeObject[] }> {
  const result = await kubectl(cluster, ["get", what, "-n", "kube-system", "-o", "json"]);
  return JSON.parse(result);
}

async function kubectl(cluster: LocalCluster, args: string[]): Promise<string> {
  const result = await runToExit("kubectl", ["--kubeconfig", cluster.paths.adminConf, ...args]);
  assert.equal(result.code, 0, `kubectl ${args.join(" ")}: ${result.stderrLines.join("\n")}`);
  return result.stdoutLines.join("\n");
}

interface KubeObject {
  metadata: { name: string };
  type?: string;
  data?: Record<string, string>;
}

/** The bootstrap-token Secrets (token ID → expiration). */
async function bootstrapTokens(cluster: LocalCluster): Promise<Map<string, string>> {
  const secrets = await kubectlJson(cluster, "secrets");
  return new Map(
    secrets.items
      .filter((secret) => secret.type === "bootstrap.kubernetes.io/token")
      .map((secret) => [atob(secret.data!["token-id"]), atob(secret.data!.expiration)]),
  );
}

async function diskUuid(disk: string): Promise<string> {
  const result = await runToExit("cryptsetup", ["luksUUID", disk]);
  return result.stdoutLines.join("").trim().toLowerCase();
}

Deno.test("e2e: a 2+3 node cluster on swtpm; attacks and faults are refused or survived", async (t) => {
  const stateDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "e2e-cluster-" }));
  const started = Date.now();
  const cluster = await startLocalCluster({ stateDir, controlPlanes: 2, workers: 3, network: "netns" })
    .catch(async (error) => {
      await printLogTails(`${stateDir}/logs`);
      throw error;
    });
  // The cluster running now (the recovery step replaces it).
  let running = cluster;
  // A failed step leaves the test running; its logs are printed at the end, before the state directory goes.
  let failed = false;
  const step = async (name: string, fn: (t: Deno.TestContext) => void | Promise<void>) => {
    if (!(await t.step(name, fn))) failed = true;
  };
  try {
    console.log(`cluster up (2 control planes + 3 workers, netns): ${(Date.now() - started) / 1000} s`);
    const masterSecret = JSON.parse(await Deno.readTextFile(cluster.paths.masterSecret));
    const kms = new ClusterKms(
      Uint8Array.fromBase64(masterSecret.key),
      Uint8Array.fromBase64(masterSecret.salt),
    );
    const clusterId = Uint8Array.fromHex(cluster.status.clusterId!);
    const caPath = `${cluster.node("control-plane-0").files.root}/etc/kubernetes/pki/ca.crt`;
    const joiners = cluster.nodes().filter((node) => node.name !== "control-plane-0");

    await step("every node joined in its own namespace; both control planes serve joins", () => {
      assert.equal(cluster.status.state, "running");
      assert.deepEqual(cluster.nodes().map((node) => node.status.phase), Array(5).fill("joined"));
      const addresses = new Set(cluster.nodes().map((node) => node.network.address));
      assert.equal(addresses.size, 5);
      for (const name of ["control-plane-0", "control-plane-1"]) {
        assert.ok(cluster.node(name).status.joinServiceEndpoint, `${name} runs a join service`);
      }
    });

    await step("every node's disk opens with the key service derivation for its disk UUID", async () => {
      for (const node of cluster.nodes()) {
        const key = await deriveStateDiskKey(kms, await diskUuid(node.files.disk));
        assert.ok(await diskOpensWith(node.files.disk, key), `${node.name}: the derived key opens the disk`);
      }
    });

    await step("PCR 15 of every node holds the cluster ID", async () => {
      const want = await extended(new Uint8Array(32), clusterId);
      for (const node of cluster.nodes()) assert.equal((await node.pcr15()).toHex(), want, node.name);
    });

    await step("one distinct bootstrap token per joined node, each expiring within the TTL", async () => {
      const tokens = await bootstrapTokens(cluster);
      assert.equal(tokens.size, joiners.length);
      for (const expiration of tokens.values()) {
        assert.ok(Date.parse(expiration) <= Date.now() + BOOTSTRAP_TOKEN_TTL_MS);
      }
    });

    await step("every kubelet certificate chains to the cluster CA and names its node", async () => {
      for (const node of joiners) {
        const cert = nodePaths(node.files.root).kubeletCert;
        const verify = await runToExit("openssl", ["verify", "-CAfile", caPath, cert]);
        assert.equal(verify.code, 0, `${node.name}: ${verify.stderrLines.join("\n")}`);
        const subject = await runToExit("openssl", ["x509", "-noout", "-subject", "-in", cert]);
        assert.match(subject.stdoutLines.join(""), new RegExp(`CN ?= ?system:node:${node.name}`));
      }
    });

    await step("kubectl shows the JoiningNodes and Secrets the ticket flow created", async () => {
      const text = await kubectl(cluster, ["get", "joiningnodes,secrets", "-n", "kube-system"]);
      // A control plane's JoiningNode has the one fixed name, as in the original.
      const names = joiners.map((node) => node.role === "ControlPlane" ? "control-plane" : node.name);
      for (const name of names) assert.match(text, new RegExp(`joiningnode[^\\s]*/${name}\\s`));
      assert.match(text, /secret\/constellation-mastersecret\s/);
      assert.equal(text.match(/secret\/bootstrap-token-[a-z0-9]{6}\s/g)?.length, joiners.length);
    });

    await step(
      "a node with another PCR 4 is refused, keeps retrying, and cli verify names PCR 4",
      async () => {
        const node = await cluster.addNode({ role: "Worker", name: "worker-tampered", tamperPcr4: true });
        const refused = await cluster.waitForPhase(node.name, ["refused"], 30_000);
        assert.match(refused.reason!, /PCR\[?4\]?/);
        const refusals = () =>
          node.bootstrapper!.stderrLines.filter((line) => /PCR\[?4\]?/.test(line)).length;
        const first = refusals();
        const deadline = Date.now() + 20_000;
        while (refusals() <= first && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
        assert.ok(refusals() > first, "it asks again");
        assert.equal((await node.pcr15()).toHex(), "00".repeat(32), "not bound");

        const verify = await runToExit("deno", [
          ...["run", "-P=cli", "--no-prompt", "src/cli/main.ts", "verify"],
          ...["--node", node.status.initEndpoint!, "--attestation-config", cluster.paths.attestationConfig],
          ...["--output", "json"],
        ], { cwd: REPO_ROOT });
        assert.equal(verify.code, 1, verify.stderrLines.join("\n"));
        const report = JSON.parse(verify.stdoutLines.join("\n"));
        const pcr4 = report.pcrs.find((row: { index: number }) => row.index === 4);
        assert.equal(pcr4.match, false, JSON.stringify(report.pcrs));
        const others = report.pcrs.filter((row: { index: number; match: boolean }) =>
          row.index !== 4 && !row.match
        );
        assert.deepEqual(others, [], "only PCR 4 differs");
      },
    );

    await step(
      "a worker whose key is not a control plane's is refused the control-plane role",
      async () => {
        const node = await cluster.addNode({
          role: "ControlPlane",
          name: "worker-posing",
          controlPlaneKey: false,
        });
        const refused = await cluster.waitForPhase(node.name, ["refused"], 30_000);
        assert.match(refused.reason!, /control.plane/i);
        assert.equal((await node.pcr15()).toHex(), "00".repeat(32));
      },
    );

    await step("a dummy node is refused by the qemu-vtpm cluster", async () => {
      const node = await cluster.addNode({
        role: "Worker",
        name: "worker-dummy",
        variant: "dummy",
        trusted: false,
      });
      const refused = await cluster.waitForPhase(node.name, ["refused"], 30_000);
      assert.match(refused.reason!, /variant|dummy|attestation/i);
    });

    await step("no Secret, token or JoiningNode for the refused nodes", async () => {
      const text = await kubectl(cluster, ["get", "joiningnodes,secrets", "-n", "kube-system"]);
      assert.doesNotMatch(text, /worker-tampered|worker-posing|worker-dummy/);
      assert.equal((await bootstrapTokens(cluster)).size, joiners.length);
    });

    await step("join services killed while nodes join: they wait, then join once it is back", async () => {
      const before = await bootstrapTokens(cluster);
      const late = [
        await cluster.addNode({ role: "Worker", name: "worker-late-0" }),
        await cluster.addNode({ role: "Worker", name: "worker-late-1" }),
      ];
      // Both past "listening" (phase waiting, "for Init or a join service"), so that "waiting" below is the kill's.
      for (const node of late) {
        await cluster.waitForPhase(node.name, ["attesting", "joining", "joined"], 30_000);
      }
      for (const name of ["control-plane-0", "control-plane-1"]) await cluster.stopServices(name, "SIGKILL");
      for (const node of late) {
        const status = await cluster.waitForPhase(node.name, ["waiting", "joined"], 30_000);
        if (status.phase === "waiting") assert.match(status.reason!, /unreachable/);
      }
      for (const name of ["control-plane-0", "control-plane-1"]) await cluster.startServices(name);
      for (const node of late) await cluster.waitForPhase(node.name, ["joined"], 60_000);

      const after = await bootstrapTokens(cluster);
      const added = [...after.keys()].filter((id) => !before.has(id));
      // One token per ticket; a ticket lost with a killed service leaves a token that expires.
      assert.ok(added.length >= late.length, `tokens for the late nodes: ${added.length}`);
      for (const id of added) assert.ok(Date.parse(after.get(id)!) <= Date.now() + BOOTSTRAP_TOKEN_TTL_MS);
      for (const node of late) {
        const key = await deriveStateDiskKey(kms, await diskUuid(node.files.disk));
        assert.ok(await diskOpensWith(node.files.disk, key), node.name);
      }
    });

    await step("a rebooted worker rejoins: its disk's key file is back, PCR 15 is bound again", async () => {
      const worker = cluster.node("worker-0");
      const { rejoin, boot } = await worker.reboot();
      assert.equal(rejoin.code, 0, rejoin.stderrLines.slice(-5).join("\n"));
      assert.match(rejoin.stderrLines.join("\n"), /rejoined/);
      // The reboot emptied /run; the rejoin wrote the key the image maps the state disk with.
      const keyFile = nodePaths(worker.files.root).initialPassphrase;
      const diskKey = await deriveStateDiskKey(kms, await diskUuid(worker.files.disk));
      assert.deepEqual(await Deno.readFile(keyFile), diskKey);
      assert.equal((await Deno.stat(keyFile)).mode! & 0o777, 0o400);
      assert.equal((await worker.pcr15()).toHex(), await extended(new Uint8Array(32), clusterId));
      assert.equal(boot.code, 0, boot.stderrLines.slice(-5).join("\n"));
      assert.match(boot.stderrLines.join("\n"), /bound to a cluster/);
      assert.equal(worker.status.phase, "joined");
    });

    await step(
      "a rebooted control plane offers the recovery but rejoins through the other control plane's join service",
      async () => {
        const cp1 = cluster.node("control-plane-1");
        const cp0Endpoint = cluster.node("control-plane-0").status.joinServiceEndpoint!;
        await cluster.stopServices(cp1.name); // its pods go down with it
        const { rejoin } = await cp1.reboot();
        const lines = rejoin.stderrLines.join("\n");
        assert.match(lines, /"msg":"recovery server listening"/, "a control plane offers the recovery");
        assert.match(
          lines,
          new RegExp(`"msg":"rejoined: PCR 15 bound to the cluster again".*"source":"${cp0Endpoint}"`),
        );
        assert.equal((await cp1.pcr15()).toHex(), await extended(new Uint8Array(32), clusterId));
        // The recovery server went with the rejoin: nothing listens on its port any more.
        await assert.rejects(
          Deno.connect({ hostname: cp1.network.address, port: 9999 }),
          Deno.errors.ConnectionRefused,
        );
        await cluster.startServices(cp1.name);
      },
    );

    await step(
      "every node powered off: the cluster recovers, its control planes through cli recover",
      async () => {
        const joined = cluster.nodes().filter((node) => node.status.phase === "joined").map((node) =>
          node.name
        );
        await cluster.close();
        const started = Date.now();
        running = await recoverLocalCluster({ stateDir });
        console.log(`cluster recovered (${joined.length} nodes): ${(Date.now() - started) / 1000} s`);
        assert.equal(running.status.state, "running");
        assert.equal(running.status.clusterId, cluster.status.clusterId);
        // The refused nodes never joined (their disks are not initialized): they stay off.
        assert.deepEqual(running.nodes().map((node) => node.name).sort(), [...joined].sort());
        const want = await extended(new Uint8Array(32), clusterId);
        for (const node of running.nodes()) {
          assert.equal(node.status.phase, "joined", node.name);
          assert.equal((await node.pcr15()).toHex(), want, `${node.name}: PCR 15 bound again`);
          const diskKey = await deriveStateDiskKey(kms, await diskUuid(node.files.disk));
          assert.deepEqual(
            await Deno.readFile(nodePaths(node.files.root).initialPassphrase),
            diskKey,
            node.name,
          );
          // Control planes had no join service to ask: the operator's recovery unlocked them.
          const source = node.role === "ControlPlane"
            ? /"source":"recovery"/
            : /"source":"10\.42\.\d+\.\d+:30090"/;
          const rejoined = (await Deno.readTextFile(node.status.log)).split("\n")
            .filter((line) => line.includes('"msg":"rejoined: PCR 15 bound to the cluster again"'));
          assert.match(rejoined.at(-1) ?? "", source, node.name);
        }
        const recoveries = await Deno.readTextFile(`${running.paths.logs}/cli-recover.log`);
        assert.equal(recoveries.match(new RegExp(`cluster ID: ${cluster.status.clusterId}`, "g"))?.length, 2);
        // As the CLI reads it (base64), as it travels in the kms URI (base64url), and as hex.
        const key = Uint8Array.fromBase64(masterSecret.key);
        const forms = [
          masterSecret.key,
          key.toBase64({ alphabet: "base64url", omitPadding: true }),
          key.toHex(),
        ];
        const files = [`${stateDir}/cluster.json`];
        for await (const entry of Deno.readDir(running.paths.logs)) {
          files.push(`${running.paths.logs}/${entry.name}`);
        }
        for (const file of files) {
          const text = await Deno.readTextFile(file);
          for (const form of forms) assert.ok(!text.includes(form), `the master secret is not in ${file}`);
        }
        for (const name of ["control-plane-0", "control-plane-1"]) {
          assert.ok(running.node(name).status.joinServiceEndpoint, `${name} serves joins again`);
        }
        const newcomer = await running.addNode({ role: "Worker", name: "worker-after-recovery" });
        await running.waitForPhase(newcomer.name, ["joined"], 60_000);
      },
    );
  } finally {
    await running.close();
    if (failed) await printLogTails(cluster.paths.logs);
    await Deno.remove(stateDir, { recursive: true });
  }
  console.log(`e2e test: ${(Date.now() - started) / 1000} s`);
});
