/**
 * The bootstrapper's main control flow (reference §2.3 with DESIGN §4's
 * fixes): a node already bound to a cluster starts its kubelet and is done
 * (if its node state is there: a bound node without one failed after the
 * lock, and a restart must not report it done);
 * any other node serves the init server and runs the join client at once,
 * and the first to take the node lock stops the other.
 *
 * @module
 */
import type { Logger } from "../log/logger.ts";
import { systemTimers, type Timers, withDeadline } from "./retry.ts";

/** Options of calls that can wait. */
export interface SignalOptions {
  /** Abandons the call. */
  signal?: AbortSignal;
}

/** Tells whether PCR 15 already holds a cluster ID. */
export interface ClusterBinding {
  /** True when the node is bound to a cluster (PCR 15 not zero). Rejects when PCR 15 cannot be read. */
  isBound(options?: SignalOptions): Promise<boolean>;
}

/** The node state file: written last by an init or join that completed, removed when one fails past the lock. */
export interface NodeStateFile {
  /** Resolves when the file is there and well-formed; rejects naming what is wrong. */
  check(options?: SignalOptions): Promise<void>;
}

/** Starts the kubelet (through systemd). */
export interface KubeletStarter {
  /** Starts the kubelet unit; rejects naming why it could not. */
  startKubelet(options?: SignalOptions): Promise<void>;
}

/** How a side that took the node lock ended. */
export type Outcome = { ok: true } | { ok: false; error: Error };

/** The init server, listening. */
export interface RunningInitServer {
  /** Resolves once an `Init` that took the node lock has ended, with how it ended. Never resolves otherwise. */
  readonly finished: Promise<Outcome>;
  /** Stops listening and ends the calls in flight. */
  stop(): Promise<void>;
}

/** Hooks given to both sides. */
export interface LockHooks {
  /** Called by the side that took the node lock, at once: the other side must stop. */
  onLocked(): void;
}

/** What {@linkcode runBootstrapper} drives. */
export interface RunDependencies {
  /** Whether the node is already bound to a cluster. */
  binding: ClusterBinding;
  /** What a bound node's init or join left: the node state. */
  nodeState: NodeStateFile;
  /** Starts the kubelet of a bound node. */
  kubelet: KubeletStarter;
  /** Starts the init server; resolves once it listens. */
  startInitServer(hooks: LockHooks): Promise<RunningInitServer>;
  /**
   * Runs the join client until it has joined (resolves) or failed after
   * taking the lock (rejects). Before the lock it retries forever; when
   * `signal` aborts (the init server took the lock), it rejects with the
   * signal's reason.
   */
  runJoinClient(hooks: LockHooks, options: { signal: AbortSignal }): Promise<void>;
  /** Receives one line per phase. */
  logger: Logger;
  /** Deadlines' time; default real time. */
  timers?: Timers;
}

/** Exit status of a terminal failure. */
export const EXIT_FAILURE = 1;

/** How long starting a bound node's kubelet may take (the original's 10 minutes). */
export const KUBELET_START_TIMEOUT_MS = 10 * 60_000;

/**
 * Runs the bootstrapper once: resolves to the process's exit status (0 once
 * the winner is done, {@linkcode EXIT_FAILURE} after a terminal failure,
 * logged as the last line). `signal` (SIGTERM) stops both sides before the
 * lock and resolves to 0.
 */
export async function runBootstrapper(deps: RunDependencies, options: SignalOptions = {}): Promise<number> {
  const { logger } = deps;
  if (await deps.binding.isBound(options)) {
    try {
      await deps.nodeState.check(options);
    } catch (error) {
      // Bound in this boot by an init or join that failed after the lock (the process was restarted), or
      // bound again after a reboot although the join never finished: starting a kubelet would hide that.
      return fail(logger, { ok: false, error: error as Error }, "node is bound to a cluster but not set up");
    }
    logger.info("node is bound to a cluster (PCR 15 set): starting the kubelet");
    // A start job that never ends must end this run (systemd then restarts the bootstrapper), as the original
    // gave up after 10 minutes.
    await withDeadline(
      deps.timers ?? systemTimers,
      "starting the kubelet",
      KUBELET_START_TIMEOUT_MS,
      options.signal,
      (signal) => deps.kubelet.startKubelet({ signal }),
    );
    logger.info("kubelet started; bootstrapper done");
    return 0;
  }

  type Winner = "init" | "join";
  let winner: Winner | undefined;
  const stopJoinClient = new AbortController();
  const stopped = Promise.withResolvers<void>();
  const won = Promise.withResolvers<Winner>();
  const locked = (side: Winner) => () => {
    if (winner) return;
    winner = side;
    logger.info(`the ${side} side took the node lock; stopping the other`);
    won.resolve(side);
  };
  const onAbort = () => stopped.resolve();
  options.signal?.addEventListener("abort", onAbort, { once: true });

  const server = await deps.startInitServer({ onLocked: locked("init") });
  logger.info("init server listening; join client started");
  const joining = deps.runJoinClient({ onLocked: locked("join") }, { signal: stopJoinClient.signal })
    .then((): Outcome => ({ ok: true }), (error: Error): Outcome => ({ ok: false, error }));

  try {
    const first = await Promise.race([
      won.promise,
      stopped.promise.then(() => "stopped" as const),
      // A join client that ends before any lock was taken by either side is a bug; say so instead of hanging.
      joining.then((outcome) => ({ joinEndedEarly: outcome })),
    ]);
    if (first === "stopped") {
      logger.info("stopping before the node lock was taken");
      stopJoinClient.abort(new Error("bootstrapper stopping"));
      await Promise.all([server.stop(), joining]);
      if (!winner) return 0;
      // A side took the lock while stopping: a join runs to its end past the lock, an Init is cut short
      // by the stop. Either way its own outcome says whether the node is set up.
      const outcome = winner === "init" ? await server.finished : await joining;
      return outcome.ok
        ? done(logger, winner)
        : fail(logger, outcome, `the ${winner} side took the node lock while the bootstrapper stopped`);
    }
    if (typeof first === "object") {
      // The join client only ends after taking the lock, so `winner` is set unless it failed on its own.
      if (!winner) {
        await server.stop();
        return fail(logger, first.joinEndedEarly, "join client ended before any node lock");
      }
    }
    if ((winner ?? await won.promise) === "init") {
      stopJoinClient.abort(new Error("the init server took the node lock"));
      const outcome = await server.finished;
      await Promise.all([server.stop(), joining]);
      return outcome.ok ? done(logger, "init") : fail(logger, outcome, "init failed after the node lock");
    }
    await server.stop();
    const outcome = await joining;
    return outcome.ok ? done(logger, "join") : fail(logger, outcome, "join failed after the node lock");
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
  }
}

function done(logger: Logger, side: string): number {
  logger.info(`${side} done; bootstrapper done`);
  return 0;
}

function fail(logger: Logger, outcome: Outcome, what: string): number {
  const message = outcome.ok ? "it returned without joining" : outcome.error.message;
  logger.error(
    `${what}: ${message}; this boot is over: wipe the node (state disk and /run/state) and boot it again to retry`,
  );
  return EXIT_FAILURE;
}
