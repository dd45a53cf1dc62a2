import assert from "node:assert/strict";
import { createLogger } from "../../src/log/logger.ts";
import {
  EXIT_FAILURE,
  KUBELET_START_TIMEOUT_MS,
  type LockHooks,
  type Outcome,
  runBootstrapper,
  type RunDependencies,
} from "../../src/bootstrapper/run.ts";
import { ManualTimers } from "./support.ts";

/** What a scripted side does once started. */
type Script =
  | "wait" // before the lock forever (until stopped)
  | "win" // takes the lock and succeeds
  | "win-then-fail" // takes the lock, then fails
  | "lock-while-stopping"; // takes the lock while the bootstrapper stops: an Init's work is cut, a join ends

interface World {
  deps: RunDependencies;
  events: string[];
  logs: { level: string; msg: string }[];
}

function world(
  options: { bound?: boolean; nodeStateMissing?: boolean; init?: Script; join?: Script } = {},
): World {
  const events: string[] = [];
  const logs: { level: string; msg: string }[] = [];
  const logger = createLogger({ level: "debug", write: (line) => logs.push(JSON.parse(line)) });
  const deps: RunDependencies = {
    logger,
    binding: { isBound: () => Promise.resolve(options.bound ?? false) },
    nodeState: {
      check: () =>
        options.nodeStateMissing
          ? Promise.reject(
            new Error("node state file /run/state/constellation/node_state.json does not exist"),
          )
          : Promise.resolve(),
    },
    kubelet: {
      startKubelet: () => {
        events.push("kubelet started");
        return Promise.resolve();
      },
    },
    startInitServer: (hooks: LockHooks) => {
      events.push("init server listening");
      const finished = Promise.withResolvers<Outcome>();
      const script = options.init ?? "wait";
      if (script === "win" || script === "win-then-fail") {
        setTimeout(() => {
          events.push("init took the lock");
          hooks.onLocked();
          setTimeout(() =>
            finished.resolve(
              script === "win"
                ? { ok: true }
                : { ok: false, error: new Error("initializing cluster: kubeadm init failed") },
            ), 5);
        }, 5);
      }
      return Promise.resolve({
        finished: finished.promise,
        stop: () => {
          if (script === "lock-while-stopping") {
            events.push("init took the lock");
            hooks.onLocked();
            finished.resolve({ ok: false, error: new Error("init server stopped") });
          }
          events.push("init server stopped");
          return Promise.resolve();
        },
      });
    },
    runJoinClient: (hooks, { signal }) =>
      new Promise<void>((resolve, reject) => {
        const script = options.join ?? "wait";
        if (script === "lock-while-stopping") {
          // It was marking when the stop came: past the lock the join ignores it and runs to its end.
          signal.addEventListener("abort", () => {
            events.push("join took the lock");
            hooks.onLocked();
            events.push("join ended");
            resolve();
          });
          return;
        }
        signal.addEventListener("abort", () => {
          events.push("join client stopped");
          reject(signal.reason);
        });
        if (script === "wait") return;
        setTimeout(() => {
          events.push("join took the lock");
          hooks.onLocked();
          setTimeout(() => {
            events.push("join ended");
            if (script === "win") resolve();
            else reject(new Error("kubeadm join failed 3 times"));
          }, 5);
        }, 5);
      }),
  };
  return { deps, events, logs };
}

