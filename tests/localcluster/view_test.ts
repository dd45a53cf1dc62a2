/**
 * What `cluster up` and `cluster status` print (src/localcluster/view.ts):
 * the live view off a terminal (one line per phase change, no repeats) and
 * on one (the block redrawn in place), the node table, and the summary.
 * A fixed clock makes the elapsed times exact.
 */
import assert from "node:assert/strict";
import type { ClusterStatus, NodeStatus } from "../../src/localcluster/status.ts";
import { createLiveView, nodeTable, summary } from "../../src/localcluster/view.ts";

const CWD = "/home/op/project";
const STATE_DIR = `${CWD}/.dev/cluster`;

function node(name: string, fields: Partial<NodeStatus> = {}): NodeStatus {
  return {
    name,
    role: name.startsWith("control-plane") ? "ControlPlane" : "Worker",
    index: name.startsWith("control-plane") ? 0 : 1,
    address: name.startsWith("control-plane") ? "10.42.0.2" : "10.42.0.3",
    phase: "starting",
    log: `${STATE_DIR}/logs/${name}.log`,
    ...fields,
  };
}

function cluster(nodes: NodeStatus[], fields: Partial<ClusterStatus> = {}): ClusterStatus {
  const stateDir = fields.stateDir ?? STATE_DIR;
  return {
    state: "starting",
    stateDir,
    supervisorPid: 4242,
    network: { kind: "loopback", hostAddress: "127.0.0.1", bridge: "", namespaces: [], owner: "" },
    startedAt: "2026-01-01T00:00:00Z",
    kubeconfig: `${stateDir}/admin.conf`,
    logs: `${stateDir}/logs`,
    nodes,
    processes: [],
    ...fields,
  };
}

/** A live view with a clock the test moves by hand; `take()` is what it wrote since the last take. */
function harness(terminal: boolean) {
  let time = 1_000_000;
  let written: string[] = [];
  const all: string[] = [];
  const view = createLiveView({
    terminal,
    write: (text) => {
      written.push(text);
      all.push(text);
    },
    now: () => time,
  });
  return {
    view,
    all,
    take(): string[] {
      const taken = written;
      written = [];
      return taken;
    },
    advance(ms: number) {
      time += ms;
    },
  };
}

Deno.test("off a terminal the live view prints one line per phase change, never a repeat", () => {
  const { view, all, take, advance } = harness(false);
  view.update(cluster([node("control-plane-0"), node("worker-0")]));
  assert.deepEqual(take(), ["[0.0s] control-plane-0: starting\n", "[0.0s] worker-0: starting\n"]);
  advance(500);
  view.update(cluster([node("control-plane-0"), node("worker-0")]));
  assert.deepEqual(take(), [], "the same phases again print nothing");

  advance(1_200);
  view.update(cluster([
    node("control-plane-0", { phase: "waiting", reason: "for Init or a join service" }),
    node("worker-0"),
  ]));
  assert.deepEqual(take(), ["[1.7s] control-plane-0: waiting (for Init or a join service)\n"]);
  advance(300);
  view.update(cluster([
    node("control-plane-0", { phase: "waiting", reason: "for Init or a join service" }),
    node("worker-0", { phase: "waiting", reason: "join service unreachable" }),
  ]));
  view.update(cluster([
    node("control-plane-0", { phase: "waiting", reason: "for Init or a join service" }),
    node("worker-0", { phase: "waiting", reason: "join service unreachable" }),
  ]));
  assert.deepEqual(take(), ["[2.0s] worker-0: waiting (join service unreachable)\n"], "once, not twice");
  advance(100);
  view.update(cluster([
    node("control-plane-0", { phase: "waiting", reason: "for Init or a join service" }),
    node("worker-0", { phase: "waiting", reason: "join service unreachable again" }),
  ]));
  assert.deepEqual(
    take(),
    ["[2.1s] worker-0: waiting (join service unreachable again)\n"],
    "a new reason in the same phase is a change",
  );
  view.update(cluster([node("control-plane-0", { phase: "joined" }), node("worker-0", { phase: "joined" })], {
    state: "running",
  }));
  view.done();
  assert.deepEqual(take(), ["[2.1s] control-plane-0: joined\n", "[2.1s] worker-0: joined\n"]);
  assert.ok(all.every((text) => !text.includes("\x1b")), "no escape sequences off a terminal");
});

