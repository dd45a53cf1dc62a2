/**
 * A confidential cluster on one machine, from real parts: the QEMU-style
 * metadata API (in this process), one node per control plane and worker
 * (its own swtpm, file-backed LUKS2 state disk, filesystem root, recording
 * kubeadm and bootstrapper process, in its own network namespace where the
 * machine allows), the local Kubernetes API serving the first control
 * plane's kubeadm PKI, the operator's `cli init` against the first node,
 * and on every control plane the key service and join service started from
 * the objects the init created. A stopped cluster can be brought back
 * ({@linkcode recoverLocalCluster}).
 *
 * Everything lives under one state directory:
 *
 * ```text
 * cluster.json                  status: phases, processes (by PID), network names
 * admin.conf                    the admin kubeconfig cli init wrote
 * attestation-config.json       measurements of the image, the nodes' attestation keys
 * secrets/                      master secret (cli init's), init secret
 * logs/<node>.log …             every process's log, cli init's output
 * local-api/                    the Kubernetes API's objects
 * nodes/<name>/                 root/ (the node's filesystem), tpm/ (its TPM state), services/,
 *                               node.json (its role and network index, for a recovery)
 * ```
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { freePort } from "../net/free_port.ts";
import { jsonSyntaxError } from "../json/syntax_error.ts";
import bcrypt from "bcryptjs";
import { TpmIssuer } from "../attestation/tpm/issuer.ts";
import { readPcrs } from "../attestation/tpm/pcr.ts";
import { silentLogger } from "../log/logger.ts";
import type { Role } from "../metadata/instance.ts";
import { type MetadataServer, startMetadataServer } from "../metadata/server.ts";
import {
  type ProcessResult,
  type RunningService,
  type SpawnedProcess,
  startProcess,
  startService,
} from "../os/service_process.ts";
import { rfc3339 } from "../rfc3339.ts";
import { createNetwork, type NetworkKind, type NodeNetwork, removeNetwork } from "./network.ts";
import {
  bootNodeTpm,
  BOOTSTRAPPER_LISTENING,
  bootstrapperArgs,
  DENO,
  imageMeasurements,
  isInitialized,
  type NodeFiles,
  nodeFiles,
  prepareNode,
  rebootNode,
  RECOVERY_LISTENING,
  REPO_ROOT,
} from "./node.ts";
import { nextPhase, type NodePhase, type PhaseState } from "./phase.ts";
import {
  JOIN_SERVICE_BROWSER_PORT,
  JOIN_SERVICE_NODE_PORT,
  joinServiceArgs,
  KEY_SERVICE_PORT,
  keyServiceArgs,
  projectServiceConfig,
  publishClusterInfo,
  type ServiceArgsOptions,
  updateAttestationConfig,
} from "./services.ts";
import { startTimeOf } from "../os/processes.ts";
import { SERVICE_ENV } from "../os/service_runtime.ts";
import type { ClusterStatus, NodeStatus } from "./status.ts";
import { readStatus, STOP_GRACE_MS, writeStatus } from "./status.ts";
import type { Swtpm } from "./swtpm.ts";

/** The Kubernetes version the local cluster asks for. */
export const DEFAULT_KUBERNETES_VERSION = "v1.30.2";
/** How long `up` waits for every node to join. */
export const DEFAULT_UP_TIMEOUT_MS = 300_000;
/** The metadata API's port in a netns network (the original's, at the host's .1). */
const NETNS_METADATA_PORT = 8080;
/** The init server's port on a node (the original's). */
const NODE_INIT_PORT = 9000;
/** The Kubernetes API's port in a netns network. */
const NETNS_API_PORT = 6443;
/** The bootstrapper's browser port (GetAttestation for the console) in a netns network. */
const NODE_BROWSER_PORT = 9001;
/** The port of a control plane's recovery server while its rejoin waits (the original's). */
const NODE_RECOVERY_PORT = 9999;
/** A process's "listening" log line with its port (bootstrapper, services, local API). */
const LISTENING = BOOTSTRAPPER_LISTENING;

/** Options of {@linkcode recoverLocalCluster}, and the part of {@linkcode LocalClusterOptions} it shares. */
export interface RecoverLocalClusterOptions {
  /** The state directory (absolute). */
  stateDir: string;
  /** How long to wait for every node to join (default {@linkcode DEFAULT_UP_TIMEOUT_MS}). */
  timeoutMs?: number;
  /**
   * Web origins whose pages may call the nodes' and join services' browser
   * ports (the console's, e.g. `http://127.0.0.1:9080`); default none. The
   * browser ports run either way.
   */
  corsAllowOrigins?: readonly string[];
  /**
   * More flags of every join service, after the cluster's own (a later flag
   * wins): e.g. the rate limits, for load from one address standing in for
   * many nodes.
   */
  joinServiceFlags?: readonly string[];
  /** Called after every change of the status (phases, processes). */
  onChange?: (status: ClusterStatus) => void;
  /** Aborting stops the start-up; the cluster is torn down. */
  signal?: AbortSignal;
}

/** Options of {@linkcode startLocalCluster}. */
export interface LocalClusterOptions extends RecoverLocalClusterOptions {
  /** The state directory (absolute; created; must hold no other cluster). */
  stateDir: string;
  /** Control-plane nodes, at least 1. */
  controlPlanes: number;
  /** Worker nodes. */
  workers: number;
  /** Network namespaces, loopback, or netns when the machine allows ("auto", the default). */
  network?: NetworkKind | "auto";
  /** Kubernetes version of the init (default {@linkcode DEFAULT_KUBERNETES_VERSION}). */
  kubernetesVersion?: string;
}

/** Options of {@linkcode LocalCluster.addNode}. */
export interface AddNodeOptions {
  /** The role the node claims in the metadata. */
  role: Role;
  /** Instance name; default the next `control-plane-<i>` or `worker-<i>`. */
  name?: string;
  /** Measure an extra event into PCR 4 at boot: a node whose image differs. */
  tamperPcr4?: boolean;
  /** "dummy": the node runs the development variant without a TPM. */
  variant?: "qemu-vtpm" | "dummy";
  /** Whether the operator trusts its attestation key (default true). */
  trusted?: boolean;
  /** Whether its key is in the control-plane list (default: it claims the control-plane role). */
  controlPlaneKey?: boolean;
  /** Start its bootstrapper (default true); false leaves the node's TPM and disk to the caller. */
  start?: boolean;
}

