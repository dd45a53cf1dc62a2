/**
 * The local cluster's status file, `<state-dir>/cluster.json`: what `cluster
 * up` started (every process by PID, the network's names), each node's
 * phase, and where the kubeconfig and logs are. `cluster up` rewrites it
 * (atomically) on every change; `cluster status` reads it; `cluster down`
 * stops what it lists ({@linkcode stopCluster}), also after `up` crashed.
 *
 * @module
 */
import { writeFileAtomic } from "../fs/atomic_write.ts";
import { commandLineOf, signalProcess, startTimeOf } from "../os/processes.ts";
import type { NetworkKind, NetworkNames } from "./network.ts";
import { removeNetwork } from "./network.ts";
import type { PhaseState } from "./phase.ts";

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

/** Reads `<stateDir>/cluster.json`; undefined when there is none. */
export async function readStatus(stateDir: string): Promise<ClusterStatus | undefined> {
  let text;
  try {
    text = await Deno.readTextFile(`${stateDir}/${STATUS_FILE}`);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
  let status: unknown;
  try {
    status = JSON.parse(text);
  } catch {
    throw new Error(
      `${stateDir}/${STATUS_FILE} is not a cluster status file (not JSON); remove the directory`,
    );
  }
  const problem = statusShapeProblem(status);
  if (problem !== undefined) {
    throw new Error(
      `${stateDir}/${STATUS_FILE} is not a cluster status file (${problem}); remove the directory`,
    );
  }
  return status as ClusterStatus;
}

/** What is wrong with the shape of a parsed status file (the fields the commands rely on), if anything. */
function statusShapeProblem(status: unknown): string | undefined {
  if (typeof status !== "object" || status === null || Array.isArray(status)) return "not a JSON object";
  const record = status as Record<string, unknown>;
  const object = (value: unknown) => typeof value === "object" && value !== null && !Array.isArray(value);
  if (typeof record.stateDir !== "string") return "no stateDir";
  if (!Number.isSafeInteger(record.supervisorPid)) return "no supervisorPid";
  if (!object(record.network) || typeof (record.network as Record<string, unknown>).kind !== "string") {
    return "no network";
  }
  if (!Array.isArray(record.nodes) || !record.nodes.every(object)) return "nodes is not a list of nodes";
  const processes = record.processes;
  if (!Array.isArray(processes) || !processes.every((p) => object(p) && Number.isSafeInteger(p.pid))) {
    return "processes is not a list of processes";
  }
  return undefined;
}

/** Writes the status file atomically. */
export async function writeStatus(status: ClusterStatus): Promise<void> {
  await writeFileAtomic(`${status.stateDir}/${STATUS_FILE}`, JSON.stringify(status, null, 2) + "\n", {
    mode: 0o644,
  });
}

/**
 * Whether `pid` is a live process this cluster started: it exists and its
 * command line names the state directory (see {@linkcode namesPath}); a
 * reused PID, of another program or of another cluster's process, names
 * another directory or none.
 */
export async function isClusterProcess(pid: number, stateDir: string): Promise<boolean> {
  const commandLine = await commandLineOf(pid);
  return commandLine !== undefined && namesPath(commandLine, stateDir);
}

/** What the command line of `cluster up` holds; status files without a start time are told by it alone. */
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
 * Whether `commandLine` (arguments joined by spaces, as `ps` shows them)
 * names `path` itself or a path below it: as an argument, a flag's value
 * after "=" or an element of a comma-separated list. A longer name that
 * starts with it (`/x/cluster2` for `/x/cluster`) does not count.
 */
export function namesPath(commandLine: string, path: string): boolean {
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
  /** "removed"; "not-ours" when the bridge of its name now belongs to another cluster; "none" on loopback. */
  network: "removed" | "not-ours" | "none";
}

/**
 * Stops everything `status` lists: `cluster up` first (so it starts nothing
 * more), then every process (SIGTERM, SIGKILL after {@linkcode STOP_GRACE_MS}),
 * then the network, if it is still this cluster's.
 */
export async function stopCluster(status: ClusterStatus): Promise<StopResult> {
  const supervisor = { name: "cluster up", pid: status.supervisorPid };
  const runs = (record: ProcessRecord) =>
    record === supervisor ? supervisorRuns(status) : isClusterProcess(record.pid, status.stateDir);
  const running = await filterAsync(
    [supervisor, ...status.processes].filter((record) => record.pid !== Deno.pid),
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
  if (status.network.kind !== "netns") return { stopped: running, network: "none" };
  return { stopped: running, network: await removeNetwork(status.network) ? "removed" : "not-ours" };
}

async function filterAsync<T>(items: T[], keep: (item: T) => Promise<boolean>): Promise<T[]> {
  const kept = await Promise.all(items.map(keep));
  return items.filter((_, i) => kept[i]);
}