Deno.test("on a terminal the live view redraws the block of cluster state and node table in place", () => {
  const { view, take, advance } = harness(true);
  const starting = cluster([node("control-plane-0"), node("worker-0")]);
  view.update(starting);
  const table = nodeTable(starting.nodes);
  const block = (lines: string[]) => lines.map((line) => `\r\x1b[2K${line}\n`).join("");
  assert.deepEqual(take(), [block(["[0.0s] cluster starting", ...table])], "the first draw moves no cursor");
  assert.equal(table.length, 3, "header and two nodes");
  advance(2_500);
  const waiting = cluster([
    node("control-plane-0", { phase: "attesting" }),
    node("worker-0", { phase: "waiting", reason: "join service unreachable" }),
  ]);
  view.update(waiting);
  assert.deepEqual(take(), [`\x1b[4A${block(["[2.5s] cluster starting", ...nodeTable(waiting.nodes)])}`]);
  advance(1_000);
  view.update(waiting);
  assert.deepEqual(
    take(),
    [`\x1b[4A${block(["[3.5s] cluster starting", ...nodeTable(waiting.nodes)])}`],
    "the same phases redraw too (the clock moves)",
  );
  const grown = cluster([...waiting.nodes, node("worker-1")]);
  view.update(grown);
  const redrawn = take();
  assert.equal(redrawn.length, 1);
  assert.ok(redrawn[0].startsWith("\x1b[4A"), "up over the 4 lines drawn before");
  assert.match(redrawn[0], /worker-1\s+Worker\s+10\.42\.0\.3\s+starting\n$/);
  advance(500);
  const running = cluster(grown.nodes.map((n) => ({ ...n, phase: "joined" as const, reason: undefined })), {
    state: "running",
  });
  view.update(running);
  view.done();
  const last = `\x1b[5A${block(["[4.0s] cluster running", ...nodeTable(running.nodes)])}`;
  assert.deepEqual(take(), [last, last], "update draws, done draws the final block once more");
});