/** A node of the local cluster. */
export interface LocalNode {
  /** Instance name. */
  readonly name: string;
  /** The role it claims in the metadata. */
  readonly role: Role;
  /** Its root, disk and TPM state. */
  readonly files: NodeFiles;
  /** Its address and namespace. */
  readonly network: NodeNetwork;
  /** Its TPM now (a new swtpm after {@linkcode LocalNode.reboot}, on the same state). */
  readonly tpm: Swtpm;
  /** Its attestation key's digest (undefined for a dummy node). */
  readonly akDigest?: string;
  /** Its bootstrapper process, while one was started. */
  readonly bootstrapper?: RunningService;
  /** Its status entry (phase, endpoints). */
  readonly status: NodeStatus;
  /** PCR 15 of its TPM. */
  pcr15(): Promise<Uint8Array>;
  /**
   * Reboots the node: stops its bootstrapper, restarts its swtpm on the same
   * state (PCRs reset, same keys), runs `bootstrapper rejoin` to its end (as
   * the rejoin unit does before the bootstrapper), then the bootstrapper
   * (which, on a node bound again, starts the kubelet and exits). A control
   * plane that no join service answers waits for
   * {@linkcode LocalCluster.recoverNodes}. Rejects when the rejoin or the
   * bootstrapper failed (the node's phase says why).
   */
  reboot(): Promise<{ rejoin: ProcessResult; boot: ProcessResult }>;
}

/** A running local cluster. */
export interface LocalCluster extends AsyncDisposable {
  /** The live status (also in `<stateDir>/cluster.json`). */
  readonly status: ClusterStatus;
  /** Files the operator uses. */
  readonly paths: ClusterPaths;
  /** The metadata API. */
  readonly metadata: MetadataServer;
  /** The operator's attestation config (JSON), as the join services have it now. */
  readonly attestationConfig: string;
  /** The node `name`. */
  node(name: string): LocalNode;
  /** Every node, in creation order. */
  nodes(): LocalNode[];
  /**
   * Adds a node and starts its bootstrapper; with `trusted` (default) its
   * attestation key is first added to the attestation config and the join
   * services have reloaded it.
   */
  addNode(options: AddNodeOptions): Promise<LocalNode>;
  /**
   * Adds an attestation key's digest to the attestation config (and to the
   * control-plane keys with `options.controlPlane`), as an operator does for
   * a new node, and resolves once every running join service reloaded it.
   */
  trustAttestationKey(digest: string, options?: { controlPlane?: boolean }): Promise<void>;
  /** Resolves when the node is in one of `phases` (rejects after `timeoutMs`, default 60 s). */
  waitForPhase(name: string, phases: NodePhase[], timeoutMs?: number): Promise<NodeStatus>;
  /** Stops the key and join services of control plane `name` (`signal` default SIGTERM). */
  stopServices(name: string, signal?: Deno.Signal): Promise<void>;
  /** Starts the key and join services of control plane `name` (after the init or its join). */
  startServices(name: string): Promise<void>;
  /**
   * The operator's recovery of control planes `names`: once each one's rejoin
   * serves the recovery ({@linkcode NodeStatus.recoveryEndpoint}), runs one
   * `cli recover` (its own process) with every node's `--node`, the cluster's
   * master secret and attestation config; resolves to its result (exit status
   * 0: every node is bound again). Rejects when a node's rejoin ends without
   * serving one, or nothing happened within `options.timeoutMs` (default the
   * cluster's timeout).
   */
  recoverNodes(names: readonly string[], options?: { timeoutMs?: number }): Promise<ProcessResult>;
  /** Stops everything and removes the network; the state directory stays. */
  close(): Promise<void>;
}

/** Files of a local cluster the operator uses. */
export interface ClusterPaths {
  /** The state directory. */
  stateDir: string;
  /** The admin kubeconfig cli init writes. */
  adminConf: string;
  /** The master secret file cli init creates (recovers every disk). */
  masterSecret: string;
  /** The init secret whose bcrypt hash the metadata serves. */
  initSecret: string;
  /** The operator's attestation config. */
  attestationConfig: string;
  /** The logs directory. */
  logs: string;
}

/** The files under `stateDir`. */
export function clusterPaths(stateDir: string): ClusterPaths {
  return {
    stateDir,
    adminConf: `${stateDir}/admin.conf`,
    masterSecret: `${stateDir}/secrets/master-secret.json`,
    initSecret: `${stateDir}/secrets/init-secret`,
    attestationConfig: `${stateDir}/attestation-config.json`,
    logs: `${stateDir}/logs`,
  };
}

/** The attestation config the operator writes: the image's measurements, the nodes' keys. */
interface AttestationConfigFile {
  variant: "qemu-vtpm";
  measurements: Record<string, { expected: string; warnOnly: boolean }>;
  akTrust: { allowedKeyDigests: string[]; controlPlaneKeyDigests: string[] };
}

interface NodeRecord {
  name: string;
  role: Role;
  files: NodeFiles;
  network: NodeNetwork;
  tpm: Swtpm;
  akDigest?: string;
  variant: "qemu-vtpm" | "dummy";
  tamperPcr4: boolean;
  bootstrapper?: RunningService;
  /** Whether its `bootstrapper rejoin` runs. */
  rejoin: boolean;
  services: RunningService[];
  status: NodeStatus;
}

/**
 * Starts a local cluster and resolves once every node joined. On failure
 * (a node failed, the timeout, an abort) the cluster is torn down, the
 * status says why, and the promise rejects.
 */
export function startLocalCluster(options: LocalClusterOptions): Promise<LocalCluster> {
  return run(options, (cluster) => cluster.up(options));
}

