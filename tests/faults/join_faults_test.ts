/**
 * Faults while the join service is loaded (`tests/support/join_faults.ts`):
 * one steady load of joining nodes (the bootstrapper's real join client)
 * runs against two join-service replicas across every step; each step
 * injects one fault and checks what the callers got, that the service
 * recovered by itself, and at the end that nothing was lost or
 * half-created: every ticket a node received has its token Secret and its
 * JoiningNode, and every other token the services left in the API expires
 * within its TTL and is deleted by the API's token cleaner.
 *
 * The join services run with a 12 s token TTL (`--bootstrap-token-ttl`) and
 * the local API's token cleaner every second, so orphans expire within the
 * test; `deno task bench` runs the same faults longer (`tests/bench/join_faults.ts`).
 */
import assert from "node:assert/strict";
import { startLoadCluster } from "../bench/join_load_cluster.ts";
import {
  apiErrors,
  apiTimeouts,
  clientDisconnects,
  type Fault,
  type FaultContext,
  type FaultOutcome,
  keyServiceRestart,
  orphansByFault,
  oversizedMessages,
  replicaKilled,
  runFault,
  slowlorisFault,
} from "../support/join_faults.ts";
import { startJoiners } from "../support/node_joiners.ts";
import { startTokenLedger } from "../support/token_ledger.ts";
import type { DeliveredTicket } from "../support/node_joiners.ts";

const TOKEN_TTL_SECONDS = 12;
const CLEANUP_INTERVAL_SECONDS = 1;

Deno.test("faults while the join service is loaded: callers retry, the service recovers, nothing is lost", {
  sanitizeOps: false,
  sanitizeResources: false,
}, async (t) => {
  await using cluster = await startLoadCluster({
    replicas: 2,
    apiFaultProxy: true,
    localApiFlags: ["--token-cleanup-interval", String(CLEANUP_INTERVAL_SECONDS)],
    joinServiceFlags: [
      ...["--bootstrap-token-ttl", String(TOKEN_TTL_SECONDS)],
      // Slowloris connections are reaped within the step (default 120 s).
      ...["--idle-timeout", "2"],
    ],
  });
  const ledger = startTokenLedger({ list: (path) => cluster.list(path) });
  const joiners = startJoiners({
    joiners: 6,
    issuer: cluster.issuer,
    controlPlanes: cluster.joinServiceAddresses,
    port: cluster.joinServicePort,
    retryIntervalMs: 300,
    // Longer than the join service's 10 s API timeout: a node sees the service's answer, not its own deadline.
    callTimeoutMs: 20_000,
  });
  const extraTickets: DeliveredTicket[] = [];
  const context: FaultContext = {
    cluster,
    joiners,
    extraTickets,
    scale: { windowMs: 1500, fraction: 0.3, disconnects: 24, slowlorisConnections: 80 },
  };
  const outcomes: FaultOutcome[] = [];
  const step = (fault: Fault, check: (outcome: FaultOutcome) => void) =>
    t.step(fault.name, async () => {
      const outcome = await runFault(context, fault);
      outcomes.push(outcome);
      console.log(
        JSON.stringify({ ...outcome, startedAt: undefined, endedAt: undefined, settledAt: undefined }),
      );
      assert.ok(outcome.recoveryMs !== undefined, `no ticket after ${fault.name}`);
      check(outcome);
    });
  try {
    await joiners.waitForTickets(20);

    await step(keyServiceRestart, (outcome) => {
      assertOnly(outcome, ["OK", "Unavailable"]);
    });
    await step(apiErrors, (outcome) => {
      assertOnly(outcome, ["OK", "Unavailable"]);
    });
    await step(apiTimeouts, (outcome) => {
      assertOnly(outcome, ["OK", "Unavailable"]);
    });
    await step(replicaKilled, (outcome) => {
      // Connection refused, or the connection lost mid-call (whatever code the transport reports).
      for (const key of Object.keys(outcome.failures)) assert.match(key, /\/unreachable$/);
    });
    await step(clientDisconnects, () => {});
    await step(slowlorisFault, (outcome) => {
      assertOnly(outcome, ["OK"]);
    });
    await step(oversizedMessages, (outcome) => {
      assertOnly(outcome, ["OK"]);
    });
  } finally {
    await joiners.stop();
    // What the services logged as errors, for whoever reads a failure.
    for (const service of cluster.joinServices) {
      for (
        const line of service.process.stderrLines.filter((l) => l.includes('"level":"error"')).slice(0, 5)
      ) {
        console.log(line);
      }
    }
  }

  await t.step(
    "nothing lost or half-created: tickets have their tokens and JoiningNodes; orphans expire",
    async () => {
      await ledger.poll();
      const report = ledger.report([...joiners.tickets, ...extraTickets]);
      console.log(JSON.stringify({ ...report, orphans: orphansByFault(outcomes, report.orphans) }));
      assert.deepEqual(report.ticketsWithoutToken, []);
      assert.deepEqual(report.ticketsWithoutJoiningNode, []);
      for (const orphan of report.orphans) {
        assert.ok(
          orphan.lifetimeMs <= TOKEN_TTL_SECONDS * 1000 + 1000,
          `orphan lives ${orphan.lifetimeMs} ms`,
        );
      }
      const left = await ledger.waitForCleaner(CLEANUP_INTERVAL_SECONDS * 1000);
      await ledger.stop();
      assert.deepEqual(left.map((token) => token.id), [], "tokens left after they expired");
    },
  );
});

function assertOnly(outcome: FaultOutcome, codes: string[]) {
  for (const code of Object.keys(outcome.callers)) {
    assert.ok(
      codes.includes(code),
      `${outcome.fault}: callers got ${code}: ${JSON.stringify(outcome.failures)}`,
    );
  }
}
