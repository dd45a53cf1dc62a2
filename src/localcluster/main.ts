/**
 * `deno task cluster up|down|status|recover`: a confidential cluster on this
 * machine ({@linkcode startLocalCluster}), the project's main job
 * (`npm start` is `cluster up`).
 *
 * `up` shows each node's phase while the cluster comes up, then the summary,
 * and stays in the foreground: Ctrl-C (or SIGTERM, e.g. from `cluster down`)
 * stops everything it started. `status` reads the state directory's status
 * file; `down` stops what it lists by PID (also after `up` crashed) and
 * removes the network namespaces. `recover` brings a stopped cluster back
 * ({@linkcode recoverLocalCluster}), then stays as `up` does.
 *
 * Permissions: the `cluster` permission set of deno.json (the state
 * directory under `.dev/` or `/tmp`; `ip` for namespaces, swtpm, cryptsetup
 * and tpm2-tools for the nodes, deno for every component under its own set).
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { commandLine } from "../flags/flags.ts";
import { quoted } from "../json/quoted.ts";
import { resolve } from "node:path";
import { type LocalCluster, recoverableNodes, recoverLocalCluster, startLocalCluster } from "./cluster.ts";
import type { ClusterStatus } from "./status.ts";
import { CLUSTER_USAGE, type ClusterCommand, parseClusterArgs } from "./flags.ts";
import { readStatus, stateDirProblem, STATUS_FILE, stopCluster, supervisorRuns } from "./status.ts";
import { createLiveView, nodeTable, summary } from "./view.ts";

const encoder = new TextEncoder();
const print = (text: string) => Deno.stdout.writeSync(encoder.encode(text));
const printError = (text: string) => Deno.stderr.writeSync(encoder.encode(`cluster: ${text}\n`));

/** Runs the command line `args`; resolves to the exit status. */
export async function main(args: string[]): Promise<number> {
  const command = commandLine(args, { component: "cluster", usage: CLUSTER_USAGE, parse: parseClusterArgs });
  if (typeof command === "number") return command;
  const stateDir = resolve(command.stateDir);
  try {
    await checkStateDir(command.stateDir, stateDir);
    switch (command.command) {
      case "up":
        return await up(command, stateDir);
      case "status":
        return await status(stateDir, command.output);
      case "down":
        return await down(stateDir);
      case "recover":
        return await recover(command, stateDir);
    }
  } catch (error) {
    if (error instanceof Deno.errors.NotCapable) {
      // Deno's advice (--allow-read) cannot be followed through the task: say what can.
      printError(
        `${stateDir} is outside what the cluster permission set may read and write (.dev/ in the checkout, /tmp): choose a --state-dir below one of them`,
      );
      return 1;
    }
    printError(errorMessage(error));
    return 1;
  }
}

/**
 * Refuses a state directory (`given` as the operator wrote it, resolved to
 * `stateDir`) that is a file or lies below one: every command would
 * otherwise fail with the system's "Not a directory", naming no path; and
 * one whose path holds a comma, which would split the lists it goes into;
 * and the root, which every process's command line names (processes are
 * told as the cluster's by naming the state directory). One that does not
 * exist is fine: `up` creates it, the others say no cluster is there.
 */
async function checkStateDir(given: string, stateDir: string): Promise<void> {
  // Node paths go into comma-separated lists: swtpm's options and Deno's --allow-* flags.
  if (stateDir.includes(",")) throw new Error(`--state-dir ${given} names a path with a comma (${stateDir})`);
  const problem = stateDirProblem(stateDir);
  if (problem !== undefined) throw new Error(`--state-dir ${given}: ${problem}`);
  try {
    if ((await Deno.stat(stateDir)).isDirectory) return;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return;
    if (!(error instanceof Deno.errors.NotADirectory)) throw error;
  }
  throw new Error(`--state-dir ${given} is not a directory`);
}

async function up(command: Extract<ClusterCommand, { command: "up" }>, stateDir: string): Promise<number> {
  const previous = await readStatus(stateDir, { forStop: true });
  if (previous !== undefined) {
    if (await supervisorRuns(previous) && previous.supervisorPid !== Deno.pid) {
      throw new Error(
        `a cluster runs in ${stateDir} (cluster up is PID ${previous.supervisorPid}): cluster down first`,
      );
    }
    await lockStateDir(stateDir);
    await stopCluster(stateDir, previous); // leftovers of a crashed run
    for await (const entry of Deno.readDir(stateDir)) {
      if (entry.name !== LOCK_FILE) await Deno.remove(`${stateDir}/${entry.name}`, { recursive: true });
    }
    print(`Removed the previous (stopped) cluster's state in ${stateDir}.\n`);
  } else if (await isNonEmptyDirectory(stateDir)) {
    throw new Error(
      `${stateDir} is not empty and holds no cluster (${STATUS_FILE}): choose another --state-dir`,
    );
  } else {
    await lockStateDir(stateDir);
  }

  print(
    `Starting ${command.controlPlanes} control plane(s) and ${command.workers} worker(s) in ${stateDir} …\n`,
  );
  return await inForeground(stateDir, (onChange, signal) =>
    startLocalCluster({
      stateDir,
      controlPlanes: command.controlPlanes,
      workers: command.workers,
      network: command.network,
      timeoutMs: command.timeoutMs,
      corsAllowOrigins: command.corsAllowOrigins,
      onChange,
      signal,
    }));
}

