/**
 * nextPhase (src/localcluster/phase.ts): a node's phase from its
 * bootstrapper's log lines. The lines are written by the real JSON logger
 * with the bootstrapper's messages (src/bootstrapper/*.ts), and a second test
 * checks that every message nextPhase knows is one the bootstrapper logs, so
 * a renamed log message cannot silently freeze a node's phase.
 */
import assert from "node:assert/strict";
import { createLogger, type LogFields, type LogLevel } from "../../src/log/logger.ts";
import { nextPhase, type PhaseState, WAITING_FOR_RECOVERY } from "../../src/localcluster/phase.ts";

/** One line as the bootstrapper writes it: the real logger, component "bootstrapper". */
function logLine(level: LogLevel, msg: string, fields?: LogFields): string {
  const lines: string[] = [];
  const logger = createLogger({
    level: "debug",
    write: (line) => lines.push(line),
    fields: { component: "bootstrapper" },
  });
  logger[level](msg, fields);
  assert.equal(lines.length, 1);
  return lines[0];
}

const STARTING: PhaseState = { phase: "starting" };
const WAITING: PhaseState = { phase: "waiting", reason: "for Init or a join service" };
const ATTESTING: PhaseState = { phase: "attesting" };
const JOINING: PhaseState = { phase: "joining" };
const JOINED: PhaseState = { phase: "joined" };
const UNREACHABLE: PhaseState = { phase: "waiting", reason: "join service unreachable" };
const RECOVERABLE: PhaseState = { phase: "waiting", reason: WAITING_FOR_RECOVERY };
const ENDPOINT = { endpoint: "10.42.0.2:30090" };
const PCR_MISMATCH = "join service 10.42.0.2:30090: PermissionDenied: PCR[4] mismatch";

interface Row {
  /** The row's name. */
  name: string;
  /** The phase before the line. */
  from: PhaseState;
  /** The log line. */
  line: string;
  /** The phase after it. */
  want: PhaseState;
}

