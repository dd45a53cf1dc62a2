/**
 * src/localcluster/status.ts: readStatus names a status file of the wrong
 * shape as such, never a JavaScript error from deep inside a command;
 * stopCluster signals only this cluster's processes, told by their command
 * lines (namesPath) and, for cluster up, by when it started.
 */
import assert from "node:assert/strict";
import { commandLineOf, startTimeOf } from "../../src/os/processes.ts";
import { runTool } from "../../src/os/run_tool.ts";
import { createNetwork, netnsAvailable, removeNetwork } from "../../src/localcluster/network.ts";
import {
  type ClusterStatus,
  namesPath,
  readStatus,
  stopCluster,
  supervisorRuns,
} from "../../src/localcluster/status.ts";

const GOOD = {
  state: "stopped",
  stateDir: "/tmp/c",
  supervisorPid: 4242,
  network: { kind: "loopback", hostAddress: "127.0.0.1", bridge: "", namespaces: [], owner: "" },
  startedAt: "2026-01-01T00:00:00Z",
  kubeconfig: "/tmp/c/admin.conf",
  logs: "/tmp/c/logs",
  nodes: [],
  processes: [{ name: "local-api", pid: 77 }],
};

Deno.test("readStatus reads a status file and names one of the wrong shape, or of another state directory, by its field", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "cluster-status-" });
  const good = { ...GOOD, stateDir: dir };
  const node = {
    name: "worker-0",
    role: "Worker",
    index: 1,
    address: "192.0.2.11",
    phase: "joined",
    log: `${dir}/logs/worker-0.log`,
  };
  try {
    const rows: { name: string; file: unknown; want: "ok" | RegExp }[] = [
      { name: "a status file", file: good, want: "ok" },
      { name: "a status file with a node", file: { ...good, nodes: [node] }, want: "ok" },
      // Written by an older cluster up: nodes without a number; a clock stepped back while it ran.
      {
        name: "a node without its number",
        file: { ...good, nodes: [{ ...node, index: undefined }] },
        want: "ok",
      },
      { name: "negative seconds up", file: { ...good, upSeconds: -2.3 }, want: "ok" },
      {
        name: "not JSON",
        file: "{",
        want: /is not a cluster status file that cluster up wrote \(not JSON\)/,
      },
      { name: "a JSON array", file: [], want: /\(not a JSON object\)/ },
      { name: "nodes not a list", file: { ...good, nodes: "x" }, want: /\(nodes: want a list, got "x"\)/ },
      {
        name: "a process without a PID",
        file: { ...good, processes: [{ name: "x" }] },
        want: /\(processes\[0\]\.pid: missing, want a process ID\)/,
      },
      {
        name: "no network",
        file: { ...good, network: undefined },
        want: /\(network: missing, want an object\)/,
      },
      // Files that passed the shape check before, and failed in a command with a JavaScript error.
      {
        name: "a netns network without its names (status: reading 'startsWith'; down: not iterable)",
        file: { ...good, network: { kind: "netns" } },
        want: /\(network\.hostAddress: missing, want a string\)/,
      },
      {
        name: "a node whose name is a number (reading 'length')",
        file: { ...good, nodes: [{ name: 5 }] },
        want: /\(nodes\[0\]\.name: want a non-empty string, got 5\)/,
      },
      {
        name: "a node without a role",
        file: { ...good, nodes: [{ ...node, role: undefined }] },
        want: /\(nodes\[0\]\.role: missing, want one of "ControlPlane", "Worker"\)/,
      },
      {
        name: "a node of no phase there is",
        file: { ...good, nodes: [node, { ...node, phase: "done" }] },
        want: /\(nodes\[1\]\.phase: want one of .*"joined".*, got "done"\)/,
      },
      {
        name: "no kubeconfig",
        file: { ...good, kubeconfig: undefined },
        want: /\(kubeconfig: missing, want a string\)/,
      },
      { name: "no state", file: { ...good, state: 1 }, want: /\(state: want one of "starting", .*, got 1\)/ },
      {
        name: "an API server recover cannot bind again",
        file: { ...good, apiServer: "https://127.0.0.1" },
        want: /\(apiServer: want an https:\/\/ URL with a port, got "https:\/\/127\.0\.0\.1"\)/,
      },
      {
        name: "PID 0",
        file: { ...good, processes: [{ name: "x", pid: 0 }] },
        want: /\(processes\[0\]\.pid: want a process ID, got 0\)/,
      },
      {
        name: "a negative supervisor PID",
        file: { ...good, supervisorPid: -1 },
        want: /\(supervisorPid: want a process ID, got -1\)/,
      },
      {
        name: "a control character in a value is shown escaped",
        file: { ...good, nodes: [{ ...node, role: "\x1b[2J" }] },
        want: /got "\\u001b\[2J"\)/,
      },
      // The processes of a cluster are told by its state directory: a file of another one names others.
      ...["", "/", "/usr", "/tmp/other-cluster", `${dir}/..`, `${dir}/`].map((stateDir) => ({
        name: `the state directory recorded as ${JSON.stringify(stateDir)}`,
        file: { ...good, stateDir },
        want: new RegExp(
          `\\(stateDir: want this state directory, "${dir}", got ${escape(JSON.stringify(stateDir))}\\)`,
        ),
      })),
    ];
    for (const row of rows) {
      await t.step(row.name, async () => {
        await Deno.writeTextFile(
          `${dir}/cluster.json`,
          typeof row.file === "string" ? row.file : JSON.stringify(row.file),
        );
        if (row.want === "ok") {
          assert.deepEqual(await readStatus(dir), JSON.parse(JSON.stringify(row.file)));
          return;
        }
        await assert.rejects(readStatus(dir), (error: Error) => {
          assert.match(error.message, row.want as RegExp);
          assert.match(
            error.message,
            new RegExp(`^${escape(dir)}/cluster\\.json is not a cluster status file`),
          );
          return true;
        });
      });
    }
    await t.step(
      "for stopping, only what stopping needs: an older cluster up's file still stops",
      async () => {
        const older = { ...good, state: "running", nodes: [{ name: "worker-0" }], kubeconfig: undefined };
        await Deno.writeTextFile(`${dir}/cluster.json`, JSON.stringify(older));
        assert.deepEqual(await readStatus(dir, { forStop: true }), JSON.parse(JSON.stringify(older)));
        await assert.rejects(readStatus(dir), /\(kubeconfig: missing/);
        // What stopping relies on is still checked.
        await Deno.writeTextFile(`${dir}/cluster.json`, JSON.stringify({ ...older, stateDir: "/usr" }));
        await assert.rejects(readStatus(dir, { forStop: true }), /\(stateDir: want this state directory/);
        await Deno.writeTextFile(
          `${dir}/cluster.json`,
          JSON.stringify({ ...older, processes: [{ name: "x" }] }),
        );
        await assert.rejects(readStatus(dir, { forStop: true }), /\(processes\[0\]\.pid: missing/);
      },
    );
    await t.step("no state directory that every command line names, or that is not absolute", async () => {
      for (const stateDir of ["", "/", "//", "/tmp/..", "relative", `${dir}/`]) {
        await assert.rejects(
          readStatus(stateDir),
          /^Error: not a state directory: /,
          JSON.stringify(stateDir),
        );
      }
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** `text` with the characters a regular expression gives meaning escaped. */
function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}

Deno.test("namesPath: the state directory as a whole argument or the start of a path in it, nothing longer", async (t) => {
  const stateDir = "/x/.dev/cluster";
  const rows: { name: string; commandLine: string; want: boolean }[] = [
    {
      name: "cluster up naming it",
      commandLine:
        `deno run -P=cluster --no-prompt /repo/src/localcluster/main.ts up --state-dir ${stateDir}`,
      want: true,
    },
    { name: "as a flag's value after =", commandLine: `main.ts down --state-dir=${stateDir}`, want: true },
    { name: "a file in it", commandLine: `deno run main.ts --root ${stateDir}/nodes/worker-0`, want: true },
    {
      name: "in a comma-separated list",
      commandLine: `deno run --allow-read=/tmp,${stateDir}/nodes/worker-0 main.ts`,
      want: true,
    },
    {
      name: "swtpm's dir=",
      commandLine: `swtpm socket --tpm2 --tpmstate dir=${stateDir}/nodes/a/tpm`,
      want: true,
    },
    {
      name: "cluster up of another state directory (the default, elsewhere)",
      commandLine:
        "deno run -P=cluster --no-prompt /other/src/localcluster/main.ts up --state-dir /y/.dev/cluster",
      want: false,
    },
    {
      name: "cluster up naming none",
      commandLine: "deno run -P=cluster src/localcluster/main.ts up",
      want: false,
    },
    { name: "a longer directory's", commandLine: `main.ts up --state-dir ${stateDir}2`, want: false },
    {
      name: "a file in a longer directory",
      commandLine: `swtpm dir=${stateDir}-old/nodes/a/tpm`,
      want: false,
    },
    { name: "a directory below another", commandLine: `main.ts up --state-dir /y${stateDir}`, want: false },
    { name: "another program", commandLine: "sleep 60", want: false },
  ];
  for (const row of rows) {
    await t.step(row.name, () => assert.equal(namesPath(row.commandLine, stateDir), row.want));
  }
});

Deno.test("stopCluster signals only this cluster's processes: a reused PID, of another cluster up among them, is left alone", async () => {
  const parent = await Deno.realPath(await Deno.makeTempDir({ prefix: "cluster-stop-" }));
  const stateDir = `${parent}/cluster`;
  /** A process whose command line (as ps shows it) ends with `args`; sh stays (no exec) until signalled. */
  const started = (args: string[]) =>
    new Deno.Command("sh", {
      args: ["-c", "while :; do sleep 0.2; done", ...args],
      stdout: "null",
      stderr: "null",
    })
      .spawn();
  // Another cluster's cluster up took the stale status file's supervisor PID (started later than the file
  // says; its command line names no state directory, as with the default), and another cluster's node a
  // process PID: neither is this cluster's. This cluster's own node process is.
  const otherSupervisor = started(["src/localcluster/main.ts", "up"]);
  const otherNode = started(["--root", `${stateDir}-old/nodes/worker-0`]);
  const ownNode = started(["--root", `${stateDir}/nodes/worker-0`]);
  const ownRecord = { name: "worker-0/bootstrapper", pid: ownNode.pid };
  const status = {
    ...GOOD,
    stateDir,
    supervisorPid: otherSupervisor.pid,
    supervisorStart: "Thu Jan  1 00:00:00 2026",
    processes: [ownRecord, { name: "worker-1/bootstrapper", pid: otherNode.pid }],
  } as ClusterStatus;
  try {
    assert.deepEqual(await stopCluster(stateDir, status), { stopped: [ownRecord], network: "none" });
    assert.equal((await ownNode.status).signal, "SIGTERM");
    assert.notEqual(await commandLineOf(otherSupervisor.pid), undefined, "the other cluster up runs on");
    assert.notEqual(await commandLineOf(otherNode.pid), undefined, "the other node runs on");
  } finally {
    for (const child of [otherSupervisor, otherNode, ownNode]) {
      try {
        child.kill("SIGKILL");
      } catch {
        // Exited already.
      }
      await child.status;
    }
    await Deno.remove(parent, { recursive: true });
  }
});

/** A process that no cluster started: `sh -c script sh ...args` (tests may run sh, not sleep). */
function unrelated(script: string, args: string[] = []): Deno.ChildProcess {
  return new Deno.Command("sh", { args: ["-c", script, "sh", ...args], stdout: "null", stderr: "null" })
    .spawn();
}

/** A shell that stays until signalled, with `args` on its command line. */
const LOOP = "while :; do sleep 0.2; done";

/** Kills `child` unless it exited, and waits for it. */
async function reap(child: Deno.ChildProcess): Promise<void> {
  try {
    child.kill("SIGKILL");
  } catch {
    // Exited already.
  }
  await child.status;
}

Deno.test("stopCluster signals only what the state directory it is given proves this cluster's, never by the file's", async (t) => {
  const parent = await Deno.realPath(await Deno.makeTempDir({ prefix: "cluster-stop-" }));
  const stateDir = `${parent}/cluster`;
  const other = `${parent}/other`;
  /** No process has it. */
  const NO_PID = 2 ** 31 - 2;
  const rows: {
    name: string;
    /** The --state-dir given (default `stateDir`). */
    given?: string;
    /** The state directory the status file records (default the given one). */
    recorded?: string;
    /** `unrelated`'s arguments for the process the file lists. */
    process: [string, string[]?];
    /** Whether the file lists it as cluster up (without a start time, as files of earlier versions) or a node's. */
    as: "supervisor" | "process";
    want: "refused" | "left alone" | "stopped";
  }[] = [
    {
      name: "a file that records another state directory, whose process it lists",
      recorded: other,
      process: [LOOP, ["--root", `${other}/nodes/worker-0`]],
      as: "process",
      want: "refused",
    },
    {
      name: 'a file that records "" for this state directory (every command line names "")',
      recorded: "",
      process: ["exec /usr/bin/sleep 60"],
      as: "process",
      want: "refused",
    },
    {
      name: 'a file that records "/usr" for this state directory',
      recorded: "/usr",
      process: ["exec /usr/bin/sleep 60"],
      as: "process",
      want: "refused",
    },
    {
      name: 'the state directory "" given',
      given: "",
      process: ["exec /usr/bin/sleep 60"],
      as: "process",
      want: "refused",
    },
    {
      name: 'the state directory "/" given',
      given: "/",
      process: [LOOP, ["/"]],
      as: "process",
      want: "refused",
    },
    {
      name: 'the state directory "/usr" given: the program /usr/bin/sleep is no file of it',
      given: "/usr",
      process: ["exec /usr/bin/sleep 60"],
      as: "process",
      want: "left alone",
    },
    {
      name: "a file without a start time: another state directory's cluster up",
      process: [LOOP, ["src/localcluster/main.ts", "up", "--state-dir", other]],
      as: "supervisor",
      want: "left alone",
    },
    {
      name: "a file without a start time: a cluster up naming no state directory (whose, unknown)",
      process: [LOOP, ["src/localcluster/main.ts", "up"]],
      as: "supervisor",
      want: "left alone",
    },
    {
      name: "a file without a start time: this state directory's cluster up",
      process: [LOOP, ["src/localcluster/main.ts", "up", "--state-dir", stateDir]],
      as: "supervisor",
      want: "stopped",
    },
    {
      name: "this state directory's node process",
      process: [LOOP, ["--root", `${stateDir}/nodes/worker-0`]],
      as: "process",
      want: "stopped",
    },
  ];
  try {
    for (const row of rows) {
      await t.step(row.name, async () => {
        const given = row.given ?? stateDir;
        const child = unrelated(...row.process);
        const record = { name: "worker-0/bootstrapper", pid: child.pid };
        const status = {
          ...GOOD,
          stateDir: row.recorded ?? given,
          supervisorPid: row.as === "supervisor" ? child.pid : NO_PID,
          processes: row.as === "process" ? [record] : [],
        } as ClusterStatus;
        try {
          // The command line it is told by, once it shows (sh execs sleep: until then it names the script).
          const [script, args] = row.process;
          const ready = (line = "") =>
            args === undefined ? line.startsWith("/usr/bin/sleep ") : line.includes(script);
          while (!ready(await commandLineOf(child.pid))) {
            await new Promise((resolve) => setTimeout(resolve, 10));
          }
          if (row.want === "refused") {
            await assert.rejects(stopCluster(given, status), /^Error: cannot stop the cluster in /);
          } else {
            const { stopped } = await stopCluster(given, status);
            assert.deepEqual(stopped.map((r) => r.pid), row.want === "stopped" ? [child.pid] : []);
          }
          if (row.want === "stopped") {
            assert.equal((await child.status).signal, "SIGTERM");
          } else {
            assert.notEqual(await commandLineOf(child.pid), undefined, "the process runs on");
          }
        } finally {
          await reap(child);
        }
      });
    }
  } finally {
    await Deno.remove(parent, { recursive: true });
  }
});

Deno.test({
  name:
    "stopCluster removes no network by names its cluster did not get: no process in such a namespace is killed",
  ignore: !(await netnsAvailable()),
  async fn(t) {
    const stateDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "cluster-stop-netns-" }));
    const rows: {
      name: string;
      network: (namespace: string) => ClusterStatus["network"];
      namespace: string;
    }[] = [
      {
        name: "a namespace without a bridge (no bridge's mark to tell it by)",
        namespace: `stop-test-${Deno.pid}`,
        network: (namespace) => ({
          kind: "netns",
          hostAddress: "",
          bridge: "",
          namespaces: [namespace],
          owner: stateDir,
        }),
      },
      {
        name: "names of another owner, whose bridge is gone",
        // Subnets end at 255: no cluster's bridge has this name.
        namespace: "c11n999-node0",
        network: (namespace) => ({
          kind: "netns",
          hostAddress: "10.42.99.1",
          bridge: "c11n999",
          namespaces: [namespace],
          owner: `${stateDir}-other`,
        }),
      },
    ];
    try {
      for (const row of rows) {
        await t.step(row.name, async () => {
          const added = await runTool("ip", ["netns", "add", row.namespace]);
          assert.ok(added.success, added.stderr);
          // `ip netns exec` execs: the child is sleep, in the namespace.
          const child = new Deno.Command("ip", {
            args: ["netns", "exec", row.namespace, "/usr/bin/sleep", "60"],
            stdout: "null",
            stderr: "null",
          }).spawn();
          try {
            while (
              (await runTool("ip", ["netns", "pids", row.namespace])).stdout.trim() !== String(child.pid)
            ) {
              await new Promise((resolve) => setTimeout(resolve, 10));
            }
            const status = {
              ...GOOD,
              stateDir,
              network: row.network(row.namespace),
              processes: [],
            } as ClusterStatus;
            assert.deepEqual(await stopCluster(stateDir, status), { stopped: [], network: "not-ours" });
            assert.notEqual(
              await commandLineOf(child.pid),
              undefined,
              "the process in the namespace runs on",
            );
            assert.ok(
              (await runTool("ip", ["netns", "pids", row.namespace])).success,
              "the namespace is left",
            );
          } finally {
            await reap(child);
            await runTool("ip", ["netns", "del", row.namespace]);
          }
        });
      }
    } finally {
      await Deno.remove(stateDir, { recursive: true });
    }
  },
});

Deno.test("supervisorRuns: the PID's process started when the status file says; files without a start time go by the command line", async () => {
  const start = await startTimeOf(Deno.pid);
  assert.ok(start);
  assert.equal(await supervisorRuns({ supervisorPid: Deno.pid, supervisorStart: start }), true);
  assert.equal(
    await supervisorRuns({ supervisorPid: Deno.pid, supervisorStart: "Thu Jan  1 00:00:00 2026" }),
    false,
  );
  assert.equal(
    await supervisorRuns({ supervisorPid: 2 ** 31 - 2, supervisorStart: start }),
    false,
    "no such process",
  );
  // This test process is no cluster up: without a start time only cluster up's command line counts.
  assert.equal(await supervisorRuns({ supervisorPid: Deno.pid }), false);
});

Deno.test({
  name: "stopCluster removes a network its run recorded by names before its kind (a crash while creating it)",
  ignore: !(await netnsAvailable()),
  async fn() {
    const stateDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "cluster-stop-early-" }));
    // What cluster up recorded when it died: the bridge and a node's namespace made, the kind not yet written.
    const network = await createNetwork({ kind: "netns", owner: stateDir });
    try {
      await network.addNode(0);
      const status = {
        ...GOOD,
        stateDir,
        network: { ...GOOD.network, kind: "loopback", hostAddress: "", ...network.names },
        processes: [],
      } as ClusterStatus;
      assert.deepEqual(await stopCluster(stateDir, status), { stopped: [], network: "removed" });
      assert.ok(!(await runTool("ip", ["link", "show", network.names.bridge])).success, "the bridge is gone");
      assert.ok(
        !(await runTool("ip", ["netns", "list"])).stdout.includes(network.names.namespaces[0]),
        "the namespace is gone",
      );
    } finally {
      await removeNetwork(network.names);
      await Deno.remove(stateDir, { recursive: true });
    }
  },
});
