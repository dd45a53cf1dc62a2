/**
 * The local cluster's network: where each node's processes run and which
 * address the node has.
 *
 * - **netns** (root with `ip netns`): one Linux bridge per cluster with the
 *   host at `10.42.<n>.1/24` (the original's QEMU network is 10.42.0.0/24
 *   with the metadata API at .1), and one network namespace per node joined
 *   to it by a veth pair, with its own address `10.42.<n>.<2+i>`. A node's
 *   processes run under `ip netns exec`, so they bind and dial as on a VM;
 *   the metadata API tells nodes apart by their source address, as the
 *   original does. `<n>` is the first subnet whose bridge name is free, so
 *   several clusters can run side by side.
 * - **loopback** (anything else): every process on 127.0.0.1 with ports of
 *   its own. Nodes claim TEST-NET-1 addresses (192.0.2.0/24) in the
 *   metadata (their kubelet certificates must not name loopback) but only
 *   the first control plane is reachable, at 127.0.0.1.
 *
 * The names of the bridge and namespaces are recorded in the cluster's
 * status file as they are created, so `cluster down` removes them even
 * after a crash ({@linkcode removeNetwork}).
 *
 * @module
 */
import { signalProcess } from "../os/processes.ts";
import { runTool, stderrExcerpt } from "../os/run_tool.ts";

/** How nodes are networked. */
export type NetworkKind = "netns" | "loopback";

/** The names a netns network created, enough to remove it. */
export interface NetworkNames {
  /** The bridge's interface name. */
  bridge: string;
  /** The node namespaces, in creation order. */
  namespaces: string[];
  /**
   * Who created them (the cluster's state directory), also set as the
   * bridge's interface alias: a later cluster may take the same names once
   * these are gone, and removing by name must not take its network. Absent
   * in status files written before it existed (their bridges have no alias).
   */
  owner?: string;
}

/** One node's place in the network. */
export interface NodeNetwork {
  /** The node's address in the cluster network (its metadata VPC IP). */
  readonly address: string;
  /** The address the node's servers bind. */
  readonly bindAddress: string;
  /** The address the host dials the node's servers at. */
  readonly reachableAddress: string;
  /** Prefix of a command line that runs a program inside the node's network (empty on loopback). */
  readonly commandPrefix: readonly string[];
  /** The namespace, in netns mode. */
  readonly namespace?: string;
}

/** A cluster network. */
export interface ClusterNetwork {
  /** Which kind it is. */
  readonly kind: NetworkKind;
  /** The host's address in the cluster network: the metadata API and the Kubernetes API bind it. */
  readonly hostAddress: string;
  /** What to remove on teardown (netns), also passed to `onNames` as it grows. */
  readonly names: NetworkNames;
  /**
   * Gives node number `index` (0 is the first control plane) its place:
   * in netns mode a new namespace joined to the bridge.
   */
  addNode(index: number): Promise<NodeNetwork>;
}

/** Options of {@linkcode createNetwork}. */
export interface CreateNetworkOptions {
  /** "auto" picks netns when {@linkcode netnsAvailable}. */
  kind: NetworkKind | "auto";
  /** Who creates it (the cluster's state directory); {@linkcode NetworkNames.owner}. */
  owner: string;
  /** Called with the names whenever they grow (the bridge once it is ours, a namespace before it is made). */
  onNames?: (names: NetworkNames) => Promise<void>;
  /**
   * netns: the host's address this network must have (`10.42.<n>.1`, so
   * every node gets its old address back, as a recovered cluster needs: its
   * certificates and kubeconfigs name them); it fails when another cluster
   * holds that subnet. Default: the first free subnet.
   */
  hostAddress?: string;
}

/** TEST-NET-1: addresses nodes claim on loopback (never routed, never loopback). */
const LOOPBACK_CLAIM_PREFIX = "192.0.2.";
const BRIDGE_PREFIX = "c11n";
/** Subnets 10.42.0.0/24 … 10.42.255.0/24: at most 256 clusters side by side. */
const SUBNETS = 256;
/** .1 is the host; nodes get .2 … .254. */
const MAX_NODES = 253;

