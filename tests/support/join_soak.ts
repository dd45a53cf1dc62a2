/**
 * A soak of a running local cluster's join service: nodes join at a
 * steady rate for a while, and the services' memory, open files and the
 * API's objects are sampled to show that nothing grows without bound.
 *
 * Each node is {@linkcode runForgedJoiner} (the bootstrapper's join client
 * with forged, trusted evidence). Most nodes open a new connection for
 * their request, as bootstrappers do, so connections churn; a share goes
 * over a few long-lived connections ({@linkcode reusedConnectionTickets}).
 * Node names come from a fixed pool, as a fleet whose nodes are replaced
 * and join again: the join service records one JoiningNode per name (in
 * a real cluster the node operator deletes it once the node is up; the
 * local cluster has no operator), and bootstrap tokens live until the
 * local API's token cleaner deletes them after their TTL (the cluster's
 * join services run with a short `--bootstrap-token-ttl` for this).
 *
 * Arrivals are open-loop: one node every 1/rate seconds whatever the
 * service does, at most `maxInFlight` at once (a node that would exceed
 * it is counted as skipped, so an overloaded service shows as such).
 *
 * @module
 */
import { AttestedTicketSource } from "../../src/bootstrapper/join_ticket_source.ts";
import type { LocalCluster } from "../../src/localcluster/cluster.ts";
import { joinHostPort } from "../../src/net/endpoint.ts";
import { percentile } from "../bench/stats.ts";
import {
  type ClusterProcess,
  clusterServices,
  type ProcessSample,
  sampleProcesses,
} from "./cluster_processes.ts";
import { type JoinerResult, runForgedJoiner } from "./forged_joiner.ts";
import { nodeAddress } from "./join_burst.ts";
import { kubectlNames } from "./kubectl.ts";
import { joinTargets, trustedForgedIssuer } from "./local_cluster_joiners.ts";
import { reusedConnectionTickets } from "./reused_connection_tickets.ts";
import { sleep } from "../../src/async/sleep.ts";

/** Options of {@linkcode runJoinSoak}. */
export interface JoinSoakOptions {
  /** The cluster; its join services should run with a short `--bootstrap-token-ttl`. */
  cluster: LocalCluster;
  /** How long nodes keep arriving. */
  durationMs: number;
  /** Nodes started per second. */
  ratePerSecond: number;
  /** Share of nodes whose request goes over a long-lived connection; default 0.2. */
  reuseShare?: number;
  /** Long-lived connections; default 4. */
  reusedConnections?: number;
  /** Node names cycled; default 200. */
  namePool?: number;
  /** Nodes in flight at most; default 64. */
  maxInFlight?: number;
  /** A node's pause after a failed round; default 1 s. */
  retryIntervalMs?: number;
  /** Time between samples; default 5 s. */
  sampleIntervalMs?: number;
  /** Receives each sample as it is taken. */
  onSample?: (sample: SoakSample) => void;
}

/** One reading during the soak. */
export interface SoakSample {
  /** Seconds since the soak started. */
  t: number;
  /** The services' CPU time, memory and open files. */
  processes: Record<string, ProcessSample>;
  /** Bootstrap-token Secrets in the API. */
  tokens: number;
  /** JoiningNodes in the API. */
  joiningNodes: number;
  /** Nodes that hold a ticket so far. */
  joined: number;
  /** Nodes that ended without one so far. */
  failed: number;
  /** Nodes in flight. */
  inFlight: number;
}

/** How the soak went. */
export interface JoinSoakResult {
  /** From the first arrival until the last node ended. */
  seconds: number;
  /** Nodes started. */
  started: number;
  /** Arrivals not started because `maxInFlight` nodes were in flight. */
  skipped: number;
  /** Nodes that hold a checked ticket. */
  joined: number;
  /** Nodes whose first request failed. */
  firstAttemptFailures: number;
  /** Nodes without a ticket at the end. */
  failed: number;
  /** Failed requests by reason. */
  failureReasons: Record<string, number>;
  /** Examples of failure messages (at most 5 distinct). */
  failureMessages: string[];
  /** Nodes that went over a long-lived connection. */
  overReusedConnections: number;
  /** Join time p50/p99 (ms) over the joined nodes. */
  joinMs: { p50: number; p99: number };
  /** Every sample, the first taken before the first arrival. */
  samples: SoakSample[];
}

