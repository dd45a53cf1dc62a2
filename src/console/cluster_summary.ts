/**
 * What the browser console's cluster view shows of a local cluster: its
 * status file (`<state-dir>/cluster.json`, see `src/localcluster/status.ts`)
 * without the machine's paths and process IDs. The console server serves it
 * at `/api/cluster`; the page reads it.
 *
 * @module
 */
import type { ClusterState, ClusterStatus, NodeStatus } from "../localcluster/status.ts";

/** A node as the cluster view shows it. */
export interface NodeSummary {
  /** Instance name. */
  name: string;
  /** The role it claims. */
  role: NodeStatus["role"];
  /** Its address in the cluster network. */
  address: string;
  /** Where it is, e.g. "waiting", "refused", "joined". */
  phase: NodeStatus["phase"];
  /** Why it waits, was refused or failed. */
  reason?: string;
  /** `host:port` of its bootstrapper's browser port (`GetAttestation`), while the bootstrapper runs. */
  attestationEndpoint?: string;
  /** `host:port` of its join service's browser port (`GetStatus`), when it runs one. */
  statusEndpoint?: string;
}

/** A local cluster as the cluster view shows it. */
export interface ClusterSummary {
  /** Where the cluster as a whole is. */
  state: ClusterState;
  /** Why it failed, when it did. */
  reason?: string;
  /** The cluster ID (hex), once initialized. */
  clusterId?: string;
  /** "netns" or "loopback". */
  network: string;
  /** When `cluster up` started (RFC 3339). */
  startedAt: string;
  /** Every node, in creation order. */
  nodes: NodeSummary[];
}

/** The summary of `status`. */
export function summarizeCluster(status: ClusterStatus): ClusterSummary {
  return {
    state: status.state,
    ...(status.reason === undefined ? {} : { reason: status.reason }),
    ...(status.clusterId === undefined ? {} : { clusterId: status.clusterId }),
    network: status.network.kind,
    startedAt: status.startedAt,
    nodes: status.nodes.map((node) => ({
      name: node.name,
      role: node.role,
      address: node.address,
      phase: node.phase,
      ...(node.reason === undefined ? {} : { reason: node.reason }),
      ...(node.attestationEndpoint === undefined ? {} : { attestationEndpoint: node.attestationEndpoint }),
      ...(node.statusEndpoint === undefined ? {} : { statusEndpoint: node.statusEndpoint }),
    })),
  };
}
