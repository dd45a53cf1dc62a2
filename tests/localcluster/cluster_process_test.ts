/**
 * `cluster up|status|down` as real processes under the `cluster` permission
 * set, from the repository root, as `deno task cluster` runs them: one
 * control plane and one worker come up; `status` in another process shows
 * them; the real kubectl reads the cluster's objects; a second `up` on the
 * same state directory is refused; `down` (or Ctrl-C, i.e. SIGINT, to `up`)
 * stops every process the status file lists; `recover` brings the stopped
 * cluster back; with network namespaces, `down` also removes the cluster's
 * namespaces and bridge.
 *
 * Each `cluster up` takes about 10 s, so there are three: one loopback
 * cluster for status, kubectl, the refused second up and down; one for
 * SIGINT; one with namespaces. A --state-dir that is a file is refused
 * before anything starts.
 */
import assert from "node:assert/strict";
import {
  type ProcessResult,
  type RunningService,
  runToExit,
  startService,
} from "../../src/os/service_process.ts";
import type { ClusterStatus } from "../../src/localcluster/status.ts";

const REPO_ROOT = decodeURIComponent(new URL("../../", import.meta.url).pathname);
/** The summary's API line, printed right after "Cluster running: …" (its port is the API's). */
const SUMMARY_API = /^ {2}Kubernetes API\s+https:\/\/[\d.]+:(\d+)$/;
const ALL_JOINED = "Cluster running: 2 of 2 nodes joined";

function clusterArgs(args: string[]): string[] {
  return ["run", "-P=cluster", "--no-prompt", "src/localcluster/main.ts", ...args];
}

const output = (result: { stdoutLines: string[]; stderrLines: string[] }) =>
  [...result.stdoutLines, ...result.stderrLines].join("\n");

/** Runs `cluster args` to its end. */
function cluster(args: string[], timeoutMs = 60_000): Promise<ProcessResult> {
  return runToExit("deno", clusterArgs(args), { cwd: REPO_ROOT, timeoutMs });
}

