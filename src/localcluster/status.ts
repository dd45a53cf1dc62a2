/**
 * The local cluster's status file, `<state-dir>/cluster.json`: what `cluster
 * up` started (every process by PID, the network's names), each node's
 * phase, and where the kubeconfig and logs are. `cluster up` rewrites it
 * (atomically) on every change; `cluster status` reads it; `cluster down`
 * stops what it lists ({@linkcode stopCluster}), also after `up` crashed.
 *
 * @module
 */
import { isAbsolute, resolve } from "node:path";
import { writeFileAtomic } from "../fs/atomic_write.ts";
import { quoted } from "../json/quoted.ts";
import { commandLineOf, signalProcess, startTimeOf } from "../os/processes.ts";
import type { NetworkKind, NetworkNames } from "./network.ts";
import { removeNetwork } from "./network.ts";
import type { NodePhase, PhaseState } from "./phase.ts";

/** The status file's name in the state directory. */
export const STATUS_FILE = "cluster.json";

/** Where the cluster as a whole is. */
export type ClusterState = "starting" | "running" | "failed" | "stopping" | "stopped";

/** A node as the status shows it. */
export interface NodeStatus extends PhaseState {
  /** Instance name. */
  name: string;
  /** The role it claims. */
  role: "ControlPlane" | "Worker";
  /**
   * Its number in the cluster network (0 is the first control plane): its
   * address and namespace derive from it, and a recovery gives it the same.
   */
  index: number;
  /** Its address in the cluster network. */
  address: string;
  /** `host:port` of its init server (and attestation RPC), as the host reaches it, once it listens. */
  initEndpoint?: string;
  /** `host:port` of its recovery server (`cli recover --node`), while its rejoin waits for one. */
  recoveryEndpoint?: string;
  /** `host:port` of its join service, when it runs one. */
  joinServiceEndpoint?: string;
  /** `host:port` of its bootstrapper's browser port (`GetAttestation` for the console), while it listens. */
  attestationEndpoint?: string;
  /** `host:port` of its join service's browser port (`GetStatus` for the console), when it runs one. */
  statusEndpoint?: string;
  /** Its bootstrapper's log file. */
  log: string;
}

/** A process the cluster started. */
export interface ProcessRecord {
  /** What it is, e.g. "worker-1/bootstrapper", "local-api". */
  name: string;
  /** Its process ID. */
  pid: number;
}

/** The content of the status file. */
export interface ClusterStatus {
  /** Where the cluster is. */
  state: ClusterState;
  /** Why the cluster failed, when it did. */
  reason?: string;
  /** The state directory (absolute). */
  stateDir: string;
  /** The PID of `cluster up`. */
  supervisorPid: number;
  /**
   * When `cluster up` started, as `ps` prints it (`lstart`): with the PID it names the process, whose
   * command line need not name the state directory (the default). Absent in files of earlier versions.
   */
  supervisorStart?: string;
  /** The network's kind, the host's address in it and what to remove. */
  network: { kind: NetworkKind; hostAddress: string } & NetworkNames;
  /** When `up` started (RFC 3339). */
  startedAt: string;
  /** When every node had joined (RFC 3339). */
  readyAt?: string;
  /** Seconds from start to every node joined. */
  upSeconds?: number;
  /** `https://host:port` of the Kubernetes API. */
  apiServer?: string;
  /** The cluster ID (hex) from the init. */
  clusterId?: string;
  /** The admin kubeconfig, once the init wrote it. */
  kubeconfig: string;
  /** The logs directory. */
  logs: string;
  /** Every node, in creation order. */
  nodes: NodeStatus[];
  /** Every process started and not yet seen to exit. */
  processes: ProcessRecord[];
}

/**
 * Why `stateDir` cannot be a cluster's state directory, if it cannot: it must
 * be absolute, in normal form (as `path.resolve` gives it), and not the root.
 * The cluster's processes are told by their command lines naming it
 * ({@linkcode namesPath}): nearly every command line names "/" or "".
 */
export function stateDirProblem(stateDir: string): string | undefined {
  if (!isAbsolute(stateDir) || resolve(stateDir) !== stateDir) {
    return `${quoted(stateDir, 200)} is not an absolute path in normal form`;
  }
  if (stateDir === "/") return "the root directory cannot be a cluster's state directory";
  return undefined;
}

