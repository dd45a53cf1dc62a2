/**
 * A burst of 1,000 joining nodes through the local cluster's join service
 * (part of `deno task bench`).
 *
 * Each round starts a fresh local cluster (`startLocalCluster`, as
 * `deno task cluster up` does: one control plane on its swtpm, the local
 * Kubernetes API persisting to its state directory, the key and join
 * services as processes in the node's network namespace), trusts one
 * software attestation key, and starts `--nodes` joiners at once. Every
 * joiner is the bootstrapper's join client (`tests/support/forged_joiner.ts`):
 * a fresh kubelet key and CSR, a new TLS connection to the join service's
 * node port, `GetChallenge`, a quote over the report data forged with the
 * trusted key, `IssueJoinTicket`, the ticket opened and checked; a failed
 * round is retried after `--retry-interval` seconds (the bootstrapper's
 * default is 30). Then the real kubectl reads the token Secrets and
 * JoiningNodes, and every kubelet certificate is verified against the
 * cluster CA (`tests/support/join_burst.ts`).
 *
 * The joiners share this process's address, so the cluster's join service
 * runs with the per-peer limits of a fleet (`ONE_ADDRESS_JOIN_SERVICE_FLAGS`);
 * its global ticket rate (200/s, burst 400) is the default.
 *
 * Reported per round: seconds from the first node's start to the last
 * ticket, nodes whose first request failed and nodes without a ticket at
 * the end (by reason), join time p50/p99, each process's CPU time per
 * node, the rest of the machine's ("others": the machine is shared), and
 * the load average. Figures go to `bench-results/join_burst.json`.
 *
 * ```sh
 * deno run -P=tests --no-prompt tests/bench/join_burst.ts [--nodes 1000] [--rounds 3] [--retry-interval 1] [--out FILE]
 * ```
 *
 * @module
 */
import { parseCount, parseFlags, parsePositive } from "../../src/flags/flags.ts";
import { clusterServices, sampleProcesses } from "../support/cluster_processes.ts";
import {
  type BurstObjects,
  checkBurstObjects,
  type JoinBurstResult,
  ONE_ADDRESS_JOIN_SERVICE_FLAGS,
  runJoinBurst,
} from "../support/join_burst.ts";
import { withFreshCluster } from "../support/fresh_local_cluster.ts";
import { machineCpuSeconds, processCpuSeconds } from "../support/process_stats.ts";
import { machineFigures, writeResults } from "./results.ts";

/** The target for 1,000 nodes. */
const TARGET_SECONDS = 20;

const flags = parseFlags(Deno.args, {
  nodes: { type: "string", default: "1000" },
  rounds: { type: "string", default: "3" },
  "retry-interval": { type: "string", default: "1" },
  out: { type: "string", default: "bench-results/join_burst.json" },
}, "join burst benchmark");
const nodes = parseCount(flags.nodes, "--nodes");
const rounds = parseCount(flags.rounds, "--rounds");
const retryIntervalMs = parsePositive(flags["retry-interval"], "--retry-interval") * 1000;

/** One round's figures. */
interface Round {
  round: number;
  seconds: number;
  nodesPerSecond: number;
  burst: Omit<JoinBurstResult, "results">;
  objects: BurstObjects;
  /** Every check passed: all joined, objects and certificates complete and distinct. */
  complete: boolean;
  /** CPU ms per node in the burst, by process; "others" is the rest of the machine. */
  cpuMsPerNode: Record<string, number>;
  loadAverage: { before: number[]; after: number[] };
  /** Examples of failed attempts' messages (at most 5 distinct). */
  failureMessages: string[];
}

console.log(
  `join burst: ${nodes} nodes at once through a local cluster's join service, ${rounds} round(s), ` +
    `${Deno.build.os} ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}`,
);
console.log(
  "round  seconds  nodes/s  first-attempt failed  failed  p50 s  p99 s | CPU ms/node: join   key   api  nodes others | load before → after",
);
const results: Round[] = [];
for (let round = 1; round <= rounds; round++) {
  const result = await runRound(round);
  results.push(result);
  console.log(row(result));
}

