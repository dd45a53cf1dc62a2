/**
 * One run of faults under load, as the CI test and the benchmark set it up
 * and end it: a load cluster with two join-service replicas and the local
 * API behind the fault proxy (a short token TTL, the token
 * cleaner every second, slowloris reaped within a fault's window), joiners
 * running the real join client, and the token ledger listing all along.
 * {@linkcode FaultRun.finish} stops the load and returns the ledger's
 * verdict, orphans counted per fault.
 *
 * @module
 */
import { type LoadCluster, startLoadCluster } from "../bench/join_load_cluster.ts";
import {
  type FaultContext,
  type FaultOutcome,
  type FaultScale,
  LOAD_STOPPED,
  orphansByFault,
  SETTLE_AFTER_STOP_MS,
  STOP_GRACE_MS,
} from "./join_faults.ts";
import { type DeliveredTicket, type Joiners, startJoiners } from "./node_joiners.ts";
import { type LedgerReport, startTokenLedger, type TokenLedger } from "./token_ledger.ts";

/** How often the local API's token cleaner runs in a fault run. */
export const CLEANUP_INTERVAL_MS = 1000;

/** Options for {@linkcode startFaultRun}. */
export interface FaultRunOptions {
  /** The join services' `--bootstrap-token-ttl`. */
  tokenTtlSeconds: number;
  /** Nodes joining at once. */
  joiners: number;
  /** The join client's pause after a round without a ticket. */
  retryIntervalMs: number;
  /** The join client's deadline per ticket request. */
  callTimeoutMs: number;
  /** How long and how hard the faults hit. */
  scale: FaultScale;
}

/** What {@linkcode FaultRun.finish} found. */
export interface FaultRunResult {
  /** Every ticket delivered: the joiners' and the faults' own clients'. */
  tickets: DeliveredTicket[];
  /** The ledger's verdict over them. */
  report: LedgerReport;
  /** Orphans per fault, and for the load's stop. */
  orphans: Record<string, number>;
  /** When the load started and stopped (`performance.now()`). */
  startedAt: number;
  stoppedAt: number;
}

/** A running fault run. Dispose it to stop every process. */
export interface FaultRun extends AsyncDisposable {
  readonly cluster: LoadCluster;
  readonly joiners: Joiners;
  readonly ledger: TokenLedger;
  /** What each fault gets. */
  readonly context: FaultContext;
  /** Stops the load (the joiners get {@linkcode STOP_GRACE_MS}) and returns the verdict. */
  finish(outcomes: readonly FaultOutcome[]): Promise<FaultRunResult>;
}

/** Starts the cluster, the ledger and the joiners. */
export async function startFaultRun(options: FaultRunOptions): Promise<FaultRun> {
  const cluster = await startLoadCluster({
    replicas: 2,
    apiFaultProxy: true,
    localApiFlags: ["--token-cleanup-interval", String(CLEANUP_INTERVAL_MS / 1000)],
    joinServiceFlags: [
      ...["--bootstrap-token-ttl", String(options.tokenTtlSeconds)],
      // Slowloris connections are reaped within a fault's window (default 120 s).
      ...["--idle-timeout", "2"],
    ],
  });
  const ledger = startTokenLedger({ list: (path) => cluster.list(path) });
  const startedAt = performance.now();
  const joiners = startJoiners({
    joiners: options.joiners,
    issuer: cluster.issuer,
    controlPlanes: cluster.joinServiceAddresses,
    port: cluster.joinServicePort,
    retryIntervalMs: options.retryIntervalMs,
    callTimeoutMs: options.callTimeoutMs,
  });
  const context: FaultContext = { cluster, joiners, extraTickets: [], scale: options.scale };
  let stopped = false;
  const stopLoad = async () => {
    if (stopped) return;
    stopped = true;
    await joiners.stop({ graceMs: STOP_GRACE_MS });
  };
  return {
    cluster,
    joiners,
    ledger,
    context,
    async finish(outcomes) {
      const stoppedAt = performance.now();
      await stopLoad();
      // Requests the joiners gave up on are still being cleaned up by the services (their tokens undone).
      await new Promise((resolve) => setTimeout(resolve, SETTLE_AFTER_STOP_MS));
      await ledger.poll();
      const stop = { fault: LOAD_STOPPED, startedAt: stoppedAt, settledAt: performance.now() };
      const tickets = [...joiners.tickets, ...context.extraTickets];
      const report = ledger.report(tickets);
      return {
        tickets,
        report,
        orphans: orphansByFault([...outcomes, stop], report.orphans),
        startedAt,
        stoppedAt,
      };
    },
    async [Symbol.asyncDispose]() {
      await stopLoad();
      await ledger.stop();
      await cluster.stop();
    },
  };
}