const rows: Row[] = [
  // Start: the init server listens (src/bootstrapper/main.ts).
  {
    name: "listening: a starting node waits",
    from: STARTING,
    line: logLine("info", "listening", { port: 9000 }),
    want: WAITING,
  },
  {
    name: "listening again later leaves an attesting node attesting",
    from: ATTESTING,
    line: logLine("info", "listening", { port: 9000 }),
    want: ATTESTING,
  },
  // Attesting: the join client asks (joinclient.ts), a rejoin asks (rejoin.ts), the operator's Init (initserver.ts).
  {
    name: "joining as: attesting",
    from: WAITING,
    line: logLine("info", "joining as", { nodeName: "worker-0", role: "Worker" }),
    want: ATTESTING,
  },
  {
    name: "rejoining: attesting",
    from: STARTING,
    line: logLine("info", "rejoining", { role: "Worker" }),
    want: ATTESTING,
  },
  { name: "Init called: attesting", from: WAITING, line: logLine("info", "Init called"), want: ATTESTING },
  {
    name: "Init called drops the reason of an earlier wait",
    from: UNREACHABLE,
    line: logLine("info", "Init called"),
    want: ATTESTING,
  },
  // Join service setbacks: unreachable (or deadline) is waiting, anything else refused.
  {
    name: "join service unreachable: waiting",
    from: ATTESTING,
    line: logLine("warn", "join service refused or unreachable", {
      ...ENDPOINT,
      reason: "unreachable",
      error: "join service 10.42.0.2:30090: Unavailable: connect ECONNREFUSED 10.42.0.2:30090",
    }),
    want: UNREACHABLE,
  },
  {
    name: "join service past its deadline: waiting",
    from: ATTESTING,
    line: logLine("warn", "join service refused or unreachable", {
      ...ENDPOINT,
      reason: "deadline",
      error: "join ticket request: no answer within 10000 ms",
    }),
    want: UNREACHABLE,
  },
  {
    name: "join service refused: refused, with its error as the reason",
    from: ATTESTING,
    line: logLine("warn", "join service refused or unreachable", {
      ...ENDPOINT,
      reason: "refused",
      error: PCR_MISMATCH,
    }),
    want: { phase: "refused", reason: PCR_MISMATCH },
  },
  {
    name: "a refusal without a reason field is a refusal",
    from: ATTESTING,
    line: logLine("warn", "join service refused or unreachable", { ...ENDPOINT, error: "bad ticket" }),
    want: { phase: "refused", reason: "bad ticket" },
  },
  {
    name: "a refusal without an error field names the message",
    from: ATTESTING,
    line: logLine("warn", "join service refused or unreachable", { ...ENDPOINT, reason: "refused" }),
    want: { phase: "refused", reason: "join service refused or unreachable" },
  },
  {
    name: "rejoin ticket unreachable: waiting",
    from: ATTESTING,
    line: logLine("warn", "rejoin ticket refused, unreachable or unusable", {
      ...ENDPOINT,
      reason: "unreachable",
      error: "connect ECONNREFUSED",
    }),
    want: UNREACHABLE,
  },
  // A control plane's rejoin offers the operator's recovery (src/bootstrapper/main.ts).
  {
    name: "recovery server listening: waiting for a join service or the recovery",
    from: ATTESTING,
    line: logLine("info", "recovery server listening", { address: "0.0.0.0", port: 9999 }),
    want: RECOVERABLE,
  },
  {
    name: "a node waiting for a recovery keeps that reason while the join services stay unreachable",
    from: RECOVERABLE,
    line: logLine("warn", "rejoin ticket refused, unreachable or unusable", {
      ...ENDPOINT,
      reason: "unreachable",
      error: "connect ECONNREFUSED",
    }),
    want: RECOVERABLE,
  },
  {
    name: "rejoin ticket refused: refused",
    from: ATTESTING,
    line: logLine("warn", "rejoin ticket refused, unreachable or unusable", {
      ...ENDPOINT,
      reason: "refused",
      error: PCR_MISMATCH,
    }),
    want: { phase: "refused", reason: PCR_MISMATCH },
  },
  {
    name: "join ticket refused before the node lock: refused",
    from: JOINING,
    line: logLine("warn", "join ticket refused before the node lock", {
      ...ENDPOINT,
      reason: "invalid-ticket",
      error: "the ticket's CA pin does not match",
    }),
    want: { phase: "refused", reason: "the ticket's CA pin does not match" },
  },
  {
    name: "a refused node that finds the service unreachable waits again",
    from: { phase: "refused", reason: PCR_MISMATCH },
    line: logLine("warn", "join service refused or unreachable", {
      ...ENDPOINT,
      reason: "unreachable",
      error: "connect ECONNREFUSED",
    }),
    want: UNREACHABLE,
  },
  // Joining: a ticket (joinclient.ts) or the init's kubeadm (cluster_init.ts).
  {
    name: "received a join ticket: joining",
    from: { phase: "refused", reason: PCR_MISMATCH },
    line: logLine("info", "received a join ticket", ENDPOINT),
    want: JOINING,
  },
  {
    name: "running kubeadm init: joining",
    from: ATTESTING,
    line: logLine("info", "running kubeadm init", { nodeName: "control-plane-0" }),
    want: JOINING,
  },
  // Joined: a join (apply_ticket.ts, joinclient.ts), the init, a rejoin, a reboot of a bound node (run.ts).
  {
    name: "joined the cluster: joined",
    from: JOINING,
    line: logLine("info", "joined the cluster", { nodeName: "worker-0", role: "Worker" }),
    want: JOINED,
  },
  { name: "Init succeeded: joined", from: JOINING, line: logLine("info", "Init succeeded"), want: JOINED },
  {
    name: "rejoined: joined",
    from: ATTESTING,
    line: logLine("info", "rejoined: PCR 15 bound to the cluster again", ENDPOINT),
    want: JOINED,
  },
  {
    name: "a bound node starting its kubelet: joined",
    from: STARTING,
    line: logLine("info", "node is bound to a cluster (PCR 15 set): starting the kubelet"),
    want: JOINED,
  },
  // Errors: any error-level line ends a node that has not joined.
  {
    name: "joining failed (error level): failed, message and error as the reason",
    from: JOINING,
    line: logLine("error", "joining failed; this boot cannot join", {
      reason: "kubeadm",
      error: "kubeadm join exited with status 1",
    }),
    want: {
      phase: "failed",
      reason: "joining failed; this boot cannot join: kubeadm join exited with status 1",
    },
  },
  {
    name: "Init failed (error level): failed",
    from: JOINING,
    line: logLine("error", "Init failed", { reason: "internal", error: "kubeadm init failed" }),
    want: { phase: "failed", reason: "Init failed: kubeadm init failed" },
  },
  {
    name: "an error line without an error field: failed, the message as the reason",
    from: WAITING,
    line: logLine(
      "error",
      "join failed after the node lock: kubeadm join failed; this boot is over: wipe the node (state disk and /run/state) and boot it again to retry",
    ),
    want: {
      phase: "failed",
      reason:
        "join failed after the node lock: kubeadm join failed; this boot is over: wipe the node (state disk and /run/state) and boot it again to retry",
    },
  },
  {
    name: "a joined node stays joined on a later error line",
    from: JOINED,
    line: logLine("error", "could not remove a file of the failed join", { error: "EBUSY" }),
    want: JOINED,
  },
  {
    name: "a joined node stays joined on a later failure of its bootstrapper",
    from: JOINED,
    line: logLine("error", "bootstrapper failed: the metadata API went away"),
    want: JOINED,
  },
  // Lines that say nothing about the phase.
  {
    name: "an unknown info line changes nothing",
    from: ATTESTING,
    line: logLine("info", "took the node lock for a join", { role: "Worker" }),
    want: ATTESTING,
  },
  {
    name: "an unknown warning changes nothing",
    from: UNREACHABLE,
    line: logLine("warn", "join round failed; retrying", { reason: "all-refused", error: "no join service" }),
    want: UNREACHABLE,
  },
  {
    name: "Deno's permission notice (not JSON) is ignored",
    from: WAITING,
    line: "Warning Permissions in the config file is an experimental feature and may change in the future.",
    want: WAITING,
  },
  { name: "an empty line is ignored", from: ATTESTING, line: "", want: ATTESTING },
  {
    name: "a cut-off JSON line is ignored",
    from: ATTESTING,
    line: '{"level":"error","msg":"Init fa',
    want: ATTESTING,
  },
  { name: "JSON null is ignored", from: ATTESTING, line: "null", want: ATTESTING },
  { name: "a JSON number is ignored", from: ATTESTING, line: "42", want: ATTESTING },
  { name: "a JSON string is ignored", from: ATTESTING, line: '"joined the cluster"', want: ATTESTING },
  {
    name: "an error object without a msg is ignored",
    from: ATTESTING,
    line: '{"level":"error","error":"boom"}',
    want: ATTESTING,
  },
  {
    name: "a msg that is not a string is ignored",
    from: ATTESTING,
    line: '{"level":"error","msg":42}',
    want: ATTESTING,
  },
];