/**
 * Brings back a stopped cluster from its state directory, as an operator
 * recovers a cluster all of whose nodes were powered off: every node that
 * had joined boots again (its swtpm restarted on its state, so PCR 15 is
 * zero; `/run` empty, so its disk's key file is gone) and runs
 * `bootstrapper rejoin`; no join service runs, so the control planes wait
 * for the operator's recovery, which {@linkcode LocalCluster.recoverNodes}
 * gives each with the real `cli recover`; then the control planes' key and
 * join services start again and the workers rejoin through them. The network
 * gets its old addresses back (its certificates and kubeconfigs name them).
 * Nodes that had not joined are left out. Resolves once every node is bound
 * again; on failure as {@linkcode startLocalCluster}.
 */
export function recoverLocalCluster(options: RecoverLocalClusterOptions): Promise<LocalCluster> {
  return run(options, (cluster) => cluster.recover());
}

/** A node as `nodes/<name>/node.json` records it: what a recovery needs besides its files. */
export interface NodeIdentity {
  /** Instance name. */
  name: string;
  /** The role it claims. */
  role: Role;
  /** Its number in the cluster network ({@linkcode NodeStatus.index}). */
  index: number;
}

/** The file in a node's directory that records its {@linkcode NodeIdentity}. */
const NODE_IDENTITY_FILE = "node.json";

/**
 * The nodes of the cluster in `stateDir` that a recovery brings back: those
 * whose state disk is initialized (they joined), in network order. A node
 * that never joined has nothing to recover.
 */
export async function recoverableNodes(stateDir: string): Promise<NodeIdentity[]> {
  const dir = `${stateDir}/nodes`;
  const nodes: NodeIdentity[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (!entry.isDirectory) continue;
    const file = `${dir}/${entry.name}/${NODE_IDENTITY_FILE}`;
    let text: string;
    try {
      text = await Deno.readTextFile(file);
    } catch (error) {
      // A node whose creation failed before it was recorded: it never joined.
      if (error instanceof Deno.errors.NotFound) continue;
      throw error;
    }
    let identity: NodeIdentity;
    try {
      identity = JSON.parse(text);
    } catch (error) {
      throw new Error(`${file}: not JSON: ${jsonSyntaxError(error)}`);
    }
    const role: unknown = identity?.role;
    if (
      (role !== "ControlPlane" && role !== "Worker") || !Number.isSafeInteger(identity.index) ||
      identity.index < 0
    ) {
      throw new Error(`${file}: want {"role": "ControlPlane" or "Worker", "index": <n>}`);
    }
    if (await isInitialized(nodeFiles({ dir, name: entry.name }))) {
      nodes.push({ ...identity, name: entry.name });
    }
  }
  return nodes.sort((a, b) => a.index - b.index);
}

/** Runs `start` on a new cluster; on failure (or abort) tears it down and rejects. */
async function run(
  options: RecoverLocalClusterOptions,
  start: (cluster: Cluster) => Promise<void>,
): Promise<LocalCluster> {
  const cluster = new Cluster(options, await startTimeOf(Deno.pid));
  const onAbort = () => cluster.close("stopped");
  options.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    await start(cluster);
  } catch (error) {
    if (!options.signal?.aborted) {
      cluster.status.state = "failed";
      cluster.status.reason = errorMessage(error);
    }
    await cluster.close(options.signal?.aborted ? "stopped" : "failed");
    throw error;
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
  }
  return cluster;
}

class Cluster implements LocalCluster {
  readonly status: ClusterStatus;
  readonly paths: ClusterPaths;
  #options: RecoverLocalClusterOptions;
  #metadata?: MetadataServer;
  #network?: Awaited<ReturnType<typeof createNetwork>>;
  #nodes = new Map<string, NodeRecord>();
  /** Nodes being created, by name. */
  #creating = new Map<string, { role: Role; index: number }>();
  #others: RunningService[] = [];
  /** Processes run to their end ({@linkcode Cluster.#run}) while they run. */
  #oneShots = new Set<SpawnedProcess>();
  #config?: AttestationConfigFile;
  #apiEndpoint = "";
  #joinServicePort = JOIN_SERVICE_NODE_PORT;
  #logFiles = new Map<string, Deno.FsFile>();
  #watchers = new Set<() => void>();
  #saving = Promise.resolve();
  #closed = false;
  #closing?: Promise<void>;

  /** A cluster supervised by this process, which started at `supervisorStart` (as `ps` prints it). */
  constructor(options: RecoverLocalClusterOptions, supervisorStart: string | undefined) {
    this.#options = options;
    this.paths = clusterPaths(options.stateDir);
    this.status = {
      state: "starting",
      stateDir: options.stateDir,
      supervisorPid: Deno.pid,
      supervisorStart,
      network: { kind: "loopback", hostAddress: "", bridge: "", namespaces: [], owner: "" },
      startedAt: rfc3339(Date.now()),
      kubeconfig: this.paths.adminConf,
      logs: this.paths.logs,
      nodes: [],
      processes: [],
    };
  }

  get metadata(): MetadataServer {
    return this.#metadata!;
  }

