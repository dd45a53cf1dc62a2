/**
 * Faults while the join service is loaded, the long run (part of
 * `deno task bench`; the CI test `tests/faults/join_faults_test.ts` runs the
 * same faults shorter): joining nodes running the bootstrapper's real join
 * client keep joining two join-service replicas while each fault of
 * `tests/support/join_faults.ts` is injected in turn. Per fault it prints
 * and writes what the callers got (attempts per code, and what the fault's
 * own clients got), how long until a fresh node got a ticket after the
 * fault ended (recovery), the tokens left in the API that no ticket holds
 * (orphans, which must expire within the TTL and be deleted by the API's
 * token cleaner), and tickets without their token Secret or JoiningNode.
 *
 * ```sh
 * deno run -P=tests --no-prompt tests/bench/join_faults.ts [--joiners 16] [--window 4] [--out FILE]
 * ```
 *
 * @module
 */
import { dirname } from "node:path";
import { parseCount, parseFlags, parsePositive } from "../../src/flags/flags.ts";
import {
  ALL_FAULTS,
  type FaultContext,
  type FaultOutcome,
  LOAD_STOPPED,
  orphansByFault,
  runFault,
  SETTLE_AFTER_STOP_MS,
  STOP_GRACE_MS,
} from "../support/join_faults.ts";
import { type DeliveredTicket, startJoiners } from "../support/node_joiners.ts";
import { startTokenLedger } from "../support/token_ledger.ts";
import { startLoadCluster } from "./join_load_cluster.ts";

const flags = parseFlags(Deno.args, {
  joiners: { type: "string", default: "16" },
  window: { type: "string", default: "4" },
  "token-ttl": { type: "string", default: "30" },
  out: { type: "string", default: "bench-results/join_faults.json" },
}, "join faults benchmark");
const joinerCount = parseCount(flags.joiners, "--joiners");
const windowMs = parsePositive(flags.window, "--window") * 1000;
const tokenTtlSeconds = parseCount(flags["token-ttl"], "--token-ttl");
const CLEANUP_INTERVAL_SECONDS = 1;
/** Steady load before the first fault and between faults. */
const QUIET_MS = 3000;

await using cluster = await startLoadCluster({
  replicas: 2,
  apiFaultProxy: true,
  localApiFlags: ["--token-cleanup-interval", String(CLEANUP_INTERVAL_SECONDS)],
  joinServiceFlags: [
    ...["--bootstrap-token-ttl", String(tokenTtlSeconds)],
    // Slowloris connections are reaped within the fault's window (default 120 s).
    ...["--idle-timeout", "2"],
  ],
});
const ledger = startTokenLedger({ list: (path) => cluster.list(path) });
const joiners = startJoiners({
  joiners: joinerCount,
  issuer: cluster.issuer,
  controlPlanes: cluster.joinServiceAddresses,
  port: cluster.joinServicePort,
  retryIntervalMs: 1000,
  callTimeoutMs: 30_000,
});
const extraTickets: DeliveredTicket[] = [];
const context: FaultContext = {
  cluster,
  joiners,
  extraTickets,
  scale: { windowMs, fraction: 0.3, disconnects: 100, slowlorisConnections: 100 },
};

console.log(
  `join service faults: ${joinerCount} joiners (the bootstrapper's join client, retry every 1 s), 2 replicas, ` +
    `${windowMs / 1000} s windows, token TTL ${tokenTtlSeconds} s, ${Deno.build.os} ` +
    `${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}`,
);
const started = performance.now();
await joiners.waitForTickets(joinerCount);
await sleep(QUIET_MS);
const outcomes: FaultOutcome[] = [];
for (const fault of ALL_FAULTS) {
  const outcome = await runFault(context, fault);
  outcomes.push(outcome);
  console.log(`  ${fault.name}: done in ${((outcome.settledAt - outcome.startedAt) / 1000).toFixed(1)} s`);
  await sleep(QUIET_MS);
}
const stopping = performance.now();
await joiners.stop({ graceMs: STOP_GRACE_MS });
// Requests the joiners gave up on are still being cleaned up by the services (their tokens undone).
await new Promise((resolve) => setTimeout(resolve, SETTLE_AFTER_STOP_MS));
await ledger.poll();
const stopped = { fault: LOAD_STOPPED, startedAt: stopping, settledAt: performance.now() };
const tickets = [...joiners.tickets, ...extraTickets];
const report = ledger.report(tickets);
const orphans = orphansByFault([...outcomes, stopped], report.orphans);
console.log(`waiting for the orphans' TTL and the token cleaner (${report.orphans.length} orphans) …`);
const left = await ledger.waitForCleaner(CLEANUP_INTERVAL_SECONDS * 1000, report.orphans);
await ledger.stop();
const orphanLifetimes = report.orphans.map((o) => o.lifetimeMs);