async function recover(
  command: Extract<ClusterCommand, { command: "recover" }>,
  stateDir: string,
): Promise<number> {
  const previous = await readStatus(stateDir);
  if (previous === undefined) {
    throw new Error(`no cluster in ${stateDir} (start one with: deno task cluster up)`);
  }
  if (await supervisorRuns(previous) && previous.supervisorPid !== Deno.pid) {
    throw new Error(
      `the cluster in ${stateDir} runs (cluster up is PID ${previous.supervisorPid}): nothing to recover`,
    );
  }
  await lockStateDir(stateDir);
  await stopCluster(stateDir, previous); // leftovers of a crashed run, and its network
  const recoverable = new Set((await recoverableNodes(stateDir)).map((node) => node.name));
  const left = previous.nodes.filter((node) => !recoverable.has(node.name)).map((node) => node.name);
  print(
    `Recovering the cluster in ${stateDir}: its nodes boot again, the control planes are recovered with the master secret …\n`,
  );
  if (left.length > 0) print(`Left out (had not joined): ${left.join(", ")}\n`);
  return await inForeground(stateDir, (onChange, signal) =>
    recoverLocalCluster({
      stateDir,
      timeoutMs: command.timeoutMs,
      corsAllowOrigins: command.corsAllowOrigins,
      onChange,
      signal,
    }));
}

/**
 * Starts a cluster with `start`, showing its phases, then its summary, and
 * stays until Ctrl-C or SIGTERM, then stops everything.
 */
async function inForeground(
  stateDir: string,
  start: (onChange: (status: ClusterStatus) => void, signal: AbortSignal) => Promise<LocalCluster>,
): Promise<number> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  const view = createLiveView();
  try {
    let cluster;
    try {
      cluster = await start((status) => view.update(status), stop.signal);
    } catch (error) {
      view.done();
      const status = await readStatus(stateDir);
      if (status !== undefined) print(`\n${summary(status, Deno.cwd())}`);
      printError(
        stop.signal.aborted ? "stopped before the cluster was up" : (error as Error).message,
      );
      return 1;
    }
    view.done();
    print(`\n${summary(cluster.status, Deno.cwd())}`);
    await new Promise((resolve) => stop.signal.addEventListener("abort", resolve, { once: true }));
    print("Stopping the cluster …\n");
    await cluster.close();
    print("Stopped. The state (logs, kubeconfig, secrets) stays in " + stateDir + ".\n");
    return 0;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
  }
}

async function status(stateDir: string, output: "table" | "json"): Promise<number> {
  const status = await readStatus(stateDir);
  if (status === undefined) {
    throw new Error(`no cluster in ${stateDir} (start one with: deno task cluster up)`);
  }
  const supervisorAlive = await supervisorRuns(status);
  if (!supervisorAlive && (status.state === "running" || status.state === "starting")) {
    status.state = "failed";
    status.reason = `cluster up (PID ${status.supervisorPid}) is gone; run cluster down to clean up`;
  }
  if (output === "json") {
    print(JSON.stringify(status, null, 2) + "\n");
  } else {
    print(`${nodeTable(status.nodes).join("\n")}\n\n${summary(status, Deno.cwd())}`);
  }
  return status.state === "running" ? 0 : 1;
}

async function down(stateDir: string): Promise<number> {
  const status = await readStatus(stateDir, { forStop: true });
  if (status === undefined) throw new Error(`no cluster in ${stateDir}`);
  const { stopped, network } = await stopCluster(stateDir, status);
  const what = {
    removed: ", removed the network",
    "not-ours": `, left the network alone: bridge ${
      quoted(status.network.bridge)
    } and its namespaces are not provably this cluster's (another cluster's now, or names cluster up did not record)`,
    none: "",
  }[network];
  print(`Stopped ${stopped.length} process(es)${what}.\n`);
  return 0;
}

/** The lock `up` and `recover` hold in the state directory while they run (released when they exit). */
const LOCK_FILE = ".lock";
/**
 * How long a second `up` or `recover` waits for the lock before it gives up; the lock call of the only
 * one runs on a thread of its own, which a busy machine can keep waiting for a while.
 */
const LOCK_WAIT_MS = 3_000;
/** The locks' files, open (so held) while this process runs. */
const heldLocks: Deno.FsFile[] = [];

/**
 * Takes the state directory's lock (creating the directory), held until this
 * process exits: two `up` or `recover` commands at once would reboot the same
 * nodes and overwrite each other's status. Throws when another holds it.
 */
async function lockStateDir(stateDir: string): Promise<void> {
  await Deno.mkdir(stateDir, { recursive: true });
  const file = await Deno.open(`${stateDir}/${LOCK_FILE}`, { create: true, write: true });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const locked = await Promise.race([
    file.lock(true).then(() => true),
    new Promise<boolean>((resolve) => timer = setTimeout(() => resolve(false), LOCK_WAIT_MS)),
  ]);
  clearTimeout(timer);
  if (!locked) {
    throw new Error(`another cluster up or recover is working on ${stateDir}: wait for it, or cluster down`);
  }
  heldLocks.push(file);
}

/** Whether `path` holds anything besides the lock. */
async function isNonEmptyDirectory(path: string): Promise<boolean> {
  try {
    for await (const entry of Deno.readDir(path)) if (entry.name !== LOCK_FILE) return true;
    return false;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