  get attestationConfig(): string {
    return JSON.stringify(this.#config);
  }

  async up(options: LocalClusterOptions): Promise<void> {
    const { stateDir, signal } = this.#options;
    const started = Date.now();
    await Deno.mkdir(`${stateDir}/secrets`, { recursive: true, mode: 0o700 });
    await Deno.mkdir(this.paths.logs, { recursive: true });
    await this.#changed();

    const network = await this.#createNetwork(options.network ?? "auto");
    const initSecret = crypto.getRandomValues(new Uint8Array(24)).toBase64();
    await Deno.writeTextFile(this.paths.initSecret, `${initSecret}\n`, { mode: 0o600 });
    await this.#startMetadata(initSecret);
    signal?.throwIfAborted();

    const roles: Role[] = [
      ...Array<Role>(options.controlPlanes).fill("ControlPlane"),
      ...Array<Role>(options.workers).fill("Worker"),
    ];
    const initial = await Promise.all(roles.map((role) => this.#createNode({ role })));
    const first = initial[0];
    signal?.throwIfAborted();
    // On loopback a recovery binds the same port again: one no port-0 listener took meanwhile.
    await this.#startApi(first, network.kind === "netns" ? NETNS_API_PORT : freePort());

    this.#config = {
      variant: "qemu-vtpm",
      measurements: await imageMeasurements(first.tpm),
      akTrust: {
        allowedKeyDigests: initial.map((node) => node.akDigest!),
        controlPlaneKeyDigests: initial.filter((node) => node.role === "ControlPlane").map((n) =>
          n.akDigest!
        ),
      },
    };
    await Deno.writeTextFile(this.paths.attestationConfig, JSON.stringify(this.#config, null, 2) + "\n");

    await Promise.all(initial.map((node) => this.#startBootstrapper(node)));
    signal?.throwIfAborted();
    await this.#init(first, options.kubernetesVersion ?? DEFAULT_KUBERNETES_VERSION);
    await this.startServices(first.name);

    // Control planes serve joins too, once they have joined (on loopback only the first is reachable).
    await Promise.all(
      initial.slice(1).map(async (node) => {
        await this.waitForPhase(node.name, ["joined"], this.#timeoutMs(started));
        if (network.kind === "netns" && node.role === "ControlPlane") await this.startServices(node.name);
      }),
    );
    await this.#running(started);
  }

  async recover(): Promise<void> {
    const { stateDir, signal } = this.#options;
    const started = Date.now();
    const previous = await readStatus(stateDir);
    if (previous === undefined) throw new Error(`no cluster in ${stateDir}`);
    if (previous.clusterId === undefined || previous.apiServer === undefined) {
      throw new Error(
        `the cluster in ${stateDir} never finished its init: nothing to recover (cluster up starts anew)`,
      );
    }
    // Kept from the start: a recovery that fails early leaves a status the next one can use.
    this.status.clusterId = previous.clusterId;
    this.status.network = previous.network;
    this.status.apiServer = previous.apiServer;
    await this.#changed();
    // First: until the bridge is created, another cluster starting may take the subnet.
    const network = await this.#createNetwork(previous.network.kind, previous.network.hostAddress);
    const kept = await recoverableNodes(stateDir);
    if (kept.length === 0) {
      throw new Error(
        `no node in ${stateDir}/nodes records that it joined (${NODE_IDENTITY_FILE} and an initialized disk; the state of an older version has no ${NODE_IDENTITY_FILE}): nothing to recover`,
      );
    }
    if (kept[0].index !== 0) {
      throw new Error(
        `the init node of the cluster in ${stateDir} is gone or never joined: nothing to recover`,
      );
    }
    this.#config = JSON.parse(await Deno.readTextFile(this.paths.attestationConfig));
    await Deno.mkdir(this.paths.logs, { recursive: true });
    await this.#startMetadata((await Deno.readTextFile(this.paths.initSecret)).trim());
    signal?.throwIfAborted();
    const nodes = await Promise.all(kept.map((node) => this.#restoreNode(node)));
    signal?.throwIfAborted();
    // The API keeps its address: the admin kubeconfig and the nodes' kubeconfigs name it.
    const apiPort = network.kind === "netns" ? NETNS_API_PORT : Number(new URL(previous.apiServer).port);
    await this.#startApi(nodes[0], apiPort);

    // No join service runs: every control plane waits for the operator, and is recovered.
    const left = () => this.#timeoutMs(started);
    const rejoins = new Map(nodes.map((node) => [node.name, this.#rejoin(node, left())]));
    const controlPlanes = nodes.filter((node) => node.role === "ControlPlane");
    const recovered = await this.recoverNodes(controlPlanes.map((node) => node.name), { timeoutMs: left() });
    if (recovered.code !== 0) {
      throw new Error(
        `cli recover failed: ${
          recovered.stderrLines.at(-1) ?? `status ${recovered.code}`
        } (see ${this.#recoverLog})`,
      );
    }
    await Promise.all(
      controlPlanes.map(async (node) => this.#bootAfter(node, await rejoins.get(node.name)!, left())),
    );
    // On loopback only the first control plane's join service is reachable, as in up.
    for (const node of network.kind === "netns" ? controlPlanes : controlPlanes.slice(0, 1)) {
      await this.startServices(node.name);
    }
    await Promise.all(
      nodes.filter((node) => node.role === "Worker").map(async (node) =>
        this.#bootAfter(node, await rejoins.get(node.name)!, left())
      ),
    );
    await this.#running(started);
  }

  async #running(since: number): Promise<void> {
    this.status.state = "running";
    this.status.readyAt = rfc3339(Date.now());
    this.status.upSeconds = Math.round((Date.now() - since) / 100) / 10;
    await this.#changed();
  }

  /** Creates the cluster's network (netns: at `hostAddress` when given). */
  async #createNetwork(kind: NetworkKind | "auto", hostAddress?: string) {
    this.#network = await createNetwork({
      kind,
      owner: this.#options.stateDir,
      hostAddress: kind === "netns" ? hostAddress : undefined,
      onNames: async (names) => {
        this.status.network = { ...this.status.network, ...names, namespaces: [...names.namespaces] };
        await this.#changed();
      },
    });
    const network = this.#network;
    this.status.network = { kind: network.kind, hostAddress: network.hostAddress, ...network.names };
    if (network.kind !== "netns") this.#joinServicePort = freePort();
    return network;
  }

  /** Starts the metadata API, serving the hash of the init secret. */
  async #startMetadata(initSecret: string): Promise<void> {
    const netns = this.#network!.kind === "netns";
    this.#metadata = await startMetadataServer({
      hostname: this.#network!.hostAddress,
      port: netns ? NETNS_METADATA_PORT : 0,
      initSecretHash: bcrypt.hashSync(initSecret, 10),
    });
  }

  /** Starts the local Kubernetes API on `port`, serving the kubeadm PKI of the init node `first`. */
  async #startApi(first: { files: NodeFiles }, port: number): Promise<void> {
    const { stateDir } = this.#options;
    const hostAddress = this.#network!.hostAddress;
    const api = await this.#spawn("local-api", [], [
      "run",
      "-P=local-api",
      "--no-prompt",
      `--allow-read=${first.files.root}/etc/kubernetes,${stateDir}/local-api`,
      `--allow-write=${stateDir}/local-api`,
      `${REPO_ROOT}src/localapi/main.ts`,
      ...["--pki-dir", `${first.files.root}/etc/kubernetes/pki`, "--state-dir", `${stateDir}/local-api`],
      ...["--listen-address", hostAddress, "--port", String(port)],
    ]);
    this.#others.push(api);
    this.#apiEndpoint = `${hostAddress}:${api.port}`;
    this.status.apiServer = `https://${this.#apiEndpoint}`;
    this.#metadata!.setEndpoint(this.#apiEndpoint);
  }

  node(name: string): LocalNode {
    const record = this.#nodes.get(name);
    if (record === undefined) throw new Error(`no node "${name}" in this cluster`);
    return this.#view(record);
  }

  nodes(): LocalNode[] {
    return this.status.nodes.flatMap((status) => {
      const record = this.#nodes.get(status.name);
      return record === undefined ? [] : [this.#view(record)];
    });
  }

  async addNode(options: AddNodeOptions): Promise<LocalNode> {
    const record = await this.#createNode(options);
    if (options.trusted ?? true) {
      if (record.akDigest === undefined) throw new Error("a dummy node has no attestation key to trust");
      await this.trustAttestationKey(record.akDigest, {
        controlPlane: options.controlPlaneKey ?? options.role === "ControlPlane",
      });
    }
    if (options.start ?? true) await this.#startBootstrapper(record);
    return this.#view(record);
  }

  async trustAttestationKey(digest: string, options: { controlPlane?: boolean } = {}): Promise<void> {
    const trust = this.#config!.akTrust;
    trust.allowedKeyDigests.push(digest);
    if (options.controlPlane) trust.controlPlaneKeyDigests.push(digest);
    await Deno.writeTextFile(this.paths.attestationConfig, JSON.stringify(this.#config, null, 2) + "\n");
    await updateAttestationConfig(this.paths.adminConf, this.attestationConfig);
    for (const node of this.#nodes.values()) {
      const joinService = node.services[1];
      if (joinService === undefined) continue;
      const reloads = countLines(joinService, ATTESTATION_CONFIG_LOADED);
      await projectServiceConfig(this.paths.adminConf, servicesDir(node));
      await waitForCount(joinService, ATTESTATION_CONFIG_LOADED, reloads + 1);
    }
  }

  waitForPhase(name: string, phases: NodePhase[], timeoutMs = 60_000): Promise<NodeStatus> {
    return this.#waitFor(
      name,
      `${phases.join(" or ")}`,
      (status) => phases.includes(status.phase),
      timeoutMs,
    );
  }

  /**
   * Resolves once node `name`'s status satisfies `done` (re-checked on every
   * change); rejects when `done` throws, the node fails, the cluster stops,
   * or after `timeoutMs`.
   */
  #waitFor(
    name: string,
    what: string,
    done: (status: NodeStatus) => boolean,
    timeoutMs: number,
  ): Promise<NodeStatus> {
    const record = this.#nodes.get(name);
    if (record === undefined) return Promise.reject(new Error(`no node "${name}" in this cluster`));
    return new Promise((resolve, reject) => {
      const check = () => {
        let satisfied;
        try {
          satisfied = done(record.status);
        } catch (error) {
          finish();
          reject(error);
          return;
        }
        if (satisfied) {
          finish();
          resolve(record.status);
        } else if (record.status.phase === "failed" || this.#closed) {
          finish();
          reject(
            new Error(`node ${name} ${this.#closed ? "stopped" : "failed"}: ${record.status.reason ?? ""}`),
          );
        }
      };
      const timer = setTimeout(() => {
        finish();
        reject(
          new Error(
            `node ${name} not ${what} within ${Math.round(timeoutMs / 1000)} s: ${record.status.phase}${
              record.status.reason ? ` (${record.status.reason})` : ""
            }; see ${record.status.log}`,
          ),
        );
      }, timeoutMs);
      const finish = () => {
        clearTimeout(timer);
        this.#watchers.delete(check);
      };
      this.#watchers.add(check);
      check();
    });
  }

  async recoverNodes(names: readonly string[], options: { timeoutMs?: number } = {}): Promise<ProcessResult> {
    const since = Date.now();
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs();
    const endpoints = await Promise.all(names.map((name) => this.#recoveryEndpoint(name, timeoutMs)));
    return await this.#run("cli-recover", [], [
      "run",
      "-P=cli",
      "--no-prompt",
      `${REPO_ROOT}src/cli/main.ts`,
      "recover",
      ...endpoints.flatMap((endpoint) => ["--node", endpoint]),
      ...["--master-secret", this.paths.masterSecret],
      ...["--attestation-config", this.paths.attestationConfig, "--timeout", "60"],
    ], { log: this.#recoverLog, timeoutMs: Math.max(1, timeoutMs - (Date.now() - since)) });
  }

  /** Where node `name`'s rejoin serves the recovery, once it does. */
  async #recoveryEndpoint(name: string, timeoutMs: number): Promise<string> {
    const record = this.#nodes.get(name);
    let rejoinSeen = false;
    const status = await this.#waitFor(name, "serving a recovery", (status) => {
      if (status.recoveryEndpoint !== undefined) return true;
      if (record?.rejoin) rejoinSeen = true;
      else if (rejoinSeen) throw new Error(`node ${name}: its rejoin ended without serving a recovery`);
      return false;
    }, timeoutMs);
    return status.recoveryEndpoint!;
  }

  get #recoverLog(): string {
    return `${this.paths.logs}/cli-recover.log`;
  }

  async startServices(name: string): Promise<void> {
    const node = this.#nodes.get(name)!;
    if (node.services.length > 0) throw new Error(`the services of ${name} run already`);
    const configDir = servicesDir(node);
    await projectServiceConfig(this.paths.adminConf, configDir);
    const netns = this.#network!.kind === "netns";
    const options: ServiceArgsOptions = {
      repoRoot: REPO_ROOT,
      configDir,
      kubernetesDir: `${node.files.root}/etc/kubernetes`,
      bindAddress: node.network.bindAddress,
      joinServicePort: this.#joinServicePort,
      keyServiceEndpoint: "",
      apiServerEndpoint: this.#apiEndpoint,
      browserPort: netns ? JOIN_SERVICE_BROWSER_PORT : 0,
      corsAllowOrigins: this.#options.corsAllowOrigins ?? [],
      joinServiceFlags: this.#options.joinServiceFlags ?? [],
    };
    const keyService = await this.#spawn(
      `${name}/key-service`,
      node.network.commandPrefix,
      keyServiceArgs(options, netns ? KEY_SERVICE_PORT : 0),
      { env: { ...SERVICE_ENV } },
    );
    node.services.push(keyService);
    const joinService = await this.#spawn(
      `${name}/join-service`,
      node.network.commandPrefix,
      joinServiceArgs({ ...options, keyServiceEndpoint: `127.0.0.1:${keyService.port}` }),
      { env: { ...SERVICE_ENV } },
    );
    node.services.push(joinService);
    node.status.joinServiceEndpoint = `${node.network.reachableAddress}:${joinService.port}`;
    const browserPort = await browserPortOf(joinService);
    node.status.statusEndpoint = `${node.network.reachableAddress}:${browserPort}`;
    await this.#changed();
  }

