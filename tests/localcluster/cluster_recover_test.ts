/**
 * `recoverLocalCluster` (src/localcluster/cluster.ts) on a loopback cluster
 * of real processes: a recovery stopped midway leaves no process behind and
 * does not spoil the next one; a node that never joined stays off, and a
 * node added after the recovery does not take its name.
 */
import assert from "node:assert/strict";
import {
  type LocalCluster,
  recoverableNodes,
  recoverLocalCluster,
  startLocalCluster,
} from "../../src/localcluster/cluster.ts";
import { readStatus } from "../../src/localcluster/status.ts";
import { runToExit } from "../../src/os/service_process.ts";
import { printLogTails } from "../support/fresh_local_cluster.ts";

/** Whether process `pid` exists: `ps -o pid= -p <pid>`. */
async function alive(pid: number): Promise<boolean> {
  const result = await runToExit("ps", ["-o", "pid=", "-p", String(pid)]);
  return result.code === 0 && result.stdoutLines.some((line) => line.trim() === String(pid));
}

Deno.test("a recovery stopped midway leaves nothing running; the next one brings the joined nodes back", async (t) => {
  const stateDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "cluster-recover-" }));
  let running: LocalCluster | undefined;
  let failed = false;
  const step = async (name: string, fn: () => Promise<void>) => {
    if (!(await t.step(name, fn))) failed = true;
  };
  try {
    running = await startLocalCluster({ stateDir, controlPlanes: 1, workers: 1, network: "loopback" });
    // A node the operator does not trust: refused, its disk never initialized.
    const refused = await running.addNode({ role: "Worker", trusted: false });
    assert.equal(refused.name, "worker-1");
    await running.waitForPhase(refused.name, ["refused"], 30_000);
    const clusterId = running.status.clusterId;
    await running.close();
    running = undefined;

    await step(
      "stopped while the workers rejoin: it rejects as stopped, and no process it started runs",
      async () => {
        const stop = new AbortController();
        const pids = new Set<number>();
        const recovering = recoverLocalCluster({
          stateDir,
          signal: stop.signal,
          onChange: (status) => {
            for (const record of status.processes) pids.add(record.pid);
            // The control plane was recovered and serves joins: the workers rejoin now.
            if (status.nodes.some((node) => node.joinServiceEndpoint !== undefined)) stop.abort();
          },
        });
        await assert.rejects(recovering, (error: Error) => {
          assert.doesNotMatch(error.message, /failed/, "a stop is not reported as a node's failure");
          return true;
        });
        assert.ok(stop.signal.aborted, "it was stopped where the test meant to");
        const status = await readStatus(stateDir);
        assert.equal(status?.state, "stopped");
        assert.deepEqual(status?.processes, []);
        assert.ok(!status?.nodes.some((node) => node.phase === "failed"), JSON.stringify(status?.nodes));
        for (const pid of pids) assert.equal(await alive(pid), false, `process ${pid} still runs`);
      },
    );

    await step("the next recovery brings back the joined nodes and leaves the refused one off", async () => {
      running = await recoverLocalCluster({ stateDir });
      assert.equal(running.status.clusterId, clusterId);
      assert.deepEqual(running.nodes().map((node) => [node.name, node.status.phase]), [
        ["control-plane-0", "joined"],
        ["worker-0", "joined"],
      ]);
    });

    await step(
      "a node added after the recovery takes neither a left-out node's name nor its files",
      async () => {
        const node = await running!.addNode({ role: "Worker" });
        assert.equal(node.name, "worker-2");
        await running!.waitForPhase(node.name, ["joined"], 30_000);
      },
    );
  } finally {
    await running?.close();
    if (failed) await printLogTails(`${stateDir}/logs`);
    await Deno.remove(stateDir, { recursive: true });
  }
});

Deno.test("recoverableNodes skips nodes never recorded and names a node record it cannot read", async () => {
  const stateDir = await Deno.makeTempDir({ prefix: "cluster-nodes-" });
  try {
    await Deno.mkdir(`${stateDir}/nodes/worker-0`, { recursive: true }); // created, never recorded
    assert.deepEqual(await recoverableNodes(stateDir), []);
    for (
      const [text, want] of [
        ['{"role": "Worker", "index": ', /node\.json: not JSON: Unexpected end of JSON input$/],
        [
          '{"role": "Boss", "index": 1}',
          /node\.json: want \{"role": "ControlPlane" or "Worker", "index": <n>\}$/,
        ],
        ['{"role": "Worker", "index": -1}', /node\.json: want/],
      ] as const
    ) {
      await Deno.writeTextFile(`${stateDir}/nodes/worker-0/node.json`, text);
      await assert.rejects(recoverableNodes(stateDir), want);
    }
  } finally {
    await Deno.remove(stateDir, { recursive: true });
  }
});