/**
 * Reads `<stateDir>/cluster.json`; undefined when there is none. `stateDir`
 * is the state directory as given (see {@linkcode stateDirProblem}); a file
 * that records another one, or lacks or has a wrong value in any field the
 * commands use, is refused, naming the field. With `forStop`, only the
 * fields stopping the cluster needs are checked (and returned as they are):
 * an older `cluster up`'s file may lack some of the others.
 */
export async function readStatus(
  stateDir: string,
  options: { forStop?: boolean } = {},
): Promise<ClusterStatus | undefined> {
  const dirProblem = stateDirProblem(stateDir);
  if (dirProblem !== undefined) throw new Error(`not a state directory: ${dirProblem}`);
  const file = `${stateDir}/${STATUS_FILE}`;
  let text;
  try {
    text = await Deno.readTextFile(file);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
  let status: unknown;
  let problem: string | undefined;
  try {
    status = JSON.parse(text);
  } catch {
    problem = "not JSON";
  }
  problem ??= statusProblem(status, stateDir, options.forStop ?? false);
  if (problem !== undefined) {
    throw new Error(
      `${file} is not a cluster status file that cluster up wrote (${problem}); nothing was done: look at it, or remove the directory`,
    );
  }
  return status as ClusterStatus;
}

/** What is wrong with a parsed status file of state directory `stateDir`, if anything. */
function statusProblem(status: unknown, stateDir: string, forStop: boolean): string | undefined {
  if (typeof status !== "object" || status === null || Array.isArray(status)) return "not a JSON object";
  return (forStop ? stopFields : statusFields)(stateDir)(status, "");
}

/** Checks a value at `at` (a field's path, e.g. `nodes[0].name`): what is wrong with it, if anything. */
type Check = (value: unknown, at: string) => string | undefined;

/** A check that `test` passes; `want` says what it wants. */
function is(want: string, test: (value: unknown) => boolean): Check {
  return (value, at) => {
    if (test(value)) return undefined;
    return value === undefined
      ? `${at}: missing, want ${want}`
      : `${at}: want ${want}, got ${quoted(value, 80)}`;
  };
}

const text = is("a string", (value) => typeof value === "string");
const nonEmptyText = is("a non-empty string", (value) => typeof value === "string" && value !== "");
const processId = is("a process ID", (value) => Number.isSafeInteger(value) && (value as number) > 0);

function oneOf(values: readonly string[]): Check {
  const want = `one of ${values.map((value) => `"${value}"`).join(", ")}`;
  return is(want, (value) => typeof value === "string" && values.includes(value));
}

function optional(check: Check): Check {
  return (value, at) => value === undefined ? undefined : check(value, at);
}

function listOf(item: Check): Check {
  return (value, at) => {
    if (!Array.isArray(value)) return is("a list", () => false)(value, at);
    for (const [i, element] of value.entries()) {
      const problem = item(element, `${at}[${i}]`);
      if (problem !== undefined) return problem;
    }
    return undefined;
  };
}

function fields(checks: Record<string, Check>): Check {
  return (value, at) => {
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      return is("an object", () => false)(value, at);
    }
    for (const [key, check] of Object.entries(checks)) {
      const problem = check(
        Object.hasOwn(value, key) ? (value as Record<string, unknown>)[key] : undefined,
        at === "" ? key : `${at}.${key}`,
      );
      if (problem !== undefined) return problem;
    }
    return undefined;
  };
}

/** Every value of each union the status file holds (a record: the compiler sees to it that none is missing). */
const CLUSTER_STATES: Record<ClusterState, true> = {
  starting: true,
  running: true,
  failed: true,
  stopping: true,
  stopped: true,
};
const NODE_PHASES: Record<NodePhase, true> = {
  starting: true,
  waiting: true,
  attesting: true,
  refused: true,
  joining: true,
  joined: true,
  failed: true,
};
const NETWORK_KINDS: Record<NetworkKind, true> = { netns: true, loopback: true };
const ROLES: Record<NodeStatus["role"], true> = { ControlPlane: true, Worker: true };

/**
 * The fields {@linkcode stopCluster} uses, and `stateDir` itself: what `down` and `up`'s cleanup of a
 * crashed run need, so a status file of an older `cluster up` still lets them stop its processes.
 */