/** Whether this process may create network namespaces (root, and `ip netns` works). */
export async function netnsAvailable(): Promise<boolean> {
  if (Deno.uid() !== 0) return false;
  try {
    return (await runTool("ip", ["netns", "list"])).success;
  } catch {
    return false;
  }
}

/**
 * The bridge's own MAC address, `02:00:0a:2a:<n>:01` (locally administered;
 * 0a:2a:<n>:01 is the host's 10.42.<n>.1). A bridge created without one
 * takes the lowest MAC of its ports and changes it whenever a node's veth
 * with a lower one joins, without telling anyone: every node that had the
 * host's address resolved then sends to the old MAC, and loses the metadata
 * API and the Kubernetes API (its join service answers Unavailable) for up
 * to a minute (53 s measured) until its ARP entry is found stale. An address
 * given at creation is kept.
 */
function bridgeMac(subnet: number): string {
  return `02:00:0a:2a:${subnet.toString(16).padStart(2, "0")}:01`;
}

/** Creates the cluster's network. */
export async function createNetwork(options: CreateNetworkOptions): Promise<ClusterNetwork> {
  const kind = options.kind === "auto" ? (await netnsAvailable() ? "netns" : "loopback") : options.kind;
  if (kind === "loopback") return loopbackNetwork();
  let subnets: number[] | undefined;
  if (options.hostAddress !== undefined) {
    const subnet = Number(/^10\.42\.(\d{1,3})\.1$/.exec(options.hostAddress)?.[1] ?? NaN);
    if (!(subnet < SUBNETS)) throw new Error(`not a cluster network's host address: ${options.hostAddress}`);
    subnets = [subnet];
  }
  return await netnsNetwork(options.owner, options.onNames ?? (() => Promise.resolve()), subnets);
}

function loopbackNetwork(): ClusterNetwork {
  return {
    kind: "loopback",
    hostAddress: "127.0.0.1",
    names: { bridge: "", namespaces: [], owner: "" },
    addNode(index) {
      // The first control plane is the one node reachable: its join service is dialed at 127.0.0.1.
      const address = index === 0 ? "127.0.0.1" : `${LOOPBACK_CLAIM_PREFIX}${10 + index}`;
      return Promise.resolve({
        address,
        bindAddress: "127.0.0.1",
        reachableAddress: "127.0.0.1",
        commandPrefix: [],
      });
    },
  };
}

async function netnsNetwork(
  owner: string,
  onNames: (names: NetworkNames) => Promise<void>,
  subnets = Array.from({ length: SUBNETS }, (_, n) => n),
): Promise<ClusterNetwork> {
  const names: NetworkNames = { bridge: "", namespaces: [], owner };
  let subnet = -1;
  for (const n of subnets) {
    const bridge = `${BRIDGE_PREFIX}${n}`;
    // Creating the bridge is the claim on the subnet: it fails when another cluster holds it. It is
    // recorded only once it is ours (a crash in between leaves it behind rather than taking another's).
    const created = await runTool("ip", ["link", "add", bridge, "address", bridgeMac(n), "type", "bridge"]);
    if (!created.success) {
      if (/exists/i.test(created.stderr)) continue;
      throw new Error(`cannot create the cluster bridge: ip link add: ${stderrExcerpt(created.stderr)}`);
    }
    // Marked ours before it is recorded: a removal by name checks the mark. Unmarked, it is not kept.
    const marked = await runTool("ip", ["link", "set", bridge, "alias", owner]);
    if (!marked.success) {
      await runTool("ip", ["link", "del", bridge]);
      throw new Error(
        `cannot mark the cluster bridge ${bridge} as ${owner}: ${stderrExcerpt(marked.stderr)}`,
      );
    }
    names.bridge = bridge;
    subnet = n;
    await onNames(names);
    break;
  }
  if (subnet < 0 && subnets.length === 1) {
    throw new Error(
      `the cluster's subnet 10.42.${subnets[0]}.0/24 is taken: bridge ${BRIDGE_PREFIX}${
        subnets[0]
      } exists (another cluster's?)`,
    );
  }
  if (subnet < 0) {
    throw new Error(`no free cluster subnet: bridges ${BRIDGE_PREFIX}0…${SUBNETS - 1} all exist`);
  }
  const hostAddress = `10.42.${subnet}.1`;
  await ip(["addr", "add", `${hostAddress}/24`, "dev", names.bridge]);
  await ip(["link", "set", names.bridge, "up"]);
  return {
    kind: "netns",
    hostAddress,
    names,
    async addNode(index) {
      if (index >= MAX_NODES) throw new Error(`at most ${MAX_NODES} nodes per cluster`);
      const namespace = `${names.bridge}-node${index}`;
      const hostSide = `${names.bridge}v${index}`;
      names.namespaces.push(namespace);
      await onNames(names);
      const address = `10.42.${subnet}.${2 + index}`;
      // A cluster that held this bridge name before and crashed may have left these behind; the name is ours now.
      await runTool("ip", ["link", "del", hostSide]);
      await runTool("ip", ["netns", "del", namespace]);
      await ip(["netns", "add", namespace]);
      await ip(["link", "add", hostSide, "type", "veth", "peer", "name", "eth0", "netns", namespace]);
      await ip(["link", "set", hostSide, "master", names.bridge, "up"]);
      await ip(["-n", namespace, "addr", "add", `${address}/24`, "dev", "eth0"]);
      await ip(["-n", namespace, "link", "set", "eth0", "up"]);
      await ip(["-n", namespace, "link", "set", "lo", "up"]);
      await ip(["-n", namespace, "route", "add", "default", "via", hostAddress]);
      return {
        address,
        bindAddress: "0.0.0.0",
        reachableAddress: address,
        commandPrefix: ["ip", "netns", "exec", namespace],
        namespace,
      };
    },
  };
}

