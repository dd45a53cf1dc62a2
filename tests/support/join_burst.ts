/**
 * A burst of joining nodes against a running local cluster, and the check
 * of what it left in the cluster's Kubernetes API.
 *
 * Every node is {@linkcode runForgedJoiner}: the bootstrapper's join client
 * with evidence forged by one software attestation key that the cluster
 * trusts ({@linkcode trustedForgedIssuer}), each ticket request on a new
 * TLS connection to the join service's port. All nodes start at once, as a
 * fleet booting together would.
 *
 * The nodes all come from this process's address, which the join service's
 * per-peer limits would take for one node asking 1,000 times: a cluster for
 * a burst runs its join services with {@linkcode ONE_ADDRESS_JOIN_SERVICE_FLAGS}.
 * The limit over all peers stays as it is.
 *
 * @module
 */
import { AttestedTicketSource } from "../../src/bootstrapper/join_ticket_source.ts";
import type { LocalCluster } from "../../src/localcluster/cluster.ts";
import * as x509 from "../../src/x509/x509.ts";
import { percentile } from "../bench/stats.ts";
import { type JoinerResult, runForgedJoiner } from "./forged_joiner.ts";
import { bootstrapTokenSecrets, kubectlItems } from "./kubectl.ts";
import { clusterCaPem, joinTargets, trustedForgedIssuer } from "./local_cluster_joiners.ts";

/**
 * Join service flags for load from one address standing in for many nodes:
 * the per-peer ticket rate and connection count of a fleet, not of one node.
 */
export const ONE_ADDRESS_JOIN_SERVICE_FLAGS: readonly string[] = [
  ...["--rate-per-peer", "100000", "--burst-per-peer", "100000"],
  ...["--max-connections-per-peer", "4096"],
];

/** Options of {@linkcode runJoinBurst}. */
export interface JoinBurstOptions {
  /** The cluster, started with {@linkcode ONE_ADDRESS_JOIN_SERVICE_FLAGS}. */
  cluster: LocalCluster;
  /** How many nodes join. */
  nodes: number;
  /** Node names are `<prefix>-<i>`; default "burst". */
  namePrefix?: string;
  /** A node's pause after a failed round; default 1 s (the bootstrapper's default is 30 s). */
  retryIntervalMs?: number;
  /** Deadline of one ticket request; default 30 s (the bootstrapper's). */
  callTimeoutMs?: number;
  /** Nodes not joined by then count as failed; default 120 s. */
  timeoutMs?: number;
}

/** How a burst went. */
export interface JoinBurstResult {
  /** Nodes started. */
  nodes: number;
  /** From the first node's start to the last node's end. */
  seconds: number;
  /** Nodes that hold a checked ticket. */
  joined: number;
  /** Nodes whose first ticket request failed (they retried). */
  firstAttemptFailures: number;
  /** Nodes without a ticket at the end. */
  finalFailures: number;
  /** Ticket requests, retries included. */
  attempts: number;
  /** Failed requests by reason. */
  failureReasons: Record<string, number>;
  /** A node's time from start to its checked ticket, over the joined nodes. */
  joinMs: { p50: number; p99: number; max: number };
  /** Every node's result. */
  results: JoinerResult[];
}

