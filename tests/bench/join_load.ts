/**
 * Join service load benchmark (part of `deno task bench`).
 *
 * Drives the real join service process with worker join tickets at 1, 16,
 * 128 and 512 concurrent joiners, next to the key service and the local
 * Kubernetes API in their own processes (`join_load_cluster.ts`), and reports
 * per level: tickets per second, p50/p99 latency of `IssueJoinTicket`, the
 * ratio of the throughput to the crypto floor, the CPU time each process
 * spent per ticket, and the join service's peak RSS.
 *
 * **The floor** is what one ticket's unavoidable crypto costs the join
 * service on one core (quote and CSR signature verification, kubelet
 * certificate signature, nonce MAC, digests, HPKE seal), one operation at a
 * time, as CPU time, measured right before and right after each level (the
 * mean of the two) in a process of its own held to one core
 * (`crypto_floor.ts`, which says why). It is done with
 * the service's own functions (`seal`, the nonces, the digests), so making
 * those cheaper lowers the floor too. Besides the
 * measured ratio, each level gives the ratio the three services would reach
 * with the machine to themselves (cores ÷ their CPU per ticket ÷ floor):
 * the load generator and other sessions share this machine's two cores.
 *
 * **The load generator is not the service.** Before each level's timed
 * window every request is prepared: a challenge from the join service, a
 * CSR, and evidence forged in this process with the allow-listed software
 * attestation key, and encoded. In the window each joiner only sends its
 * requests, one after the other, over one of up to 32 connections (joiners
 * are nodes; most have their own), as gRPC calls without an RPC framework
 * (`grpc_unary_client.ts`: Connect's client cost the load generator twice
 * the CPU per ticket). What sending cost this process is reported as its own
 * CPU time per ticket, and everything the machine did besides the four
 * processes as "others" (other sessions share the 2 cores).
 *
 * **Nodes that join once.** The levels are closed loops: each joiner sends
 * its next request as soon as the last is answered, so 16 joiners keep 16
 * calls in flight for the whole window, and the latency is 16 ÷ throughput
 * (Little's law). A real node joins once. So each round also measures a
 * burst of 16 nodes that join at the same moment, once each, each over a new
 * connection of its own (its TLS handshake included), their requests
 * prepared beforehand like the levels': the latency each node waits, from
 * opening its connection to its ticket.
 *
 * Every level runs `--rounds` times (default 3); the summary gives the median
 * and the range. `--levels 16,128` runs only those levels (for A/B runs). The
 * join service's CPU is also split by thread: the main thread (the event loop),
 * V8's workers (garbage collection) and the rest (WebCrypto's thread pool). The figures are written to `bench-results/join_load.json`
 * (`--out`). `--cpu-prof-dir DIR` runs the join service under `--cpu-prof`;
 * its profile is written there when the benchmark stops it.
 *
 * ```sh
 * deno run -P=tests --no-prompt tests/bench/join_load.ts [--rounds 3] [--levels 1,16,128,512] [--out FILE]
 *   [--cpu-prof-dir DIR]
 * ```
 *
 * @module
 */
import { machineFigures, writeResults } from "./results.ts";
import { Code, ConnectError } from "@connectrpc/connect";
import { measureCryptoFloor } from "./crypto_floor.ts";
import { parseCount, parseFlags } from "../../src/flags/flags.ts";
import {
  API,
  IssueJoinTicketRequestSchema,
  type IssueJoinTicketResponse,
  IssueJoinTicketResponseSchema,
} from "../../src/gen/join/join_pb.ts";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { GrpcUnaryClient } from "./grpc_unary_client.ts";
import { grpcMessage } from "../support/h2_frames.ts";
import { generateNodeKeys, nodeCsr } from "../support/join_cluster.ts";
import { type AttestedJoinRequest, attestedJoinRequest, openJoinTicket } from "../support/join_request.ts";
import {
  machineCpuSeconds,
  processCpuSeconds,
  processMemory,
  processThreadCpuSeconds,
  type ThreadCpuSeconds,
} from "../support/process_stats.ts";
import { startLoadCluster } from "./join_load_cluster.ts";
import { percentile } from "./stats.ts";