const STOP_FIELDS = (stateDir: string): Record<string, Check> => ({
  stateDir: is(`this state directory, ${quoted(stateDir, 200)}`, (value) => value === stateDir),
  supervisorPid: processId,
  supervisorStart: optional(text),
  network: fields({
    kind: oneOf(Object.keys(NETWORK_KINDS)),
    hostAddress: text,
    bridge: text,
    namespaces: listOf(text),
    owner: optional(text),
  }),
  processes: listOf(fields({ name: text, pid: processId })),
});

const stopFields = (stateDir: string): Check => fields(STOP_FIELDS(stateDir));

/**
 * The fields of {@linkcode ClusterStatus} in a status file of `stateDir`:
 * every one some command uses, and `stateDir` itself (a file copied or moved
 * from another state directory, or edited, names its processes by another).
 */
const statusFields = (stateDir: string): Check =>
  fields({
    ...STOP_FIELDS(stateDir),
    state: oneOf(Object.keys(CLUSTER_STATES)),
    reason: optional(text),
    startedAt: text,
    readyAt: optional(text),
    // Wall-clock time: a clock stepped back while it ran makes it negative.
    upSeconds: optional(is("a number of seconds", (value) => Number.isFinite(value))),
    // `recover` binds the API's port again.
    apiServer: optional(is("an https:// URL with a port", (value) => {
      const url = typeof value === "string" ? URL.parse(value) : null;
      return url?.protocol === "https:" && url.port !== "";
    })),
    clusterId: optional(text),
    kubeconfig: text,
    logs: text,
    nodes: listOf(fields({
      name: nonEmptyText,
      role: oneOf(Object.keys(ROLES)),
      // Written since the nodes got addresses by number; no command reads it back.
      index: optional(is("a node number", (value) => Number.isSafeInteger(value) && (value as number) >= 0)),
      address: text,
      phase: oneOf(Object.keys(NODE_PHASES)),
      reason: optional(text),
      initEndpoint: optional(text),
      recoveryEndpoint: optional(text),
      joinServiceEndpoint: optional(text),
      attestationEndpoint: optional(text),
      statusEndpoint: optional(text),
      log: text,
    })),
  });

/** Writes the status file atomically. */
export async function writeStatus(status: ClusterStatus): Promise<void> {
  await writeFileAtomic(`${status.stateDir}/${STATUS_FILE}`, JSON.stringify(status, null, 2) + "\n", {
    mode: 0o644,
  });
}

/**
 * Whether `pid` is a live process this cluster started: it exists and an
 * argument on its command line names the state directory `stateDir` (see
 * {@linkcode namesPath}; the program does not count, it is no file of the
 * cluster's); a reused PID, of another program or of another cluster's
 * process, names another directory or none. `stateDir` is the one the
 * operator gave, never one read from the status file; no process is told as
 * a cluster's by a directory {@linkcode stateDirProblem} refuses.
 */
export async function isClusterProcess(pid: number, stateDir: string): Promise<boolean> {
  if (stateDirProblem(stateDir) !== undefined) return false;
  const commandLine = await commandLineOf(pid);
  return commandLine !== undefined && namesPath(argumentsOf(commandLine), stateDir);
}

/** `commandLine` (as `ps` shows it) without its first word, the program. */
function argumentsOf(commandLine: string): string {
  return commandLine.replace(/^\S*/, "");
}

/** What the command line of `cluster up` holds. */
const SUPERVISOR_MARK = "localcluster/main.ts";

/**
 * Whether the status file's `cluster up` still runs: its PID's process
 * started when the file says. A reused PID (another cluster's `cluster up`
 * among them) started later.
 */
export async function supervisorRuns(
  status: Pick<ClusterStatus, "supervisorPid" | "supervisorStart">,
): Promise<boolean> {
  if (status.supervisorStart === undefined) {
    return (await commandLineOf(status.supervisorPid))?.includes(SUPERVISOR_MARK) ?? false;
  }
  return await startTimeOf(status.supervisorPid) === status.supervisorStart;
}

/**
 * Whether the status file's `cluster up` still runs and is this cluster's,
 * proven (the one {@linkcode stopCluster} signals): the PID's process runs
 * cluster up and started when the file says or, in a file without a start
 * time, its command line names `stateDir` (as given). Unlike
 * {@linkcode supervisorRuns}, another state directory's cluster up at that
 * PID never counts.
 */