const seconds = results.map((r) => r.seconds);
const allComplete = results.every((r) => r.complete);
console.log(
  `\n${nodes} nodes: ${seconds.map((s) => s.toFixed(1)).join(", ")} s (target ≤ ${TARGET_SECONDS} s: ${
    seconds.every((s) => s <= TARGET_SECONDS) ? "met" : "not met"
  }); ${allComplete ? "every round complete" : "INCOMPLETE rounds"}: tickets, token Secrets, JoiningNodes, ` +
    `distinct tokens and certificates, certificates signed by the cluster CA`,
);
for (const r of results.filter((r) => r.failureMessages.length > 0)) {
  console.log(`round ${r.round} failures: ${JSON.stringify(r.burst.failureReasons)}`);
  for (const message of r.failureMessages) console.log(`  ${message}`);
}

await writeResults(flags.out, {
  date: new Date().toISOString(),
  machine: machineFigures(),
  nodes,
  retryIntervalMs,
  joinServiceFlags: ONE_ADDRESS_JOIN_SERVICE_FLAGS,
  targetSeconds: TARGET_SECONDS,
  rounds: results,
});
if (!allComplete) Deno.exit(1);

function runRound(round: number): Promise<Round> {
  return withFreshCluster(ONE_ADDRESS_JOIN_SERVICE_FLAGS, async (cluster) => {
    const services = clusterServices(cluster);
    const cpu = async () => ({
      ...Object.fromEntries(
        Object.entries(await sampleProcesses(services)).map(([name, s]) => [name, s.cpuSeconds]),
      ),
      nodes: await processCpuSeconds(Deno.pid),
      machine: await machineCpuSeconds(),
    });
    const loadBefore = Deno.loadavg();
    const before = await cpu();
    const burst = await runJoinBurst({ cluster, nodes, retryIntervalMs });
    const after = await cpu();
    const loadAfter = Deno.loadavg();
    const objects = await checkBurstObjects(cluster, burst.results);
    const cpuMsPerNode: Record<string, number> = {};
    let ours = 0;
    for (const name of Object.keys(before) as (keyof typeof before)[]) {
      if (name === "machine") continue;
      ours += after[name] - before[name];
      cpuMsPerNode[name] = (after[name] - before[name]) * 1000 / nodes;
    }
    cpuMsPerNode.others = Math.max(0, (after.machine - before.machine - ours) * 1000 / nodes);
    const { results: joiners, ...figures } = burst;
    const complete = burst.finalFailures === 0 && objects.tickets === nodes &&
      objects.tokensWithSecret === nodes && objects.distinctTokens === nodes &&
      objects.joiningNodes === nodes && objects.distinctCerts === nodes && objects.certsVerified === nodes;
    return {
      round,
      seconds: burst.seconds,
      nodesPerSecond: nodes / burst.seconds,
      burst: figures,
      objects,
      complete,
      cpuMsPerNode,
      loadAverage: { before: loadBefore, after: loadAfter },
      failureMessages: [...new Set(joiners.flatMap((j) => j.lastError ?? []))].slice(0, 5),
    };
  });
}

function row(r: Round): string {
  const cpu = ["join-service", "key-service", "local-api", "nodes", "others"].map((name) =>
    r.cpuMsPerNode[name].toFixed(1).padStart(5)
  );
  const load = (values: number[]) => values.map((v) => v.toFixed(1)).join(" ");
  return [
    String(r.round).padStart(5),
    r.seconds.toFixed(1).padStart(8),
    r.nodesPerSecond.toFixed(1).padStart(8),
    String(r.burst.firstAttemptFailures).padStart(21),
    String(r.burst.finalFailures).padStart(7),
    (r.burst.joinMs.p50 / 1000).toFixed(1).padStart(6),
    (r.burst.joinMs.p99 / 1000).toFixed(1).padStart(6),
    `|${" ".repeat(12)}${cpu.join(" ")} |`,
    `${load(r.loadAverage.before)} → ${load(r.loadAverage.after)}`,
  ].join(" ");
}