/** Concurrent joiners, and how many tickets they ask for in one timed window. */
const ALL_LEVELS = [
  { joiners: 1, tickets: 48 },
  { joiners: 16, tickets: 320 },
  { joiners: 128, tickets: 1024 },
  { joiners: 512, tickets: 2048 },
];
/** Nodes of the join-once burst (see the module documentation). */
const BURST_NODES = 16;
/** Run before the first round and not reported: JIT, connections, caches. */
const WARM_UP = { joiners: 16, tickets: 160 };
/** Most connections the joiners share. */
const MAX_CONNECTIONS = 32;
/** The issue's targets. */
const TARGETS = { floorRatioAt128: 0.7, p99MsAt16: 25, peakRssMiBAt512: 150 };

const flags = parseFlags(Deno.args, {
  rounds: { type: "string", default: "3" },
  levels: { type: "string", default: ALL_LEVELS.map((level) => level.joiners).join(",") },
  out: { type: "string", default: "bench-results/join_load.json" },
  "cpu-prof-dir": { type: "string", default: "" },
}, "join load benchmark");
const rounds = parseCount(flags.rounds, "--rounds");
const LEVELS = flags.levels.split(",").map((joiners) => {
  const level = ALL_LEVELS.find((level) => String(level.joiners) === joiners.trim());
  if (!level) {
    throw new Error(`--levels: no level of ${joiners} joiners (${ALL_LEVELS.map((l) => l.joiners)})`);
  }
  return level;
});
const cpuProfDir = flags["cpu-prof-dir"];
if (cpuProfDir) await Deno.mkdir(cpuProfDir, { recursive: true });

await using cluster = await startLoadCluster({
  joinServiceFlags: [
    ...["--rate-per-peer", "100000", "--burst-per-peer", "100000"],
    ...["--rate-global", "100000", "--burst-global", "100000"],
    ...["--verify-queue", "4096"],
    // The joiners are nodes, all on one address here: 32 connections that send, 32 that prepare, and
    // the join-once bursts' new ones would pass the default 64 per address.
    ...["--max-connections-per-peer", "1024"],
    // Requests are prepared before a level's window; their challenges must outlive it.
    ...["--nonce-lifetime", "600"],
    // At 512 joiners on a machine other sessions keep busy, a call can wait longer than the default
    // 30 s deadline (which is there for slow clients, not for a queue); the benchmark measures the queue.
    ...["--request-timeout", "300"],
  ],
  joinServiceDenoFlags: cpuProfDir ? ["--cpu-prof", `--cpu-prof-dir=${await Deno.realPath(cpuProfDir)}`] : [],
});
const nodes = Array.from({ length: MAX_CONNECTIONS }, () => cluster.connect().client);
/** The joiners' connections for the timed window (see `grpc_unary_client.ts`), the service's deadline long. */
const senders = Array.from(
  { length: MAX_CONNECTIONS },
  () => new GrpcUnaryClient(cluster.joinService.url, cluster.joinCaPem, 300_000),
);
const ISSUE_JOIN_TICKET = `/${API.typeName}/${API.method.issueJoinTicket.name}`;
/** One kubelet key for every CSR: the nodes' own key generation is no part of the service's work. */
const kubeletKeys = await generateNodeKeys();

/** CPU seconds so far of each process, and of the whole machine. */
interface CpuSnapshot {
  join: number;
  joinThreads: ThreadCpuSeconds;
  key: number;
  api: number;
  client: number;
  machine: number;
}
type Process = Exclude<keyof CpuSnapshot, "machine" | "joinThreads">;
const PROCESSES: Process[] = ["join", "key", "api", "client"];

async function cpuSnapshot(): Promise<CpuSnapshot> {
  const [joinThreads, join, key, api, client, machine] = await Promise.all([
    processThreadCpuSeconds(cluster.joinService.process.pid),
    processCpuSeconds(cluster.joinService.process.pid),
    processCpuSeconds(cluster.keyService.process!.pid),
    processCpuSeconds(cluster.localApi.pid),
    processCpuSeconds(Deno.pid),
    machineCpuSeconds(),
  ]);
  return { join, joinThreads, key, api, client, machine };
}