/** Starts `cluster up` with one control plane and one worker; resolves once its summary says both joined. */
async function clusterUp(stateDir: string, network: "loopback" | "netns"): Promise<RunningService> {
  const started = Date.now();
  const up = await startService(
    "deno",
    clusterArgs([
      ...["up", "--state-dir", stateDir, "--control-planes", "1", "--workers", "1"],
      ...["--network", network, "--timeout", "90"],
    ]),
    { readyMatch: SUMMARY_API, cwd: REPO_ROOT, timeoutMs: 120_000 },
  );
  if (!up.stdoutLines.some((line) => line.startsWith(ALL_JOINED))) {
    await up.stop("SIGINT");
    assert.fail(`cluster up printed no "${ALL_JOINED}":\n${output(up)}`);
  }
  console.log(`cluster up (${network}): ${ALL_JOINED} after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return up;
}

/** `cluster status --output json` in its own process. */
async function statusOf(stateDir: string): Promise<{ code: number; status: ClusterStatus }> {
  const result = await cluster(["status", "--state-dir", stateDir, "--output", "json"]);
  try {
    return { code: result.code, status: JSON.parse(result.stdoutLines.join("\n")) };
  } catch {
    throw new Error(`cluster status printed no JSON (status ${result.code}):\n${output(result)}`);
  }
}

/** Whether process `pid` exists: `ps -o pid= -p <pid>`. */
async function alive(pid: number): Promise<boolean> {
  const result = await runToExit("ps", ["-o", "pid=", "-p", String(pid)]);
  return result.code === 0 && result.stdoutLines.some((line) => line.trim() === String(pid));
}

/** Every PID the running cluster's status names: its processes and `cluster up` itself. */
function pidsOf(status: ClusterStatus): { name: string; pid: number }[] {
  return [{ name: "cluster up", pid: status.supervisorPid }, ...status.processes];
}

async function assertAllGone(pids: { name: string; pid: number }[]): Promise<void> {
  const left = [];
  for (const record of pids) if (await alive(record.pid)) left.push(record);
  assert.deepEqual(left, [], "processes still alive");
}

/** Brings down whatever a failed test left running, then removes the state directory. */
async function cleanUp(stateDir: string, up: RunningService | undefined): Promise<void> {
  try {
    if (up !== undefined) {
      await cluster(["down", "--state-dir", stateDir]).catch(() => undefined);
      await up.stop("SIGKILL");
    }
  } finally {
    await Deno.remove(stateDir, { recursive: true });
  }
}

async function tempStateDir(prefix: string): Promise<string> {
  return await Deno.realPath(await Deno.makeTempDir({ prefix }));
}

Deno.test("cluster up (loopback) runs two nodes that status and kubectl see; a second up is refused; down stops every process; recover brings it back", async (t) => {
  const stateDir = await tempStateDir("cluster-loopback-");
  let up: RunningService | undefined;
  try {
    up = await clusterUp(stateDir, "loopback");
    const running = up;
    let pids: { name: string; pid: number }[] = [];

    await t.step("cluster status --output json shows both nodes joined and the cluster running", async () => {
      const { code, status } = await statusOf(stateDir);
      assert.equal(code, 0, "status of a running cluster exits 0");
      assert.equal(status.state, "running");
      assert.deepEqual(
        status.nodes.map((node) => [node.name, node.role, node.phase]),
        [["control-plane-0", "ControlPlane", "joined"], ["worker-0", "Worker", "joined"]],
      );
      assert.equal(status.network.kind, "loopback");
      assert.equal(status.supervisorPid, running.pid, "the supervisor is the up process");
      assert.equal(status.kubeconfig, `${stateDir}/admin.conf`);
      const names = status.processes.map((record) => record.name);
      const expected = ["control-plane-0/swtpm", "worker-0/swtpm", "local-api"];
      for (const name of [...expected, "control-plane-0/key-service", "control-plane-0/join-service"]) {
        assert.ok(names.includes(name), `${name} in the status's processes: ${names.join(", ")}`);
      }
      pids = pidsOf(status);
      for (const record of pids) assert.ok(await alive(record.pid), `${record.name} (${record.pid}) runs`);
    });

    await t.step("kubectl lists the worker's JoiningNode and the bootstrap token Secret", async () => {
      const result = await runToExit("kubectl", [
        ...["--kubeconfig", `${stateDir}/admin.conf`, "get", "joiningnodes,secrets", "-n", "kube-system"],
        ...["-o", "name"],
      ]);
      assert.equal(result.code, 0, output(result));
      assert.ok(result.stdoutLines.includes("joiningnode.update.edgeless.systems/worker-0"), output(result));
      assert.ok(
        result.stdoutLines.some((line) => /^secret\/bootstrap-token-[a-z0-9]{6}$/.test(line)),
        output(result),
      );
    });

    await t.step(
      "a second cluster up, or a recover, on the same state directory is refused and leaves the cluster alone",
      async () => {
        const second = await cluster(["up", "--state-dir", stateDir, "--network", "loopback"]);
        assert.equal(second.code, 1, output(second));
        assert.match(
          output(second),
          new RegExp(
            `cluster: a cluster runs in ${stateDir} \\(cluster up is PID ${running.pid}\\): cluster down first`,
          ),
        );
        const recover = await cluster(["recover", "--state-dir", stateDir]);
        assert.equal(recover.code, 1, output(recover));
        assert.match(
          output(recover),
          new RegExp(`cluster: the cluster in ${stateDir} runs \\(cluster up is PID ${running.pid}\\)`),
        );
        const { status } = await statusOf(stateDir);
        assert.equal(status.state, "running");
        for (const record of pids) {
          assert.ok(await alive(record.pid), `${record.name} (${record.pid}) still runs`);
        }
      },
    );

    await t.step(
      "cluster down stops everything: up exits 0, no listed process is alive, status says stopped",
      async () => {
        assert.ok(pids.length > 0, "the status step recorded the PIDs");
        const down = await cluster(["down", "--state-dir", stateDir]);
        assert.equal(down.code, 0, output(down));
        assert.match(output(down), /^Stopped \d+ process\(es\)\.$/m);
        const exit = await running.status;
        assert.equal(exit.code, 0, `cluster up's exit:\n${output(running)}`);
        assert.ok(running.stdoutLines.includes("Stopping the cluster …"), output(running));
        up = undefined;
        await assertAllGone(pids);
        const { code, status } = await statusOf(stateDir);
        assert.equal(status.state, "stopped");
        assert.deepEqual(status.processes, []);
        assert.equal(code, 1, "status of a stopped cluster exits 1");
      },
    );

    await t.step(
      "cluster recover brings the stopped cluster back: the same cluster, both nodes bound again, kubectl reads it",
      async () => {
        const stopped = (await statusOf(stateDir)).status;
        // Two at once: one recovers, the other is turned away (the state directory's lock, or the status).
        const [first, second] = await Promise.allSettled([0, 1].map(() =>
          startService(
            "deno",
            clusterArgs(["recover", "--state-dir", stateDir, "--timeout", "90"]),
            { readyMatch: SUMMARY_API, cwd: REPO_ROOT, timeoutMs: 120_000 },
          )
        ));
        const won = [first, second].filter((result) => result.status === "fulfilled");
        const lost = [first, second].filter((result) => result.status === "rejected");
        const recovering = won[0]?.value;
        up = recovering;
        // A second winner (no lock) would be left running by a failed assertion: stop it first.
        for (const extra of won.slice(1)) await extra.value.stop("SIGINT");
        assert.equal(won.length, 1, "exactly one recover runs the cluster");
        assert.equal(lost.length, 1);
        assert.match(
          String(lost[0].reason),
          /cluster: (another cluster up or recover is working on|the cluster in \S+ runs)/,
        );
        assert.ok(recovering.stdoutLines.some((line) => line.startsWith(ALL_JOINED)), output(recovering));
        const { code, status } = await statusOf(stateDir);
        assert.equal(code, 0, "status of the recovered cluster exits 0");
        assert.equal(status.supervisorPid, recovering.pid);
        assert.equal(status.clusterId, stopped.clusterId);
        assert.equal(status.apiServer, stopped.apiServer, "the API keeps its address");
        assert.deepEqual(status.nodes.map((node) => [node.name, node.phase]), [
          ["control-plane-0", "joined"],
          ["worker-0", "joined"],
        ]);
        const recovered = await Deno.readTextFile(`${stateDir}/logs/cli-recover.log`);
        assert.ok(recovered.includes(`cluster ID: ${stopped.clusterId}`), recovered);
        const kubectl = await runToExit("kubectl", [
          ...[
            "--kubeconfig",
            `${stateDir}/admin.conf`,
            "get",
            "joiningnodes",
            "-n",
            "kube-system",
            "-o",
            "name",
          ],
        ]);
        assert.equal(kubectl.code, 0, output(kubectl));
        assert.ok(
          kubectl.stdoutLines.includes("joiningnode.update.edgeless.systems/worker-0"),
          output(kubectl),
        );

        const pids = pidsOf(status);
        const down = await cluster(["down", "--state-dir", stateDir]);
        assert.equal(down.code, 0, output(down));
        assert.equal((await recovering.status).code, 0, `cluster recover's exit:\n${output(recovering)}`);
        up = undefined;
        await assertAllGone(pids);
      },
    );
  } finally {
    await cleanUp(stateDir, up);
  }
});