  async stopServices(name: string, signal: Deno.Signal = "SIGTERM"): Promise<void> {
    const node = this.#nodes.get(name)!;
    for (const service of node.services.reverse()) await service.stop(signal);
    node.services = [];
    delete node.status.joinServiceEndpoint;
    delete node.status.statusEndpoint;
    await this.#changed();
  }

  close(state: "stopped" | "failed" = "stopped"): Promise<void> {
    this.#closing ??= this.#teardown(state);
    return this.#closing;
  }

  async #teardown(state: "stopped" | "failed"): Promise<void> {
    this.#closed = true;
    this.status.state = "stopping";
    await this.#changed();
    for (const watcher of [...this.#watchers]) watcher();
    const processes = [
      ...[...this.#nodes.values()].flatMap((node) => [...node.services, node.bootstrapper]),
      ...this.#others,
      ...this.#oneShots,
    ];
    // A process that ignores SIGTERM (a bootstrapper past its node lock) must not hold the teardown.
    await Promise.all(processes.map((process) => process?.stop("SIGTERM", { killAfterMs: STOP_GRACE_MS })));
    await Promise.all([...this.#nodes.values()].map((node) => node.tpm.stop()));
    await this.#metadata?.[Symbol.asyncDispose]();
    if (this.#network?.kind === "netns") await removeNetwork(this.#network.names);
    for (const file of this.#logFiles.values()) file.close();
    this.#logFiles.clear();
    this.status.state = state;
    this.status.processes = [];
    await this.#changed();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #timeoutMs(since = Date.now()): number {
    return Math.max(1, (this.#options.timeoutMs ?? DEFAULT_UP_TIMEOUT_MS) - (Date.now() - since));
  }

  /** Prepares a node (root, disk, TPM, network, metadata entry) without starting it. */
  async #createNode(options: AddNodeOptions): Promise<NodeRecord> {
    const prefix = options.role === "ControlPlane" ? "control-plane" : "worker";
    // Nodes are created concurrently: names being created count for the next name.
    const sameRole = [...this.#nodes.values()].filter((n) => n.role === options.role).length +
      [...this.#creating.values()].filter((node) => node.role === options.role).length;
    let name = options.name;
    // The next free name: a recovered cluster may lack some (left out), whose directories stay.
    for (let n = sameRole; name === undefined; n++) {
      const candidate = `${prefix}-${n}`;
      if (!this.#nodes.has(candidate) && !this.#creating.has(candidate) && !this.#nodeDirExists(candidate)) {
        name = candidate;
      }
    }
    return await this.#placeNode({
      name,
      role: options.role,
      index: this.#nextIndex(),
      variant: options.variant ?? "qemu-vtpm",
      tamperPcr4: options.tamperPcr4 ?? false,
      boot: async () => {
        const files = await prepareNode({ dir: `${this.#options.stateDir}/nodes`, name });
        return { files, tpm: await bootNodeTpm(files, { tamperPcr4: options.tamperPcr4 }) };
      },
    });
  }

  /** Places a node of a stopped cluster again, at its old index, and reboots it on its files. */
  #restoreNode(node: NodeIdentity): Promise<NodeRecord> {
    const files = nodeFiles({ dir: `${this.#options.stateDir}/nodes`, name: node.name });
    return this.#placeNode({
      ...node,
      variant: "qemu-vtpm",
      tamperPcr4: false,
      boot: async () => ({ files, tpm: await rebootNode(files) }),
    });
  }

  /** Whether `nodes/<name>` exists (synchronous: concurrent creations must see each other's names). */
  #nodeDirExists(name: string): boolean {
    try {
      Deno.statSync(`${this.#options.stateDir}/nodes/${name}`);
      return true;
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return false;
      throw error;
    }
  }

  /** The lowest network index no node has or is being given. */
  #nextIndex(): number {
    const taken = new Set([
      ...[...this.#nodes.values()].map((node) => node.status.index),
      ...[...this.#creating.values()].map((node) => node.index),
    ]);
    let index = 0;
    while (taken.has(index)) index++;
    return index;
  }

  async #placeNode(node: {
    name: string;
    role: Role;
    index: number;
    variant: "qemu-vtpm" | "dummy";
    tamperPcr4: boolean;
    boot: () => Promise<{ files: NodeFiles; tpm: Swtpm }>;
  }): Promise<NodeRecord> {
    const { name, role, index } = node;
    if (this.#nodes.has(name) || this.#creating.has(name)) throw new Error(`a node "${name}" exists already`);
    this.#creating.set(name, { role, index });
    try {
      const status: NodeStatus = {
        name,
        role,
        index,
        address: "",
        phase: "starting",
        log: `${this.paths.logs}/${name}.log`,
      };
      this.status.nodes.push(status);
      const network = await this.#network!.addNode(index);
      status.address = network.address;
      const { files, tpm } = await node.boot();
      this.#track(`${name}/swtpm`, tpm.pid);
      let akDigest: string | undefined;
      try {
        const identity: Omit<NodeIdentity, "name"> = { role, index };
        await Deno.writeTextFile(`${files.home}/${NODE_IDENTITY_FILE}`, JSON.stringify(identity) + "\n");
        if (node.variant !== "dummy") akDigest = await attestationKeyDigest(tpm);
        if (this.#closed) throw new Error("the cluster was stopped");
      } catch (error) {
        await tpm.stop();
        this.#untrack(tpm.pid);
        throw error;
      }
      const record: NodeRecord = {
        name,
        role,
        files,
        network,
        tpm,
        akDigest,
        variant: node.variant,
        tamperPcr4: node.tamperPcr4,
        rejoin: false,
        services: [],
        status,
      };
      this.#nodes.set(name, record);
      this.#metadata!.setInstance({ name, role, vpcIp: network.address });
      await this.#changed();
      return record;
    } finally {
      this.#creating.delete(name);
    }
  }

  /** The bootstrapper's arguments on `node` in this cluster (`flags` first: "rejoin" is a command). */
  #bootstrapperArgs(node: NodeRecord, flags: string[]): string[] {
    const netns = this.#network!.kind === "netns";
    return bootstrapperArgs(node.files, {
      tpm: node.tpm,
      metadataUrl: netns ? this.#metadata!.url : this.#metadata!.nodeUrl(node.name),
      listenAddress: node.network.bindAddress,
      variant: node.variant,
      flags: [
        ...flags,
        ...["--port", String(netns ? NODE_INIT_PORT : 0)],
        ...["--join-service-port", String(this.#joinServicePort)],
        // The stand-in for the node's own API server is the local API on the host.
        ...["--init-api-server", `https://${this.#apiEndpoint}`],
        ...["--browser-port", String(netns ? NODE_BROWSER_PORT : 0)],
        ...["--recovery-port", String(netns ? NODE_RECOVERY_PORT : 0)],
        ...(this.#options.corsAllowOrigins ?? []).flatMap((origin) => ["--cors-allow-origin", origin]),
      ],
    });
  }

  #setPhase(node: NodeRecord, next: PhaseState): void {
    if (next.phase === node.status.phase && next.reason === node.status.reason) return;
    node.status.phase = next.phase;
    if (next.reason === undefined) delete node.status.reason;
    else node.status.reason = next.reason;
    this.#changed();
  }

  async #startBootstrapper(node: NodeRecord): Promise<void> {
    const args = this.#bootstrapperArgs(node, []);
    const process = await this.#spawn(`${node.name}/bootstrapper`, node.network.commandPrefix, args, {
      log: node.status.log,
      onLine: (line) => this.#setPhase(node, nextPhase(node.status, line)),
    });
    node.bootstrapper = process;
    node.status.initEndpoint = `${node.network.reachableAddress}:${process.port}`;
    node.status.attestationEndpoint = `${node.network.reachableAddress}:${await browserPortOf(process)}`;
    process.status.then((status) => {
      if (node.bootstrapper !== process) return;
      delete node.status.initEndpoint;
      delete node.status.attestationEndpoint;
      if (status.code !== 0 && !this.#closed && node.status.phase !== "joined") {
        node.status.phase = "failed";
        node.status.reason ??= `bootstrapper exited with status ${status.code}`;
      }
      this.#changed();
    });
    await this.#changed();
  }

  /**
   * Runs `bootstrapper rejoin` on the node to its end (killed after
   * `timeoutMs`, default the cluster's timeout), as the rejoin unit does at
   * boot; its phases and recovery endpoint show while it runs.
   */
  async #rejoin(node: NodeRecord, timeoutMs?: number): Promise<ProcessResult> {
    node.rejoin = true;
    try {
      return await this.#run(
        `${node.name}/rejoin`,
        node.network.commandPrefix,
        this.#bootstrapperArgs(node, ["rejoin"]),
        {
          log: node.status.log,
          timeoutMs,
          onLine: (line) => {
            const recovery = RECOVERY_LISTENING.exec(line);
            if (recovery !== null) {
              node.status.recoveryEndpoint = `${node.network.reachableAddress}:${recovery[1]}`;
              this.#changed();
            }
            this.#setPhase(node, nextPhase(node.status, line));
          },
        },
      );
    } finally {
      node.rejoin = false;
      delete node.status.recoveryEndpoint;
      this.#changed();
    }
  }