/** One level of one round. */
interface LevelResult {
  round: number;
  joiners: number;
  tickets: number;
  seconds: number;
  ticketsPerSecond: number;
  /**
   * The crypto floor measured right before and right after the level (their
   * mean), as tickets per second on one core: this machine's speed drifts by
   * up to 15 % from one minute to the next.
   */
  floorPerSecond: number;
  /** The two floors' CPU ms, before and after the level. */
  floorMsBeforeAfter: [number, number];
  /** Tickets per second ÷ floor per second. */
  floorRatio: number;
  /**
   * The ratio if the machine ran only the three services, all cores theirs:
   * cores ÷ (join + key + API CPU per ticket) ÷ floor per second. Leaves out
   * the load generator and other sessions, which share this machine but
   * would not share a cluster's control plane.
   */
  servicesOnlyFloorRatio: number;
  /**
   * The floor's CPU time ÷ the join service's CPU time per ticket: the share of
   * the service's work that is the crypto it cannot do without, whatever else
   * the machine runs.
   */
  floorShareOfJoinCpu: number;
  p50Ms: number;
  p99Ms: number;
  /** CPU ms per ticket in the timed window, by process; "others" is the rest of the machine. */
  cpuMsPerTicket: Record<Process | "others", number>;
  /** The join service's CPU ms per ticket by thread kind (`processThreadCpuSeconds`). */
  joinThreadCpuMsPerTicket: ThreadCpuSeconds;
  /** This process's CPU ms per request for preparing it (challenge, CSR, evidence), before the window. */
  prepareCpuMsPerRequest: number;
  /** The join service's VmHWM after the level (it never goes down). */
  joinServicePeakRssMiB: number;
  joinServiceRssMiB: number;
}

console.log(
  `join service load: qemu-vtpm evidence from an allow-listed software AK, worker tickets, ` +
    `${Deno.build.os} ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}, ${rounds} round(s), ` +
    `load average ${Deno.loadavg().map((n) => n.toFixed(1)).join(" ")}`,
);
await runLevel(WARM_UP, 0);
console.log(
  "round  joiners  tickets  tickets/s  floor/s  ratio  p50 ms  p99 ms | CPU ms/ticket: join   key   api client others " +
    "| join: main   V8 other | RSS MiB peak",
);
const results: LevelResult[] = [];
const bursts: BurstResult[] = [];
for (let round = 1; round <= rounds; round++) {
  for (const level of LEVELS) {
    const result = await runLevel(level, round);
    results.push(result);
    console.log(row(result));
  }
  bursts.push(await runBurst(BURST_NODES, round));
}
console.log(`\n${BURST_NODES} nodes joining once, at the same moment, each over a new connection:`);
console.log("round  p50 ms  p99 ms  (slowest node)  join CPU ms/ticket");
for (const b of bursts) {
  console.log(
    [
      String(b.round).padStart(5),
      b.p50Ms.toFixed(1).padStart(7),
      b.p99Ms.toFixed(1).padStart(7),
      " ".repeat(15),
      b.joinCpuMsPerTicket.toFixed(2).padStart(18),
    ].join(" "),
  );
}
const burstSummary = {
  nodes: BURST_NODES,
  p50Ms: spreadOf(bursts.map((b) => b.p50Ms)),
  p99Ms: spreadOf(bursts.map((b) => b.p99Ms)),
  joinCpuMsPerTicket: spreadOf(bursts.map((b) => b.joinCpuMsPerTicket)),
};

const summary = LEVELS.map((level) => summarize(results.filter((r) => r.joiners === level.joiners)));
console.log(`\nsummary: median (min–max) over ${rounds} round(s)`);
console.log(
  "joiners  tickets/s            ratio to floor    p50 ms                 p99 ms                 " +
    "join CPU ms/ticket   floor/join CPU    peak RSS MiB  services-only ratio",
);
for (const s of summary) {
  console.log(
    [
      String(s.joiners).padStart(7),
      spread(s.ticketsPerSecond, 1).padEnd(20),
      spread(s.floorRatio, 2).padEnd(17),
      spread(s.p50Ms, 1).padEnd(22),
      spread(s.p99Ms, 1).padEnd(22),
      spread(s.joinCpuMsPerTicket, 2).padEnd(20),
      spread(s.floorShareOfJoinCpu, 2).padEnd(17),
      s.joinServicePeakRssMiB.toFixed(0).padEnd(13),
      spread(s.servicesOnlyFloorRatio, 2),
    ].join(" "),
  );
}