Deno.test("SIGINT (Ctrl-C) to cluster up stops every process it started", async () => {
  const stateDir = await tempStateDir("cluster-sigint-");
  let up: RunningService | undefined;
  try {
    up = await clusterUp(stateDir, "loopback");
    const { status } = await statusOf(stateDir);
    assert.equal(status.state, "running");
    const pids = pidsOf(status);
    for (const record of pids) assert.ok(await alive(record.pid), `${record.name} (${record.pid}) runs`);

    const exit = await up.stop("SIGINT");
    assert.equal(exit.code, 0, `cluster up's exit:\n${output(up)}`);
    assert.ok(
      up.stdoutLines.includes(`Stopped. The state (logs, kubeconfig, secrets) stays in ${stateDir}.`),
      output(up),
    );
    up = undefined;
    await assertAllGone(pids);
    const after = await statusOf(stateDir);
    assert.equal(after.status.state, "stopped");
    assert.deepEqual(after.status.processes, []);
  } finally {
    await cleanUp(stateDir, up);
  }
});

Deno.test("cluster recover where no cluster is says so and creates nothing", async () => {
  const stateDir = await tempStateDir("cluster-none-");
  try {
    const result = await cluster(["recover", "--state-dir", stateDir]);
    assert.equal(result.code, 1, output(result));
    assert.match(output(result), new RegExp(`cluster: no cluster in ${stateDir} \\(start one with`));
    assert.deepEqual([...Deno.readDirSync(stateDir)], []);
  } finally {
    await Deno.remove(stateDir, { recursive: true });
  }
});

Deno.test("a state directory outside the cluster permission set is named with what to do instead", async () => {
  const result = await cluster(["status", "--state-dir", "/var/tmp/not-a-cluster-dir"]);
  assert.equal(result.code, 1, output(result));
  assert.match(
    output(result),
    /cluster: \/var\/tmp\/not-a-cluster-dir is outside what the cluster permission set may read and write .*choose a --state-dir/,
  );
  assert.doesNotMatch(output(result), /--allow-read/);
});