/**
 * Removes a netns network by its names: kills what still runs in each
 * namespace, deletes the namespaces (their veth pairs go with them) and the
 * bridge. Missing ones are skipped; it is safe to call twice. A bridge of
 * that name marked with another owner belongs to another cluster (these
 * names were removed and taken again): then nothing is touched, and false
 * is returned. So are names a network never gets (a namespace not named
 * after the bridge, as a hand-edited status file may hold): only the
 * bridge's mark tells a namespace, and the processes in it, as its owner's.
 */
export async function removeNetwork(names: NetworkNames): Promise<boolean> {
  if (!networkGaveNames(names)) return false;
  if (names.bridge !== "") {
    const show = await runTool("ip", ["-j", "-d", "link", "show", "dev", names.bridge]);
    // An unreadable answer is treated as another owner's: never remove what might not be ours.
    const alias = show.success ? parseAlias(show.stdout) : null;
    if (show.success && alias !== (names.owner ?? null)) return false;
  }
  for (const namespace of names.namespaces) {
    const pids = await runTool("ip", ["netns", "pids", namespace]);
    for (const pid of pids.success ? pids.stdout.split(/\s+/).filter((p) => p !== "") : []) {
      await signalProcess(Number(pid), "SIGKILL");
    }
    await runTool("ip", ["netns", "del", namespace]);
  }
  if (names.bridge !== "") await runTool("ip", ["link", "del", names.bridge]);
  return true;
}

/**
 * Whether a netns network gives names like `names`: bridge `c11n<n>` (none
 * before it is created), namespaces `<bridge>-node<i>`.
 */
function networkGaveNames(names: NetworkNames): boolean {
  if (names.bridge === "") return names.namespaces.length === 0;
  if (!new RegExp(`^${BRIDGE_PREFIX}\\d+$`).test(names.bridge)) return false;
  const namespace = new RegExp(`^${names.bridge}-node\\d+$`);
  return names.namespaces.every((name) => namespace.test(name));
}

/** The interface alias in `ip -j link show`'s answer; null when there is none or it cannot be read. */
function parseAlias(json: string): string | null {
  try {
    const alias = JSON.parse(json)?.[0]?.ifalias;
    return typeof alias === "string" ? alias : null;
  } catch {
    return null;
  }
}

async function ip(args: string[]): Promise<void> {
  const output = await runTool("ip", args);
  if (!output.success) throw new Error(`ip ${args.join(" ")}: ${stderrExcerpt(output.stderr)}`);
}
