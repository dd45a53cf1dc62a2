/**
 * readStatus (src/localcluster/status.ts): a status file of the wrong shape
 * is named as such, never a JavaScript error from deep inside a command.
 */
import assert from "node:assert/strict";
import { readStatus } from "../../src/localcluster/status.ts";

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