const at = (joiners: number) => summary.find((s) => s.joiners === joiners);
const floorMs = 1000 / median(results.map((r) => r.floorPerSecond));
const targets = [
  at(128) && {
    target: `throughput ≥ ${TARGETS.floorRatioAt128} of the crypto floor at 128 joiners`,
    measured: at(128)!.floorRatio.median,
    met: at(128)!.floorRatio.median >= TARGETS.floorRatioAt128,
    note: `with the machine to the three services alone (no load generator, no other sessions), ` +
      `${at(128)!.servicesOnlyFloorRatio.median.toFixed(2)}`,
  },
  at(16) && {
    target: `p99 ≤ ${TARGETS.p99MsAt16} ms at 16 joiners`,
    measured: at(16)!.p99Ms.median,
    met: at(16)!.p99Ms.median <= TARGETS.p99MsAt16,
    // 16 requests always in flight, each needing at least the floor's CPU, on all cores: Little's law.
    note: `16 joiners with no pause between requests keep 16 in flight: even if a ticket cost only the ` +
      `floor (${floorMs.toFixed(2)} ms CPU) and used all ${navigator.hardwareConcurrency} cores, the mean ` +
      `latency would be ${(16 * floorMs / navigator.hardwareConcurrency).toFixed(1)} ms; ` +
      `16 nodes joining once at the same moment: p99 ${burstSummary.p99Ms.median.toFixed(1)} ms`,
  },
  at(512) && {
    target: `join service peak RSS ≤ ${TARGETS.peakRssMiBAt512} MiB at 512 joiners`,
    measured: at(512)!.joinServicePeakRssMiB,
    met: at(512)!.joinServicePeakRssMiB <= TARGETS.peakRssMiBAt512,
  },
].filter((target) => target !== undefined);
console.log("\ntargets:");
for (const t of targets) {
  console.log(
    `  ${t.met ? "met    " : "not met"}  ${t.target}: ${t.measured.toFixed(2)}${
      "note" in t ? ` (${t.note})` : ""
    }`,
  );
}

console.log("\nwhere a ticket's time goes (join service /metrics, all levels and rounds, mean ms per call):");
const breakdown = await latencyBreakdown();
for (const [name, ms] of Object.entries(breakdown)) console.log(`  ${name.padEnd(64)} ${ms.toFixed(2)}`);

const floor = await measureCryptoFloor();
console.log("\nthe crypto floor of one ticket on one core (once more, at the end):");
for (const [name, ms] of Object.entries(floor.parts)) console.log(`  ${name.padEnd(52)} ${ms.toFixed(3)} ms`);
console.log(
  `  ${"total".padEnd(52)} ${floor.totalMs.toFixed(3)} ms = ${(1000 / floor.totalMs).toFixed(0)}/s`,
);

console.log();
await writeResults(flags.out, {
  date: new Date().toISOString(),
  machine: machineFigures({ loadAverageAtEnd: Deno.loadavg() }),
  levels: LEVELS,
  rounds,
  summary,
  joinOnceBurst: { summary: burstSummary, results: bursts },
  targets,
  latencyBreakdownMs: breakdown,
  floorAtEnd: floor,
  results,
});