/** Runs the soak and resolves once every node started has ended. */
export async function runJoinSoak(options: JoinSoakOptions): Promise<JoinSoakResult> {
  const { cluster } = options;
  const issuer = await trustedForgedIssuer(cluster);
  const targets = joinTargets(cluster);
  const fresh = new AttestedTicketSource({ issuer });
  const endpoint = joinHostPort(targets.controlPlanes[0].vpcIp, targets.port);
  const reused = Array.from(
    { length: options.reusedConnections ?? 4 },
    () => reusedConnectionTickets(endpoint, issuer),
  );
  const services = clusterServices(cluster);
  const reuseShare = options.reuseShare ?? 0.2;
  const namePool = options.namePool ?? 200;
  const maxInFlight = options.maxInFlight ?? 64;
  const results: JoinerResult[] = [];
  const running = new Set<Promise<void>>();
  let started = 0;
  let skipped = 0;
  let overReused = 0;
  const samples: SoakSample[] = [];
  const t0 = performance.now();
  const sample = async () => {
    const s = await takeSample(cluster, services, (performance.now() - t0) / 1000, results, running.size);
    samples.push(s);
    options.onSample?.(s);
  };
  let arriving = true;
  try {
    await sample();
    // Samples are taken beside the arrivals, so reading /proc and the API never delays a node.
    const sampler = (async () => {
      const every = options.sampleIntervalMs ?? 5_000;
      for (let next = every; arriving; next += every) {
        await sleep(Math.max(0, t0 + next - performance.now()));
        if (arriving) await sample();
      }
    })();
    const intervalMs = 1000 / options.ratePerSecond;
    for (let i = 0; (performance.now() - t0) < options.durationMs; i++) {
      await sleep(Math.max(0, t0 + i * intervalMs - performance.now()));
      if (running.size >= maxInFlight) {
        skipped++;
        continue;
      }
      const reuse = Math.random() < reuseShare;
      if (reuse) overReused++;
      started++;
      const joiner = runForgedJoiner({
        name: `soak-${i % namePool}`,
        vpcIp: nodeAddress(i % namePool),
        targets,
        tickets: reuse ? reused[i % reused.length] : fresh,
        retryIntervalMs: options.retryIntervalMs ?? 1_000,
        callTimeoutMs: 30_000,
        signal: AbortSignal.timeout(120_000),
      }).then((result) => {
        results.push(result);
        running.delete(joiner);
      });
      running.add(joiner);
    }
    arriving = false;
    await sampler;
    await Promise.all(running);
    await sample();
  } finally {
    arriving = false;
    for (const connection of reused) connection[Symbol.dispose]();
  }
  const failureReasons: Record<string, number> = {};
  for (const reason of results.flatMap((r) => r.failures)) {
    failureReasons[reason] = (failureReasons[reason] ?? 0) + 1;
  }
  const joinMs = results.filter((r) => r.joined).map((r) => r.ms).sort((a, b) => a - b);
  return {
    seconds: (performance.now() - t0) / 1000,
    started,
    skipped,
    joined: results.filter((r) => r.joined).length,
    firstAttemptFailures: results.filter((r) => !r.joined || r.failures.length > 0).length,
    failed: results.filter((r) => !r.joined).length,
    failureReasons,
    failureMessages: [...new Set(results.flatMap((r) => r.lastError ?? []))].slice(0, 5),
    overReusedConnections: overReused,
    joinMs: { p50: percentile(joinMs, 0.5), p99: percentile(joinMs, 0.99) },
    samples,
  };
}

async function takeSample(
  cluster: LocalCluster,
  services: readonly ClusterProcess[],
  t: number,
  results: readonly JoinerResult[],
  inFlight: number,
): Promise<SoakSample> {
  const [processes, secrets, joiningNodes] = await Promise.all([
    sampleProcesses(services),
    kubectlNames(cluster.paths.adminConf, ["secrets", "-n", "kube-system"]),
    kubectlNames(cluster.paths.adminConf, ["joiningnodes"]),
  ]);
  return {
    t,
    processes,
    tokens: secrets.filter((name) => name.startsWith("secret/bootstrap-token-")).length,
    joiningNodes: joiningNodes.length,
    joined: results.filter((r) => r.joined).length,
    failed: results.filter((r) => !r.joined).length,
    inFlight,
  };
}

/** Upper bounds a soak must stay within, after its warm-up. */
export interface SoakBounds {
  /** Resident set size per service, MiB. */
  rssMiB: Record<string, number>;
  /** Open file descriptors per service. */
  openFiles: number;
  /** Bootstrap-token Secrets at once. */
  tokens: number;
  /** JoiningNodes at once. */
  joiningNodes: number;
}

/**
 * The bounds a soak at `ratePerSecond` should keep: tokens at most what
 * the rate creates in one TTL plus one cleaner interval and a slack of
 * 10 s, JoiningNodes at most the name pool; the memory and open-files
 * bounds are the services' (`DEFAULT_SOAK_RSS_MIB`, 256 files).
 */
export function soakBounds(
  options: {
    ratePerSecond: number;
    tokenTtlSeconds: number;
    namePool: number;
    cleanerIntervalSeconds?: number;
  },
): SoakBounds {
  const window = options.tokenTtlSeconds + (options.cleanerIntervalSeconds ?? 10) + 10;
  return {
    rssMiB: { ...DEFAULT_SOAK_RSS_MIB },
    openFiles: 256,
    tokens: Math.ceil(options.ratePerSecond * window),
    joiningNodes: options.namePool,
  };
}

/** RSS bounds per service, MiB. */
export const DEFAULT_SOAK_RSS_MIB: Readonly<Record<string, number>> = {
  "join-service": 200,
  "key-service": 120,
  "local-api": 200,
};

/** Every way the samples exceed `bounds`, as sentences; empty when none does. */
export function boundViolations(samples: readonly SoakSample[], bounds: SoakBounds): string[] {
  const violations: string[] = [];
  for (const s of samples) {
    for (const [name, p] of Object.entries(s.processes)) {
      const rss = bounds.rssMiB[name];
      if (rss !== undefined && p.rssMiB > rss) {
        violations.push(`${name} RSS ${p.rssMiB.toFixed(0)} MiB > ${rss} MiB at ${s.t.toFixed(0)} s`);
      }
      if (p.openFiles > bounds.openFiles) {
        violations.push(`${name} has ${p.openFiles} open files > ${bounds.openFiles} at ${s.t.toFixed(0)} s`);
      }
    }
    if (s.tokens > bounds.tokens) {
      violations.push(`${s.tokens} tokens > ${bounds.tokens} at ${s.t.toFixed(0)} s`);
    }
    if (s.joiningNodes > bounds.joiningNodes) {
      violations.push(`${s.joiningNodes} JoiningNodes > ${bounds.joiningNodes} at ${s.t.toFixed(0)} s`);
    }
  }
  return violations;
}