  /**
   * After `rejoin` ended: runs the bootstrapper to its end, as the node's
   * boot does next (on a node bound again it starts the kubelet and exits);
   * rejects when either failed, or the cluster is stopping.
   */
  async #bootAfter(node: NodeRecord, rejoin: ProcessResult, timeoutMs?: number): Promise<ProcessResult> {
    // A rejoin stopped with the cluster ends too (status 0: "rejoin stopped"); nothing follows it then.
    if (this.#closed) throw new Error("the cluster was stopped");
    if (rejoin.code !== 0) {
      this.#setPhase(node, { phase: "failed", reason: rejoin.stderrLines.at(-1) });
      throw new Error(
        `the rejoin of ${node.name} failed: ${rejoin.stderrLines.at(-1) ?? `status ${rejoin.code}`}`,
      );
    }
    const boot = await this.#run(
      `${node.name}/bootstrapper`,
      node.network.commandPrefix,
      this.#bootstrapperArgs(node, []),
      {
        log: node.status.log,
        timeoutMs,
        onLine: (line) => this.#setPhase(node, nextPhase(node.status, line)),
      },
    );
    if (boot.code !== 0) {
      this.#setPhase(node, { phase: "failed", reason: boot.stderrLines.at(-1) });
      throw new Error(
        `the bootstrapper of ${node.name} failed: ${boot.stderrLines.at(-1) ?? `status ${boot.code}`}`,
      );
    }
    return boot;
  }

  /** Runs the operator's `cli init` against the first node. */
  async #init(first: NodeRecord, kubernetesVersion: string): Promise<void> {
    const log = `${this.paths.logs}/cli-init.log`;
    const result = await this.#run("cli-init", [], [
      "run",
      "-P=cli",
      "--no-prompt",
      `${REPO_ROOT}src/cli/main.ts`,
      "init",
      ...["--node", first.status.initEndpoint!, "--attestation-config", this.paths.attestationConfig],
      ...["--master-secret", this.paths.masterSecret, "--init-secret-file", this.paths.initSecret],
      ...["--kubernetes-version", kubernetesVersion],
      ...["--cluster-name", "local", "--kubeconfig-out", this.paths.adminConf],
      ...["--logs-out", `${this.paths.logs}/init-node.log`, "--timeout", "60"],
    ], { log });
    if (result.code !== 0) {
      throw new Error(
        `cli init failed: ${result.stderrLines.at(-1) ?? `status ${result.code}`} (see ${log})`,
      );
    }
    const clusterId = result.stdoutLines.join("\n").match(/[0-9a-f]{64}/);
    if (clusterId !== null) this.status.clusterId = clusterId[0];
    await publishClusterInfo({
      adminConf: this.paths.adminConf,
      endpoint: this.#apiEndpoint,
      caPem: await Deno.readTextFile(`${first.files.root}/etc/kubernetes/pki/ca.crt`),
    });
    await this.#changed();
  }

  async #spawn(
    name: string,
    prefix: readonly string[],
    args: string[],
    options: { log?: string; onLine?: (line: string) => void; env?: Record<string, string> } = {},
  ): Promise<RunningService> {
    const log = this.#logFile(options.log ?? `${this.paths.logs}/${name.replace("/", "-")}.log`);
    const [cmd, ...rest] = [...prefix, DENO, ...args];
    const process = await startService(cmd, rest, {
      readyMatch: LISTENING,
      cwd: REPO_ROOT,
      env: options.env,
      timeoutMs: 60_000,
      onLine: (line) => {
        log(line);
        options.onLine?.(line);
      },
    });
    if (this.#closed) {
      await process.stop("SIGKILL");
      throw new Error("the cluster was stopped");
    }
    this.#track(name, process.pid);
    process.status.then(() => this.#untrack(process.pid));
    return process;
  }

  /**
   * Runs `deno args` (after `prefix`) to its end, its output appended to
   * `logPath` (and each line to `onLine`), tracked as `name` while it runs,
   * killed after `timeoutMs` or stopped with the cluster. Rejects, starting
   * nothing, once the cluster is stopping.
   */
  async #run(
    name: string,
    prefix: readonly string[],
    args: string[],
    options: { log: string; onLine?: (line: string) => void; timeoutMs?: number },
  ): Promise<ProcessResult> {
    if (this.#closed) throw new Error("the cluster was stopped");
    const log = this.#logFile(options.log);
    const [cmd, ...rest] = [...prefix, DENO, ...args];
    const process = startProcess(cmd, rest, {
      cwd: REPO_ROOT,
      onLine: (line) => {
        log(line);
        options.onLine?.(line);
      },
    });
    this.#oneShots.add(process);
    this.#track(name, process.pid);
    const timer = setTimeout(() => process.stop("SIGKILL"), options.timeoutMs ?? this.#timeoutMs());
    try {
      const { code } = await process.status;
      return { code, stdoutLines: process.stdoutLines, stderrLines: process.stderrLines };
    } finally {
      clearTimeout(timer);
      this.#oneShots.delete(process);
      this.#untrack(process.pid);
    }
  }

  #logFile(path: string): (line: string) => void {
    let file = this.#logFiles.get(path);
    if (file === undefined) {
      file = Deno.openSync(path, { append: true, create: true });
      this.#logFiles.set(path, file);
    }
    const encoder = new TextEncoder();
    return (line) => {
      if (!this.#closed) file.writeSync(encoder.encode(`${line}\n`));
    };
  }

  #track(name: string, pid: number): void {
    this.status.processes.push({ name, pid });
    this.#changed();
  }

  #untrack(pid: number): void {
    this.status.processes = this.status.processes.filter((record) => record.pid !== pid);
    this.#changed();
  }

  /** Saves the status (in order, one write at a time) and tells the watchers. */
  #changed(): Promise<void> {
    for (const watcher of [...this.#watchers]) watcher();
    this.#options.onChange?.(this.status);
    const snapshot = structuredClone(this.status);
    this.#saving = this.#saving.then(() => writeStatus(snapshot)).catch(() => {});
    return this.#saving;
  }

  #view(record: NodeRecord): LocalNode {
    // deno-lint-ignore no-this-alias
    const cluster = this;
    return {
      name: record.name,
      role: record.role,
      files: record.files,
      network: record.network,
      get tpm() {
        return record.tpm;
      },
      akDigest: record.akDigest,
      get bootstrapper() {
        return record.bootstrapper;
      },
      status: record.status,
      async pcr15() {
        return (await readPcrs({ tcti: record.tpm.tcti }, [15])).get(15)!;
      },
      async reboot() {
        await record.bootstrapper?.stop("SIGKILL");
        record.bootstrapper = undefined;
        await record.tpm.stop();
        cluster.#untrack(record.tpm.pid);
        record.tpm = await rebootNode(record.files, { tamperPcr4: record.tamperPcr4 });
        cluster.#track(`${record.name}/swtpm`, record.tpm.pid);
        cluster.#setPhase(record, { phase: "starting" });
        const rejoin = await cluster.#rejoin(record);
        const boot = await cluster.#bootAfter(record, rejoin);
        return { rejoin, boot };
      },
    };
  }
}