Deno.test("a --state-dir that is a file is named as not a directory, by every command, and one with a comma is refused", async (t) => {
  for (
    const [command, stateDir] of [["up", "./README.md"], ["status", "README.md"], ["down", "README.md/c"]]
  ) {
    await t.step(`${command} --state-dir ${stateDir}`, async () => {
      const result = await cluster([command, "--state-dir", stateDir]);
      assert.equal(result.code, 1, output(result));
      assert.equal(output(result), `cluster: --state-dir ${stateDir} is not a directory`);
    });
  }
  await t.step("up --state-dir with a comma in its path", async () => {
    const result = await cluster(["up", "--state-dir", "/tmp/a,b"]);
    assert.equal(result.code, 1, output(result));
    assert.equal(output(result), "cluster: --state-dir /tmp/a,b names a path with a comma (/tmp/a,b)");
  });
});

/** A file that `cluster up` never wrote: the fields of the status file the commands need, more or fewer. */
function forgedStatus(fields: Record<string, unknown>): string {
  return JSON.stringify({
    state: "stopped",
    supervisorPid: 999999,
    network: { kind: "loopback" },
    nodes: [],
    processes: [],
    ...fields,
  });
}

Deno.test("down and recover tell the cluster's processes by the --state-dir given: a status file of another one, or of one every command line names, is refused, and the unrelated process it lists runs on", async (t) => {
  const stateDir = await tempStateDir("cluster-forged-");
  // Unrelated to any cluster; /usr/bin/sleep's command line names "/usr" (and "", as every one does).
  const sleep = new Deno.Command("sh", {
    args: ["-c", "exec /usr/bin/sleep 60"],
    stdout: "null",
    stderr: "null",
  })
    .spawn();
  try {
    while (
      !(await runToExit("ps", ["-o", "args=", "-p", String(sleep.pid)])).stdoutLines[0]?.startsWith("/usr")
    ) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const rows: { name: string; args: string[]; recorded?: string; want: RegExp }[] = [
      ...["down", "recover"].flatMap((command) =>
        ["", "/usr", "/tmp"].map((recorded) => ({
          name: `${command}, the file records the state directory ${JSON.stringify(recorded)}`,
          args: [command, "--state-dir", stateDir],
          recorded,
          want: new RegExp(
            `^cluster: ${stateDir}/cluster\\.json is not a cluster status file that cluster up wrote \\(stateDir: want this state directory, "${stateDir}", got "${recorded}"\\)`,
          ),
        }))
      ),
      {
        name: "down --state-dir / (every command line names it)",
        args: ["down", "--state-dir", "/"],
        want: /^cluster: --state-dir \/: the root directory cannot be a cluster's state directory$/,
      },
    ];
    for (const row of rows) {
      await t.step(row.name, async () => {
        if (row.recorded !== undefined) {
          await Deno.writeTextFile(
            `${stateDir}/cluster.json`,
            forgedStatus({ stateDir: row.recorded, processes: [{ name: "x", pid: sleep.pid }] }),
          );
        }
        const result = await cluster(row.args);
        assert.equal(result.code, 1, output(result));
        assert.match(output(result), row.want);
        assert.ok(await alive(sleep.pid), "the unrelated sleep runs on");
      });
    }
  } finally {
    try {
      sleep.kill("SIGKILL");
    } catch {
      // Killed already: the failure above says by whom.
    }
    await sleep.status;
    await Deno.remove(stateDir, { recursive: true });
  }
});

Deno.test("a status file that lacks a field a command uses, or has a wrong one, is named by that field, by every command", async (t) => {
  const stateDir = await tempStateDir("cluster-fields-");
  const complete = {
    stateDir,
    network: { kind: "loopback", hostAddress: "127.0.0.1", bridge: "", namespaces: [] },
    startedAt: "2026-01-01T00:00:00Z",
    kubeconfig: `${stateDir}/admin.conf`,
    logs: `${stateDir}/logs`,
  };
  const rows: { name: string; commands: string[]; file: string; field: RegExp }[] = [
    {
      // Was: status "Cannot read properties of undefined (reading 'startsWith')", down and up "names.namespaces
      // is not iterable".
      name: "a netns network without its names",
      commands: ["status", "down", "recover", "up"],
      file: forgedStatus({ stateDir, network: { kind: "netns" } }),
      field: /network\.hostAddress: missing, want a string/,
    },
    {
      // Was: "Cannot read properties of undefined (reading 'length')".
      // (down needs only what stopping uses: an older cluster up's file must still stop; see status_test.ts.)
      name: "a node whose name is a number",
      commands: ["status", "recover"],
      file: forgedStatus({ ...complete, nodes: [{ name: 5 }] }),
      field: /nodes\[0\]\.name: want a non-empty string, got 5/,
    },
    {
      name: "no kubeconfig",
      commands: ["status"],
      file: forgedStatus({ ...complete, kubeconfig: undefined }),
      field: /kubeconfig: missing, want a string/,
    },
  ];
  try {
    for (const row of rows) {
      for (const command of row.commands) {
        await t.step(`${command}: ${row.name}`, async () => {
          await Deno.writeTextFile(`${stateDir}/cluster.json`, row.file);
          const result = await cluster([command, "--state-dir", stateDir]);
          assert.equal(result.code, 1, output(result));
          assert.match(
            output(result),
            new RegExp(
              `^cluster: ${stateDir}/cluster\\.json is not a cluster status file that cluster up wrote \\(`,
            ),
          );
          assert.match(output(result), row.field);
          assert.deepEqual(
            [...Deno.readDirSync(stateDir)].map((entry) => entry.name),
            ["cluster.json"],
            "nothing was started or removed",
          );
        });
      }
    }
  } finally {
    await Deno.remove(stateDir, { recursive: true });
  }
});