/** Trusts a forged issuer in `options.cluster`, then starts every node at once and waits for all. */
export async function runJoinBurst(options: JoinBurstOptions): Promise<JoinBurstResult> {
  const issuer = await trustedForgedIssuer(options.cluster);
  const tickets = new AttestedTicketSource({ issuer });
  const targets = joinTargets(options.cluster);
  const signal = AbortSignal.timeout(options.timeoutMs ?? 120_000);
  const prefix = options.namePrefix ?? "burst";
  const started = performance.now();
  const results = await Promise.all(
    Array.from({ length: options.nodes }, (_, i) =>
      runForgedJoiner({
        name: `${prefix}-${i}`,
        vpcIp: nodeAddress(i),
        targets,
        tickets,
        retryIntervalMs: options.retryIntervalMs ?? 1_000,
        callTimeoutMs: options.callTimeoutMs ?? 30_000,
        signal,
      })),
  );
  const seconds = (performance.now() - started) / 1000;
  const failureReasons: Record<string, number> = {};
  for (const reason of results.flatMap((r) => r.failures)) {
    failureReasons[reason] = (failureReasons[reason] ?? 0) + 1;
  }
  const joinMs = results.filter((r) => r.joined).map((r) => r.ms).sort((a, b) => a - b);
  return {
    nodes: options.nodes,
    seconds,
    joined: results.filter((r) => r.joined).length,
    firstAttemptFailures: results.filter((r) => !firstOk(r)).length,
    finalFailures: results.filter((r) => !r.joined).length,
    attempts: results.reduce((sum, r) => sum + r.attempts, 0),
    failureReasons,
    joinMs: { p50: percentile(joinMs, 0.5), p99: percentile(joinMs, 0.99), max: joinMs.at(-1) ?? NaN },
    results,
  };
}

/** Whether the node's first ticket request gave it a ticket that passed the checks. */
function firstOk(result: JoinerResult): boolean {
  return result.joined && result.failures.length === 0;
}

/**
 * Node `i`'s address in the cluster network, the IP SAN of its kubelet
 * certificate: 10.44.0.0/16, apart from the local cluster's own 10.42.x.0/24
 * subnets (which hold at most 253 nodes).
 */
export function nodeAddress(i: number): string {
  return `10.44.${(i >> 8) & 255}.${i & 255}`;
}

/** What the cluster's API holds after a burst, against what the nodes received. */
export interface BurstObjects {
  /** Bootstrap-token Secrets in kube-system. */
  tokenSecrets: number;
  /** Received tokens whose Secret exists with the same secret. */
  tokensWithSecret: number;
  /** Distinct tokens among those received. */
  distinctTokens: number;
  /** JoiningNodes named after a burst node, with that node's name in their spec. */
  joiningNodes: number;
  /** Distinct kubelet certificates among those received. */
  distinctCerts: number;
  /** Certificates signed by the cluster CA, for `system:node:<the node's name>`. */
  certsVerified: number;
  /** Tickets received. */
  tickets: number;
}

/**
 * Reads the token Secrets and JoiningNodes with the real kubectl and checks
 * every received ticket against them and against the cluster CA.
 */
export async function checkBurstObjects(
  cluster: Pick<LocalCluster, "nodes" | "paths">,
  results: readonly JoinerResult[],
): Promise<BurstObjects> {
  const received = results.filter((r) => r.ticket !== undefined);
  const secrets = await bootstrapTokenSecrets(cluster.paths.adminConf);
  const tokensWithSecret = received.filter((r) => {
    const [id, secret] = r.ticket!.token.split(".");
    return secrets.get(id) === secret;
  }).length;
  const joiningNodes = await kubectlItems(cluster.paths.adminConf, ["joiningnodes"]);
  const names = new Set(results.map((r) => r.name));
  const recorded = joiningNodes.filter((node) =>
    names.has(node.metadata.name) && node.spec?.name === node.metadata.name
  );
  const ca = new x509.X509Certificate(await clusterCaPem(cluster));
  let certsVerified = 0;
  for (const r of received) {
    const cert = new x509.X509Certificate(new TextDecoder().decode(r.ticket!.kubeletCert));
    const signed = await cert.verify({ publicKey: ca.publicKey, signatureOnly: true });
    if (signed && cert.subject === `O=system:nodes, CN=system:node:${r.name}`) certsVerified++;
  }
  return {
    tokenSecrets: secrets.size,
    tokensWithSecret,
    distinctTokens: new Set(received.map((r) => r.ticket!.token)).size,
    joiningNodes: recorded.length,
    distinctCerts: new Set(received.map((r) => r.ticket!.kubeletCert.toHex())).size,
    certsVerified,
    tickets: received.length,
  };
}