/** Prepares `level.tickets` requests, then sends them from `level.joiners` joiners, timed. */
async function runLevel(level: { joiners: number; tickets: number }, round: number): Promise<LevelResult> {
  const floorBefore = (await measureCryptoFloor()).totalMs;

  const preparing = await processCpuSeconds(Deno.pid);
  const prepared = await prepare(level.tickets, `r${round}-j${level.joiners}`);
  const prepareCpuMsPerRequest = (await processCpuSeconds(Deno.pid) - preparing) * 1000 / level.tickets;

  const latencies: number[] = [];
  let sample: { response: IssueJoinTicketResponse; request: AttestedJoinRequest } | undefined;
  const bodies = prepared.map(({ request }) => grpcMessage(toBinary(IssueJoinTicketRequestSchema, request)));
  let next = 0;
  const before = await cpuSnapshot();
  const started = performance.now();
  await Promise.all(Array.from({ length: level.joiners }, async (_, joiner) => {
    const sender = senders[joiner % senders.length];
    while (next < prepared.length) {
      const index = next++;
      const t = performance.now();
      const response = fromBinary(
        IssueJoinTicketResponseSchema,
        await sender.call(ISSUE_JOIN_TICKET, bodies[index]),
      );
      latencies.push(performance.now() - t);
      if (!response.sealed) throw new ConnectError("ticket without sealed payload", Code.Internal);
      sample ??= { response, request: prepared[index] };
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  const after = await cpuSnapshot();
  const memory = await processMemory(cluster.joinService.process.pid);
  const floorAfter = (await measureCryptoFloor()).totalMs;
  const floorPerSecond = 2000 / (floorBefore + floorAfter);

  // The tickets are real: one is opened and checked, outside the timed window.
  const ticket = await openJoinTicket(sample!.response, sample!.request.bundle);
  if (ticket.stateDiskKey.length !== 32 || !ticket.token || ticket.kubeletCert.length === 0) {
    throw new Error("ticket incomplete");
  }

  latencies.sort((a, b) => a - b);
  const perTicket = (seconds: number) => seconds * 1000 / level.tickets;
  const cpu = Object.fromEntries(PROCESSES.map((p) => [p, perTicket(after[p] - before[p])])) as Record<
    Process,
    number
  >;
  const ours = PROCESSES.reduce((sum, p) => sum + after[p] - before[p], 0);
  const ticketsPerSecond = level.tickets / seconds;
  return {
    round,
    joiners: level.joiners,
    tickets: level.tickets,
    seconds,
    ticketsPerSecond,
    floorPerSecond,
    floorMsBeforeAfter: [floorBefore, floorAfter],
    floorRatio: ticketsPerSecond / floorPerSecond,
    servicesOnlyFloorRatio: navigator.hardwareConcurrency * 1000 / (cpu.join + cpu.key + cpu.api) /
      floorPerSecond,
    floorShareOfJoinCpu: 1000 / floorPerSecond / cpu.join,
    p50Ms: percentile(latencies, 0.5),
    p99Ms: percentile(latencies, 0.99),
    cpuMsPerTicket: { ...cpu, others: Math.max(0, perTicket(after.machine - before.machine - ours)) },
    joinThreadCpuMsPerTicket: {
      main: perTicket(after.joinThreads.main - before.joinThreads.main),
      v8Workers: perTicket(after.joinThreads.v8Workers - before.joinThreads.v8Workers),
      others: perTicket(after.joinThreads.others - before.joinThreads.others),
    },
    prepareCpuMsPerRequest,
    joinServicePeakRssMiB: memory.peakRssBytes / 2 ** 20,
    joinServiceRssMiB: memory.rssBytes / 2 ** 20,
  };
}

/** One join-once burst. */
interface BurstResult {
  round: number;
  nodes: number;
  p50Ms: number;
  /** With 16 nodes, the slowest node's. */
  p99Ms: number;
  /** The join service's CPU ms per ticket, TLS handshakes included. */
  joinCpuMsPerTicket: number;
}

/**
 * `nodes` nodes that join at the same moment, once each, each over a new
 * connection; requests prepared beforehand.
 */
async function runBurst(nodes: number, round: number): Promise<BurstResult> {
  const prepared = await prepare(nodes, `r${round}-burst`);
  const clients = prepared.map(() => cluster.connect().client);
  const before = await processCpuSeconds(cluster.joinService.process.pid);
  const latencies = await Promise.all(prepared.map(async ({ request }, node) => {
    const t = performance.now();
    const response = await clients[node].issueJoinTicket(request);
    if (!response.sealed) throw new ConnectError("ticket without sealed payload", Code.Internal);
    return performance.now() - t;
  }));
  const after = await processCpuSeconds(cluster.joinService.process.pid);
  latencies.sort((a, b) => a - b);
  return {
    round,
    nodes,
    p50Ms: percentile(latencies, 0.5),
    p99Ms: percentile(latencies, 0.99),
    joinCpuMsPerTicket: (after - before) * 1000 / nodes,
  };
}

/**
 * `count` join requests as nodes make them (challenge, CSR, evidence bound
 * to both), 16 at a time over the joiners' connections.
 */
async function prepare(count: number, prefix: string): Promise<AttestedJoinRequest[]> {
  const prepared: AttestedJoinRequest[] = new Array(count);
  let next = 0;
  await Promise.all(Array.from({ length: 16 }, async (_, worker) => {
    for (let i = next++; i < count; i = next++) {
      const nodeName = `worker-${prefix}-${i}`;
      prepared[i] = await attestedJoinRequest({
        issuer: cluster.issuer,
        client: nodes[worker % nodes.length],
        diskUuid: crypto.randomUUID(),
        certificateRequest: await nodeCsr({
          nodeName,
          ips: [`10.1.${i >> 8}.${i & 255}`],
          keys: kubeletKeys,
        }),
      });
    }
  }));
  return prepared;
}

interface Spread {
  median: number;
  min: number;
  max: number;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

function spreadOf(values: number[]): Spread {
  return { median: median(values), min: Math.min(...values), max: Math.max(...values) };
}

function spread(s: Spread, digits: number): string {
  return `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`;
}

function summarize(levelResults: LevelResult[]) {
  return {
    joiners: levelResults[0].joiners,
    ticketsPerSecond: spreadOf(levelResults.map((r) => r.ticketsPerSecond)),
    floorPerSecond: spreadOf(levelResults.map((r) => r.floorPerSecond)),
    floorRatio: spreadOf(levelResults.map((r) => r.floorRatio)),
    floorShareOfJoinCpu: spreadOf(levelResults.map((r) => r.floorShareOfJoinCpu)),
    servicesOnlyFloorRatio: spreadOf(levelResults.map((r) => r.servicesOnlyFloorRatio)),
    p50Ms: spreadOf(levelResults.map((r) => r.p50Ms)),
    p99Ms: spreadOf(levelResults.map((r) => r.p99Ms)),
    joinCpuMsPerTicket: spreadOf(levelResults.map((r) => r.cpuMsPerTicket.join)),
    joinThreadCpuMsPerTicket: {
      main: median(levelResults.map((r) => r.joinThreadCpuMsPerTicket.main)),
      v8Workers: median(levelResults.map((r) => r.joinThreadCpuMsPerTicket.v8Workers)),
      others: median(levelResults.map((r) => r.joinThreadCpuMsPerTicket.others)),
    },
    cpuMsPerTicket: Object.fromEntries(
      [...PROCESSES, "others" as const].map((p) => [p, median(levelResults.map((r) => r.cpuMsPerTicket[p]))]),
    ),
    prepareCpuMsPerRequest: median(levelResults.map((r) => r.prepareCpuMsPerRequest)),
    joinServicePeakRssMiB: Math.max(...levelResults.map((r) => r.joinServicePeakRssMiB)),
  };
}

function row(r: LevelResult): string {
  const cpu = [...PROCESSES, "others" as const].map((p) => r.cpuMsPerTicket[p].toFixed(2).padStart(5));
  const { main, v8Workers, others } = r.joinThreadCpuMsPerTicket;
  const threads = [main, v8Workers, others].map((ms) => ms.toFixed(2).padStart(5));
  return [
    String(r.round).padStart(5),
    String(r.joiners).padStart(8),
    String(r.tickets).padStart(8),
    r.ticketsPerSecond.toFixed(1).padStart(10),
    r.floorPerSecond.toFixed(0).padStart(8),
    r.floorRatio.toFixed(2).padStart(6),
    r.p50Ms.toFixed(1).padStart(7),
    r.p99Ms.toFixed(1).padStart(7),
    `|${" ".repeat(15)}${cpu.join(" ")} |`,
    `${" ".repeat(5)}${threads.join(" ")} |`,
    r.joinServicePeakRssMiB.toFixed(0).padStart(12),
  ].join(" ");
}

/** Mean ms per call of each latency histogram of the join service's /metrics. */
async function latencyBreakdown(): Promise<Record<string, number>> {
  const metrics = await (await fetch(`${cluster.joinService.metricsUrl}/metrics`)).text();
  const means: Record<string, number> = {};
  for (const [, name, labels, sum] of metrics.matchAll(/^(join_\w+_seconds)_sum\{([^}]*)\} (\S+)$/gm)) {
    const escaped = labels.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    const count = new RegExp(`^${name}_count\\{${escaped}\\} (\\S+)$`, "m").exec(metrics)?.[1];
    means[`${name.replace(/^join_|_seconds$/g, "")} ${labels}`] = Number(sum) / Number(count) * 1000;
  }
  return means;
}