Deno.test("nextPhase follows the bootstrapper's log lines", async (t) => {
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.deepEqual(nextPhase(row.from, row.line), row.want);
    });
  }
});

Deno.test("every message nextPhase knows is logged by the bootstrapper and has a row", async (t) => {
  const phaseSource = await Deno.readTextFile(new URL("../../src/localcluster/phase.ts", import.meta.url));
  const known = [...phaseSource.matchAll(/^\s*case "([^"]+)":/gm)].map((match) => match[1]);
  assert.ok(known.length >= 10, `phase.ts's messages found: ${known.length}`);
  const bootstrapperDir = new URL("../../src/bootstrapper/", import.meta.url);
  const sources: string[] = [];
  for await (const entry of Deno.readDir(bootstrapperDir)) {
    if (entry.isFile && entry.name.endsWith(".ts")) {
      sources.push(await Deno.readTextFile(new URL(entry.name, bootstrapperDir)));
    }
  }
  const tableMessages = new Set(
    rows.map((row) => {
      try {
        return JSON.parse(row.line)?.msg;
      } catch {
        return undefined;
      }
    }),
  );
  for (const msg of known) {
    await t.step(msg, () => {
      // A logger call's message as a string literal: `logger.info("joined the cluster", …)`.
      const logged = new RegExp(
        `\\.(?:info|warn|error)\\(\\s*${JSON.stringify(msg).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`,
      );
      assert.ok(
        sources.some((source) => logged.test(source)),
        `no src/bootstrapper/*.ts logger call logs "${msg}"`,
      );
      assert.ok(tableMessages.has(msg), `the table has no row for "${msg}"`);
    });
  }
});
