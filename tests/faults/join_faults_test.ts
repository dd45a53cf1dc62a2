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
 * The join services run with a 16 s token TTL (`--bootstrap-token-ttl`) and
 * the local API's token cleaner every second, so orphans expire within the
 * test; `deno task bench` runs the same faults longer (`tests/bench/join_faults.ts`).
 */
import assert from "node:assert/strict";
import {
  apiErrors,
  apiTimeouts,
  clientDisconnects,
  type Fault,
  type FaultOutcome,
  keyServiceRestart,
  oversizedMessages,
  replicaKilled,
  runFault,
  slowlorisFault,
} from "../support/join_faults.ts";
import { CLEANUP_INTERVAL_MS, type FaultRunResult, startFaultRun } from "../support/fault_run.ts";

/**
 * Longer than the join service's 10 s API timeout plus its 5 s undo, so a
 * token the service undid is told from one that expired.
 */
const TOKEN_TTL_SECONDS = 16;

Deno.test("faults while the join service is loaded: callers retry, the service recovers, nothing is lost", {
  sanitizeOps: false,
  sanitizeResources: false,
}, async (t) => {
  await using run = await startFaultRun({
    tokenTtlSeconds: TOKEN_TTL_SECONDS,
    joiners: 6,
    retryIntervalMs: 300,
    // Longer than the join service's 10 s API timeout: a node sees the service's answer, not its deadline.
    callTimeoutMs: 20_000,
    scale: { windowMs: 1000, fraction: 0.3, disconnects: 24, slowlorisConnections: 80 },
  });
  const { cluster, joiners, ledger, context } = run;
  const outcomes: FaultOutcome[] = [];
  let result: FaultRunResult | undefined;
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

    await step(replicaKilled, (outcome) => {
      // Connection refused, or the connection lost mid-call (whatever code the transport reports). First:
      // the tokens its killed process left wait for their TTL, and expire while the other faults run.
      for (const key of Object.keys(outcome.failures)) assert.match(key, /\/unreachable$/);
    });
    await step(keyServiceRestart, (outcome) => {
      assertOnly(outcome, ["OK", "Unavailable"]);
      assertMessages(outcome, /: key service unavailable: /);
    });
    await step(apiErrors, (outcome) => {
      assertOnly(outcome, ["OK", "Unavailable"]);
      assertMessages(outcome, /: API server unavailable: /);
    });
    await step(apiTimeouts, (outcome) => {
      assertOnly(outcome, ["OK", "Unavailable"]);
      assertMessages(outcome, /: API server unavailable: .*no response from the API server/);
    });
    await step(clientDisconnects, (outcome) => {
      assertOnly(outcome, ["OK"]);
      const clients = Object.values(outcome.hostile ?? {}).reduce((sum, n) => sum + n, 0);
      assert.equal(clients, context.scale.disconnects, JSON.stringify(outcome.hostile));
    });
    await step(slowlorisFault, (outcome) => {
      // The joiners' address keeps its connections: slowloris from another one cannot take them.
      assertOnly(outcome, ["OK"]);
      assert.ok((outcome.hostile?.["connections established"] ?? 0) <= 64, JSON.stringify(outcome.hostile));
    });
    await step(oversizedMessages, (outcome) => {
      assertOnly(outcome, ["OK"]);
      for (const [call, n] of Object.entries(outcome.hostile ?? {})) {
        assert.match(call, /: ResourceExhausted$/, `${n} × ${call}`);
      }
    });
  } finally {
    result = await run.finish(outcomes);
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
      const { report, orphans } = result!;
      console.log(JSON.stringify({ ...report, orphans }));
      assert.deepEqual(report.ticketsWithoutToken, []);
      assert.deepEqual(report.ticketsWithoutJoiningNode, []);
      // Writes applied with their answers lost, and requests given up mid-way, are undone at once; the
      // API is healthy again when the service cleans up, so none of their tokens is left for the TTL.
      assert.equal(orphans[apiTimeouts.name], 0, "tokens left by API timeouts");
      for (const orphan of report.orphans) {
        assert.ok(
          orphan.lifetimeMs <= TOKEN_TTL_SECONDS * 1000 + 1000,
          `orphan lives ${orphan.lifetimeMs} ms`,
        );
      }
      const left = await ledger.waitForCleaner(CLEANUP_INTERVAL_MS, report.orphans);
      await ledger.stop();
      assert.deepEqual(left.map((token) => token.id), [], "orphans left after they expired");
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

/** Every failure kind's example message matches `pattern` (it names what failed). */
function assertMessages(outcome: FaultOutcome, pattern: RegExp) {
  for (const message of Object.values(outcome.messages)) assert.match(message, pattern);
}
