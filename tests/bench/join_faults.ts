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
import { parseCount, parseFlags, parsePositive } from "../../src/flags/flags.ts";
import { ALL_FAULTS, type FaultOutcome, runFault } from "../support/join_faults.ts";
import { CLEANUP_INTERVAL_MS, startFaultRun } from "../support/fault_run.ts";
import { machineFigures, writeResults } from "./results.ts";

const flags = parseFlags(Deno.args, {
  joiners: { type: "string", default: "16" },
  window: { type: "string", default: "4" },
  "token-ttl": { type: "string", default: "30" },
  out: { type: "string", default: "bench-results/join_faults.json" },
}, "join faults benchmark");
const joinerCount = parseCount(flags.joiners, "--joiners");
const windowMs = parsePositive(flags.window, "--window") * 1000;
const tokenTtlSeconds = parseCount(flags["token-ttl"], "--token-ttl");
/** Steady load before the first fault and between faults. */
const QUIET_MS = 3000;

await using run = await startFaultRun({
  tokenTtlSeconds,
  joiners: joinerCount,
  retryIntervalMs: 1000,
  callTimeoutMs: 30_000,
  scale: { windowMs, fraction: 0.3, disconnects: 100, slowlorisConnections: 100 },
});
const { cluster, joiners, ledger, context } = run;

console.log(
  `join service faults: ${joinerCount} joiners (the bootstrapper's join client, retry every 1 s), 2 replicas, ` +
    `${windowMs / 1000} s windows, token TTL ${tokenTtlSeconds} s, ${Deno.build.os} ` +
    `${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}`,
);
await joiners.waitForTickets(joinerCount);
await sleep(QUIET_MS);
const outcomes: FaultOutcome[] = [];
for (const fault of ALL_FAULTS) {
  const outcome = await runFault(context, fault);
  outcomes.push(outcome);
  console.log(`  ${fault.name}: done in ${((outcome.settledAt - outcome.startedAt) / 1000).toFixed(1)} s`);
  await sleep(QUIET_MS);
}
const { tickets, report, orphans, startedAt, stoppedAt } = await run.finish(outcomes);
console.log(`waiting for the orphans' TTL and the token cleaner (${report.orphans.length} orphans) …`);
const left = await ledger.waitForCleaner(CLEANUP_INTERVAL_MS, report.orphans);
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
  `\n${tickets.length} tickets in ${((stoppedAt - startedAt) / 1000).toFixed(0)} s; tickets without token: ` +
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

console.log();
await writeResults(flags.out, {
  date: new Date().toISOString(),
  machine: machineFigures(),
  settings: {
    joiners: joinerCount,
    windowMs,
    tokenTtlSeconds,
    cleanupIntervalMs: CLEANUP_INTERVAL_MS,
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
});
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