Deno.test("the bootstrapper's control flow", async (t) => {
  const rows: {
    name: string;
    world: Parameters<typeof world>[0];
    stopAfterMs?: number;
    wantExit: number;
    wantEvents: string[];
    wantLastLog?: RegExp;
  }[] = [
    {
      name: "a node bound to a cluster starts its kubelet and serves nothing",
      world: { bound: true },
      wantExit: 0,
      wantEvents: ["kubelet started"],
      wantLastLog: /bootstrapper done/,
    },
    {
      name:
        "a bound node without its node state (restarted after a failure past the lock): exit 1, no kubelet",
      world: { bound: true, nodeStateMissing: true },
      wantExit: EXIT_FAILURE,
      wantEvents: [],
      wantLastLog:
        /node is bound to a cluster but not set up: node state file .* does not exist; .*wipe the node/,
    },
    {
      name: "init takes the lock: the join client stops, then the server once Init is done",
      world: { init: "win" },
      wantExit: 0,
      wantEvents: [
        "init server listening",
        "init took the lock",
        "join client stopped",
        "init server stopped",
      ],
      wantLastLog: /init done/,
    },
    {
      name: "init fails after the lock: exit status 1, the last line says what and how to retry",
      world: { init: "win-then-fail" },
      wantExit: EXIT_FAILURE,
      wantEvents: [
        "init server listening",
        "init took the lock",
        "join client stopped",
        "init server stopped",
      ],
      wantLastLog:
        /init failed after the node lock: initializing cluster: kubeadm init failed; .*wipe the node/,
    },
    {
      name: "join takes the lock: the init server stops at once, exit 0 once joined",
      world: { join: "win" },
      wantExit: 0,
      wantEvents: ["init server listening", "join took the lock", "init server stopped", "join ended"],
      wantLastLog: /join done/,
    },
    {
      name: "join fails after the lock: exit status 1 naming the failure",
      world: { join: "win-then-fail" },
      wantExit: EXIT_FAILURE,
      wantEvents: ["init server listening", "join took the lock", "init server stopped", "join ended"],
      wantLastLog: /join failed after the node lock: kubeadm join failed 3 times/,
    },
    {
      name: "stopped (SIGTERM) before any lock: both sides stop, exit 0",
      world: {},
      stopAfterMs: 10,
      wantExit: 0,
      wantEvents: ["init server listening", "join client stopped", "init server stopped"],
    },
    {
      name: "stopped, and an Init in flight took the lock while the server stopped: exit 1, wipe named",
      world: { init: "lock-while-stopping" },
      stopAfterMs: 10,
      wantExit: EXIT_FAILURE,
      wantEvents: [
        "init server listening",
        "join client stopped",
        "init took the lock",
        "init server stopped",
      ],
      wantLastLog:
        /the init side took the node lock while the bootstrapper stopped: init server stopped; .*wipe/,
    },
    {
      name: "stopped, and the join took the lock meanwhile and finished: exit 0, joined",
      world: { join: "lock-while-stopping" },
      stopAfterMs: 10,
      wantExit: 0,
      wantEvents: ["init server listening", "join took the lock", "join ended", "init server stopped"],
      wantLastLog: /join done/,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const w = world(row.world);
      const stop = new AbortController();
      const timer = row.stopAfterMs === undefined
        ? undefined
        : setTimeout(() => stop.abort(), row.stopAfterMs);
      try {
        assert.equal(await runBootstrapper(w.deps, { signal: stop.signal }), row.wantExit);
      } finally {
        clearTimeout(timer);
      }
      assert.deepEqual(w.events, row.wantEvents);
      if (row.wantLastLog) assert.match(w.logs.at(-1)!.msg, row.wantLastLog);
    });
  }
});

Deno.test("a PCR 15 that cannot be read stops the bootstrapper before it serves anything", async () => {
  const w = world();
  w.deps.binding = { isBound: () => Promise.reject(new Error("tpm2_pcrread: no TPM at device:/dev/tpmrm0")) };
  await assert.rejects(runBootstrapper(w.deps), /no TPM/);
  assert.deepEqual(w.events, []);
});

Deno.test("a bound node whose kubelet start never ends: the run ends at the 10-minute deadline, the start cancelled", async () => {
  const w = world({ bound: true });
  const timers = new ManualTimers();
  let cancelled: unknown;
  w.deps.timers = timers;
  w.deps.kubelet = {
    startKubelet: ({ signal } = {}) =>
      new Promise((_resolve, reject) => {
        signal?.addEventListener("abort", () => {
          cancelled = signal.reason;
          reject(signal.reason);
        });
      }),
  };
  const run = runBootstrapper(w.deps);
  for (let i = 0; i < 20 && !timers.pending.includes(KUBELET_START_TIMEOUT_MS); i++) await Promise.resolve();
  assert.equal(KUBELET_START_TIMEOUT_MS, 600_000);
  assert.ok(timers.fire(KUBELET_START_TIMEOUT_MS), `pending: ${timers.pending}`);
  await assert.rejects(run, /^DeadlineError: starting the kubelet: no answer within 600000 ms$/);
  assert.ok(cancelled instanceof Error, "the start job was cancelled");
});