/** The namespace `name`'s inode (its identity), or undefined when none is mounted by that name. */
async function namespaceInode(name: string): Promise<number | undefined> {
  try {
    return (await Deno.stat(`/run/netns/${name}`)).ino ?? undefined;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
}

async function namespaceNames(): Promise<string[]> {
  const result = await runToExit("ip", ["netns", "list"]);
  assert.equal(result.code, 0, output(result));
  return result.stdoutLines.map((line) => line.split(" ")[0]).filter((name) => name !== "");
}

/** The link's index, or undefined when `ip link show <name>` fails (no such link). */
async function linkIndex(name: string): Promise<number | undefined> {
  const result = await runToExit("ip", ["-j", "link", "show", "dev", name]);
  if (result.code !== 0) return undefined;
  return JSON.parse(result.stdoutLines.join("\n"))[0].ifindex;
}

Deno.test("cluster up with network namespaces: down removes every namespace and the bridge", async () => {
  const stateDir = await tempStateDir("cluster-netns-");
  let up: RunningService | undefined;
  try {
    up = await clusterUp(stateDir, "netns");
    const { status } = await statusOf(stateDir);
    assert.equal(status.state, "running");
    assert.equal(status.network.kind, "netns");
    const { bridge, namespaces } = status.network;
    assert.match(bridge, /^c11n\d+$/);
    assert.deepEqual(namespaces, [`${bridge}-node0`, `${bridge}-node1`]);
    assert.deepEqual(status.nodes.map((node) => node.phase), ["joined", "joined"]);

    // While it runs: the namespaces and the bridge exist; their identities tell them from a later cluster's.
    const listed = await namespaceNames();
    const inodes = new Map<string, number | undefined>();
    for (const namespace of namespaces) {
      assert.ok(listed.includes(namespace), `${namespace} in ip netns list: ${listed.join(", ")}`);
      inodes.set(namespace, await namespaceInode(namespace));
      assert.ok(inodes.get(namespace) !== undefined, `/run/netns/${namespace} exists`);
    }
    const bridgeIndex = await linkIndex(bridge);
    assert.ok(bridgeIndex !== undefined, `ip link show ${bridge} succeeds while the cluster runs`);
    const pids = pidsOf(status);
    for (const record of pids) assert.ok(await alive(record.pid), `${record.name} (${record.pid}) runs`);

    const down = await cluster(["down", "--state-dir", stateDir]);
    assert.equal(down.code, 0, output(down));
    assert.match(output(down), /^Stopped \d+ process\(es\), removed the network\.$/m);
    assert.equal((await up.status).code, 0, `cluster up's exit:\n${output(up)}`);
    up = undefined;
    await assertAllGone(pids);

    // Another cluster on this machine (tests run in parallel) may claim the freed names at once: a name
    // that is listed again must be a new namespace or link, never ours.
    const after = await namespaceNames();
    for (const namespace of namespaces) {
      if (!after.includes(namespace)) continue;
      assert.notEqual(await namespaceInode(namespace), inodes.get(namespace), `${namespace} is still there`);
    }
    const bridgeAfter = await linkIndex(bridge);
    assert.ok(bridgeAfter === undefined || bridgeAfter !== bridgeIndex, `bridge ${bridge} is still there`);
    assert.equal((await statusOf(stateDir)).status.state, "stopped");
  } finally {
    await cleanUp(stateDir, up);
  }
});
