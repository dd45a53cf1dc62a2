/**
 * src/localcluster/status.ts: readStatus names a status file of the wrong
 * shape as such, never a JavaScript error from deep inside a command;
 * stopCluster signals only this cluster's processes, told by their command
 * lines (namesPath) and, for cluster up, by when it started.
 */
import assert from "node:assert/strict";
import { commandLineOf, startTimeOf } from "../../src/os/processes.ts";
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

Deno.test("readStatus reads a status file and names one of the wrong shape", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "cluster-status-" });
  try {
    const rows: { name: string; text: string; want: "ok" | RegExp }[] = [
      { name: "a status file", text: JSON.stringify(GOOD), want: "ok" },
      { name: "not JSON", text: "{", want: /is not a cluster status file \(not JSON\)/ },
      { name: "a JSON array", text: "[]", want: /\(not a JSON object\)/ },
      {
        name: "nodes not a list",
        text: JSON.stringify({ ...GOOD, nodes: "x" }),
        want: /\(nodes is not a list/,
      },
      {
        name: "a process without a PID",
        text: JSON.stringify({ ...GOOD, processes: [{ name: "x" }] }),
        want: /\(processes is not a list of processes\)/,
      },
      { name: "no network", text: JSON.stringify({ ...GOOD, network: undefined }), want: /\(no network\)/ },
    ];
    for (const row of rows) {
      await t.step(row.name, async () => {
        await Deno.writeTextFile(`${dir}/cluster.json`, row.text);
        if (row.want === "ok") {
          assert.equal((await readStatus(dir))?.supervisorPid, 4242);
          return;
        }
        await assert.rejects(readStatus(dir), row.want);
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

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
    assert.deepEqual(await stopCluster(status), { stopped: [ownRecord], network: "none" });
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