/** The browser port in a "listening" line (the bootstrapper's and the join service's). */
const BROWSER_PORT = /"msg":"listening".*"browserPort":(\d+)/;

/** The browser port `process` announced in its "listening" line. */
async function browserPortOf(process: RunningService): Promise<number> {
  return Number(BROWSER_PORT.exec(await process.waitForLine(BROWSER_PORT, 1_000))![1]);
}

/** The join service's log line when it (re)loaded the attestation config. */
const ATTESTATION_CONFIG_LOADED = /attestation config (loaded|reloaded)/;

function countLines(process: RunningService, match: RegExp): number {
  return process.stderrLines.filter((line) => match.test(line)).length;
}

async function waitForCount(process: RunningService, match: RegExp, count: number): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (countLines(process, match) < count) {
    if (Date.now() > deadline) throw new Error(`the join service did not reload its attestation config`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function servicesDir(node: NodeRecord): string {
  return `${node.files.home}/services/config`;
}

/** The digest of the node's attestation key, as the operator collects it for the config. */
async function attestationKeyDigest(tpm: Swtpm): Promise<string> {
  const issuer = await TpmIssuer.create({ tcti: tpm.tcti, logger: silentLogger });
  try {
    return issuer.keyDigest;
  } finally {
    await issuer.close();
  }
}