Deno.test("on a terminal the block is redrawn every second (the clock moves) until done", async () => {
  const { view, take, advance } = harness(true);
  const status = cluster([node("control-plane-0", { phase: "attesting" })]);
  view.update(status);
  take();
  advance(1_000);
  const deadline = Date.now() + 3_000;
  let redrawn: string[] = [];
  while (redrawn.length === 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    redrawn = take();
  }
  assert.deepEqual(redrawn, [
    `\x1b[3A${
      ["[1.0s] cluster starting", ...nodeTable(status.nodes)].map((l) => `\r\x1b[2K${l}\n`).join("")
    }`,
  ]);
  view.done();
  take();
  await new Promise((resolve) => setTimeout(resolve, 1_300));
  assert.deepEqual(take(), [], "nothing drawn after done");
});

Deno.test("the node table lines up name, role, address and phase with its reason", () => {
  assert.deepEqual(
    nodeTable([
      node("control-plane-0", { phase: "joined" }),
      node("worker-10", { phase: "refused", reason: "PCR[4] mismatch", address: "10.42.0.12" }),
    ]),
    [
      "NODE             ROLE          ADDRESS     PHASE",
      "control-plane-0  ControlPlane  10.42.0.2   joined",
      "worker-10        Worker        10.42.0.12  refused (PCR[4] mismatch)",
    ],
  );
});

Deno.test("the summary says how many nodes joined, where everything is and how to look inside", async (t) => {
  const verifyHint =
    /Why has (\S+) not joined\? Check its attestation:\n {2}npx deno task cli verify --node (\S+) /;
  const rows: {
    name: string;
    status: ClusterStatus;
    cwd?: string;
    want: (string | RegExp)[];
    wantNot?: (string | RegExp)[];
  }[] = [
    {
      name:
        "all joined: count and time, paths relative to the working directory, the kubectl line, no verify hint",
      status: cluster([
        node("control-plane-0", { phase: "joined" }),
        node("worker-0", { phase: "joined" }),
      ], {
        state: "running",
        upSeconds: 7.5,
        apiServer: "https://127.0.0.1:6443",
        clusterId: "ab".repeat(32),
      }),
      want: [
        "Cluster running: 2 of 2 nodes joined in 7.5 s (network: loopback).\n",
        `  cluster ID       ${"ab".repeat(32)}\n`,
        "  Kubernetes API   https://127.0.0.1:6443\n",
        "  kubeconfig       .dev/cluster/admin.conf\n",
        "  master secret    .dev/cluster/secrets/master-secret.json (recovers every disk)\n",
        "  logs             .dev/cluster/logs/\n",
        "  state            .dev/cluster/\n",
        "  kubectl --kubeconfig .dev/cluster/admin.conf get joiningnodes,secrets -n kube-system\n",
        "Stop: Ctrl-C in the terminal of `cluster up`, or `npx deno task cluster down`.\n",
      ],
      wantNot: [verifyHint, "reason", CWD],
    },
    {
      name: "a state directory outside the working directory stays absolute, and the stop command names it",
      status: cluster([node("control-plane-0", { phase: "joined" })], {
        state: "running",
        stateDir: "/tmp/c1",
      }),
      want: [
        "Cluster running: 1 of 1 nodes joined (network: loopback).\n",
        "  kubeconfig       /tmp/c1/admin.conf\n",
        "  kubectl --kubeconfig /tmp/c1/admin.conf get joiningnodes,secrets -n kube-system\n",
        "Stop: Ctrl-C in the terminal of `cluster up`, or `npx deno task cluster down --state-dir /tmp/c1`.\n",
      ],
      wantNot: [verifyHint],
    },
    {
      name: "a working directory that is only a name prefix of the state directory does not shorten it",
      status: cluster([node("control-plane-0", { phase: "joined" })], { state: "running" }),
      cwd: "/home/op/proj",
      want: [`  kubeconfig       ${STATE_DIR}/admin.conf\n`],
    },
    {
      name: "a node that has not joined and has an init endpoint gets the verify hint",
      status: cluster([
        node("control-plane-0", { phase: "joined" }),
        node("worker-0", { phase: "refused", reason: "PCR[4] mismatch", initEndpoint: "10.42.0.3:9000" }),
      ], { state: "failed", reason: "node worker-0 not joined within 300 s" }),
      want: [
        "Cluster failed: 1 of 2 nodes joined (network: loopback).\n",
        "  reason           node worker-0 not joined within 300 s\n",
        "Why has worker-0 not joined? Check its attestation:\n" +
        "  npx deno task cli verify --node 10.42.0.3:9000 --attestation-config .dev/cluster/attestation-config.json\n",
      ],
    },
    {
      name: "a node that has not joined but has no init endpoint (its bootstrapper ended) gets no hint",
      status: cluster([
        node("control-plane-0", { phase: "joined" }),
        node("worker-0", { phase: "failed", reason: "bootstrapper exited with status 1" }),
      ], { state: "failed" }),
      want: ["Cluster failed: 1 of 2 nodes joined (network: loopback).\n"],
      wantNot: [verifyHint],
    },
    {
      name: "a joined node with an init endpoint gets no hint",
      status: cluster([node("control-plane-0", { phase: "joined", initEndpoint: "127.0.0.1:9000" })], {
        state: "running",
      }),
      want: ["Cluster running: 1 of 1 nodes joined (network: loopback).\n"],
      wantNot: [verifyHint],
    },
    {
      name: "a netns network names its bridge and the host's address",
      status: cluster([node("control-plane-0", { phase: "joined" })], {
        state: "stopped",
        network: {
          kind: "netns",
          hostAddress: "10.42.3.1",
          bridge: "c11n3",
          namespaces: ["c11n3-node0"],
          owner: "/tmp/state",
        },
      }),
      want: ["Cluster stopped: 1 of 1 nodes joined (network: netns, bridge c11n3 at 10.42.3.1).\n"],
    },
    {
      name: "a stopped cluster that was initialized: the recover command instead of how to stop",
      status: cluster([node("control-plane-0", { phase: "joined" })], {
        state: "stopped",
        clusterId: "ab".repeat(32),
      }),
      want: ["Bring it back: npx deno task cluster recover\n"],
      wantNot: ["Stop:"],
    },
    {
      name: "a cluster that failed before its init: neither how to stop nor to recover",
      status: cluster([node("control-plane-0", { phase: "failed" })], { state: "failed" }),
      want: ["Cluster failed: 0 of 1 nodes joined"],
      wantNot: ["Stop:", "Bring it back"],
    },
    {
      name: "a control plane serving a recovery gets the cli recover line",
      status: cluster([
        node("control-plane-0", {
          phase: "waiting",
          reason: "for a join service, or the operator's recovery (cli recover)",
          recoveryEndpoint: "10.42.0.2:9999",
        }),
      ], { state: "starting", clusterId: "ab".repeat(32) }),
      want: [
        "control-plane-0 waits for a join service or the operator's recovery:\n" +
        "  npx deno task cli recover --node 10.42.0.2:9999 --master-secret .dev/cluster/secrets/master-secret.json" +
        " --attestation-config .dev/cluster/attestation-config.json\n",
        "Stop: Ctrl-C",
      ],
      wantNot: [verifyHint, "Bring it back"],
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      const text = summary(row.status, row.cwd ?? CWD);
      for (const want of row.want) {
        if (typeof want === "string") {
          assert.ok(text.includes(want), `missing ${JSON.stringify(want)} in:\n${text}`);
        } else assert.match(text, want);
      }
      for (const unwanted of row.wantNot ?? []) {
        if (typeof unwanted === "string") {
          assert.ok(!text.includes(unwanted), `unexpected ${JSON.stringify(unwanted)} in:\n${text}`);
        } else assert.doesNotMatch(text, unwanted);
      }
    });
  }
});