export async function isClusterSupervisor(
  status: Pick<ClusterStatus, "supervisorPid" | "supervisorStart">,
  stateDir: string,
): Promise<boolean> {
  if (stateDirProblem(stateDir) !== undefined) return false;
  const commandLine = await commandLineOf(status.supervisorPid);
  if (commandLine === undefined || !commandLine.includes(SUPERVISOR_MARK)) return false;
  if (status.supervisorStart === undefined) return namesPath(argumentsOf(commandLine), stateDir);
  return await startTimeOf(status.supervisorPid) === status.supervisorStart;
}

/**
 * Whether `commandLine` (arguments joined by spaces, as `ps` shows them)
 * names `path` itself or a path below it: as an argument, a flag's value
 * after "=" or an element of a comma-separated list. A longer name that
 * starts with it (`/x/cluster2` for `/x/cluster`) does not count.
 */
export function namesPath(commandLine: string, path: string): boolean {
  // Every command line names "" (and indexOf finds it at the end forever).
  if (path === "") return false;
  for (let at = commandLine.indexOf(path); at !== -1; at = commandLine.indexOf(path, at + 1)) {
    const before = commandLine[at - 1] ?? " ";
    const after = commandLine[at + path.length] ?? " ";
    if (/[\s=,]/.test(before) && /[\s/,]/.test(after)) return true;
  }
  return false;
}

/** How long processes get to exit after SIGTERM before SIGKILL. */
export const STOP_GRACE_MS = 5_000;

/** What {@linkcode stopCluster} did. */
export interface StopResult {
  /** The processes that were still running. */
  stopped: ProcessRecord[];
  /**
   * "removed"; "not-ours" when the bridge of its name now belongs to another cluster, or the names are not
   * ones this cluster's network got (another owner's, not named as a network names them); "none" on loopback.
   */
  network: "removed" | "not-ours" | "none";
}

/**
 * Stops everything `status` (read from state directory `stateDir`, as given)
 * lists that is proven this cluster's ({@linkcode isClusterSupervisor},
 * {@linkcode isClusterProcess}, told by `stateDir`, never by the file):
 * `cluster up` first (so it starts nothing more), then every process
 * (SIGTERM, SIGKILL after {@linkcode STOP_GRACE_MS}), then the network, if
 * its names are this cluster's (recorded with `stateDir` as their owner, or
 * before owners existed) and it still is. Throws, stopping nothing, when
 * `status` records another state directory or `stateDir` cannot be one
 * ({@linkcode stateDirProblem}).
 */
export async function stopCluster(stateDir: string, status: ClusterStatus): Promise<StopResult> {
  const problem = stateDirProblem(stateDir) ??
    (status.stateDir === stateDir
      ? undefined
      : `its status records state directory ${quoted(status.stateDir, 200)}`);
  if (problem !== undefined) throw new Error(`cannot stop the cluster in ${stateDir}: ${problem}`);
  const supervisor = { name: "cluster up", pid: status.supervisorPid };
  const runs = (record: ProcessRecord) =>
    record === supervisor ? isClusterSupervisor(status, stateDir) : isClusterProcess(record.pid, stateDir);
  // Never this process, nor the one that started it (`deno task`, whose command line names the directory).
  const running = await filterAsync(
    [supervisor, ...status.processes].filter((record) => record.pid !== Deno.pid && record.pid !== Deno.ppid),
    runs,
  );
  for (const record of running) await signalProcess(record.pid, "SIGTERM");
  const deadline = Date.now() + STOP_GRACE_MS;
  let left = running;
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    left = await filterAsync(left, runs);
  }
  for (const record of left) await signalProcess(record.pid, "SIGKILL");
  // By its names, not its kind: a run that crashed while creating its network recorded the bridge and the
  // namespaces it made so far, but not yet the kind "netns".
  if (status.network.bridge === "" && status.network.namespaces.length === 0) {
    return { stopped: running, network: "none" };
  }
  const owner = status.network.owner;
  if (owner !== undefined && owner !== stateDir) return { stopped: running, network: "not-ours" };
  return { stopped: running, network: await removeNetwork(status.network) ? "removed" : "not-ours" };
}

async function filterAsync<T>(items: T[], keep: (item: T) => Promise<boolean>): Promise<T[]> {
  const kept = await Promise.all(items.map(keep));
  return items.filter((_, i) => kept[i]);
}