/** Delivered tickets of a fault's time that lack their token or JoiningNode. */
const broken = (outcome: FaultOutcome, names: readonly string[]) => {
  const during = new Set(
    tickets.filter((t) => t.at >= outcome.startedAt && t.at <= outcome.settledAt).map((t) => t.nodeName),
  );
  return names.filter((name) => during.has(name)).length;
};
const rows = outcomes.map((outcome) => ({
  fault: outcome.fault,
  callers: outcome.callers,
  failures: outcome.failures,
  messages: outcome.messages,
  hostile: outcome.hostile ?? {},
  succeededAfterRetry: outcome.succeededAfterRetry,
  recoveryMs: outcome.recoveryMs,
  nextJoinerTicketMs: outcome.nextJoinerTicketMs,
  lastFailureAfterEndMs: outcome.lastFailureAfterEndMs,
  orphans: orphans[outcome.fault] ?? 0,
  ticketsWithoutToken: broken(outcome, report.ticketsWithoutToken),
  ticketsWithoutJoiningNode: broken(outcome, report.ticketsWithoutJoiningNode),
  notes: outcome.notes ?? {},
}));

console.log(
  "\nfault                             | callers got (attempts per code)              | fault's own clients got" +
    "                                   | recovery ms | orphans | tickets w/o token",
);
for (const row of rows) {
  console.log(
    [
      row.fault.padEnd(33),
      counts(row.callers).padEnd(44),
      counts(row.hostile).padEnd(57),
      (row.recoveryMs === undefined ? "none" : row.recoveryMs.toFixed(0)).padStart(11),
      String(row.orphans).padStart(7),
      String(row.ticketsWithoutToken).padStart(17),
    ].join(" | "),
  );
}
console.log(
  `\n${tickets.length} tickets in ${((stopping - started) / 1000).toFixed(0)} s; tickets without token: ` +
    `${report.ticketsWithoutToken.length}, without JoiningNode: ${report.ticketsWithoutJoiningNode.length}; ` +
    `orphans: ${report.orphans.length} (${counts(orphans)}), lifetimes ≤ ` +
    `${
      Math.max(0, ...orphanLifetimes) / 1000
    } s (TTL ${tokenTtlSeconds} s), left after the cleaner: ${left.length}; ` +
    `tokens the service deleted again: ${report.cleanedUp}`,
);
for (const row of rows) {
  for (const [kind, message] of Object.entries(row.messages)) {
    console.log(`  ${row.fault}: ${kind}: ${message}`);
  }
}

await Deno.mkdir(dirname(flags.out), { recursive: true });
await Deno.writeTextFile(
  flags.out,
  JSON.stringify(
    {
      date: new Date().toISOString(),
      machine: { os: Deno.build.os, cores: navigator.hardwareConcurrency, deno: Deno.version.deno },
      settings: {
        joiners: joinerCount,
        windowMs,
        tokenTtlSeconds,
        cleanupIntervalSeconds: CLEANUP_INTERVAL_SECONDS,
      },
      faults: rows,
      totals: {
        tickets: tickets.length,
        ticketsWithoutToken: report.ticketsWithoutToken.length,
        ticketsWithoutJoiningNode: report.ticketsWithoutJoiningNode.length,
        orphans,
        orphanMaxLifetimeMs: Math.max(0, ...orphanLifetimes),
        orphansLeftAfterCleaner: left.length,
        tokensDeletedByService: report.cleanedUp,
        proxy: cluster.apiProxy?.counts,
      },
    },
    null,
    2,
  ) + "\n",
);
console.log(`\nfigures written to ${flags.out}`);
if (report.ticketsWithoutToken.length > 0 || report.ticketsWithoutJoiningNode.length > 0 || left.length > 0) {
  console.error("something was lost or half-created");
  Deno.exit(1);
}

function counts(record: Record<string, number>): string {
  return Object.entries(record).map(([key, n]) => `${key} ${n}`).join(", ") || "—";
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
