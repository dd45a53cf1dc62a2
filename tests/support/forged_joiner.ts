/**
 * One joining node, run in this process by the bootstrapper's own join
 * client (`src/bootstrapper/joinclient.ts` and `join_ticket_source.ts`):
 * metadata, a fresh kubelet key and CSR per attempt, `GetChallenge`
 * evidence over the report data, `IssueJoinTicket` on a new connection, the
 * sealed ticket opened and checked as the applier checks it before the
 * node lock, and the join client's retries. Only what lies outside the
 * protocol is stood in for: the metadata API and the state disk (in
 * memory), the TPM (the issuer passed in, e.g. a `SoftwareTpmIssuer`), and
 * the node lock and everything after it (the ticket is recorded instead).
 *
 * Used by the join burst and soak (`tests/bench/join_burst.ts`,
 * `join_soak.ts`) to stand in for many nodes without a swtpm each.
 *
 * @module
 */
import { checkTicket } from "../../src/bootstrapper/apply_ticket.ts";
import {
  type AppliedTicket,
  type InstanceMetadata,
  JoinClient,
  type JoiningNode,
  type JoinTicketSource,
  type TicketApplier,
} from "../../src/bootstrapper/joinclient.ts";
import type { IssueJoinTicketResponse } from "../../src/gen/join/join_pb.ts";
import { deriveClusterId } from "../../src/kms/keys.ts";
import { silentLogger } from "../../src/log/logger.ts";

/** Where joiners find the join services: the control planes as the metadata lists them, and the port. */
export interface JoinTargets {
  /** Control-plane instances with the address their join service is reached at. */
  controlPlanes: InstanceMetadata[];
  /** The join services' port. */
  port: number;
}

/** Options of {@linkcode runForgedJoiner}. */
export interface ForgedJoinerOptions {
  /** The node's instance name (and so its Kubernetes node name). */
  name: string;
  /** Its address in the cluster network: the IP SAN of its kubelet certificate. */
  vpcIp: string;
  /** The join services. */
  targets: JoinTargets;
  /** Where tickets come from: an `AttestedTicketSource` over the node's issuer. */
  tickets: JoinTicketSource;
  /** Pause after a failed round (the bootstrapper's `--join-retry-interval`). */
  retryIntervalMs: number;
  /** Deadline of one ticket request (the bootstrapper's `--join-call-timeout`). */
  callTimeoutMs: number;
  /** Aborting stops the node; an unfinished one counts as not joined. */
  signal?: AbortSignal;
}

/** What a joiner received: the ticket's parts the checks need. No other secret is kept. */
export interface ReceivedTicket {
  /** The bootstrap token ("<id>.<secret>"). */
  token: string;
  /** The kubelet certificate, PEM. */
  kubeletCert: Uint8Array;
  /** The cluster ID derived from the ticket's measurement secret and salt. */
  clusterId: Uint8Array;
}

/** How one joiner fared. */
export interface JoinerResult {
  /** The instance name. */
  name: string;
  /** Whether a ticket passed the applier's checks before the signal aborted. */
  joined: boolean;
  /** Ticket requests made. */
  attempts: number;
  /** The reason of each failed attempt, in order (e.g. "refused", "deadline", "invalid-ticket"). */
  failures: string[];
  /** The message of the last failure (join service messages hold no secret). */
  lastError?: string;
  /** From the start of the join client's run to its end. */
  ms: number;
  /** The ticket, when joined. */
  ticket?: ReceivedTicket;
}

/**
 * Runs the join client for one node until it holds a checked ticket or
 * `options.signal` aborts; never rejects.
 */
export async function runForgedJoiner(options: ForgedJoinerOptions): Promise<JoinerResult> {
  const result: JoinerResult = { name: options.name, joined: false, attempts: 0, failures: [], ms: 0 };
  const self: InstanceMetadata = { name: options.name, providerId: "", role: "Worker", vpcIp: options.vpcIp };
  const tickets: JoinTicketSource = {
    async joinTicket(endpoint, request, callOptions) {
      result.attempts++;
      try {
        return await options.tickets.joinTicket(endpoint, request, callOptions);
      } catch (error) {
        result.failures.push(reasonOf(error));
        result.lastError = messageOf(error);
        throw error;
      }
    },
  };
  const applier: TicketApplier = {
    async apply(ticket: IssueJoinTicketResponse, node: JoiningNode): Promise<AppliedTicket> {
      try {
        checkTicket(ticket, node.role);
      } catch (error) {
        result.failures.push(reasonOf(error));
        result.lastError = messageOf(error);
        throw error;
      }
      const clusterId = await deriveClusterId(ticket.measurementSecret, ticket.measurementSalt);
      result.ticket = { token: ticket.token, kubeletCert: ticket.kubeletCert, clusterId };
      return { clusterId };
    },
  };
  const client = new JoinClient({
    metadata: {
      self: () => Promise.resolve(self),
      peers: () => Promise.resolve([self, ...options.targets.controlPlanes]),
    },
    tickets,
    disk: { uuid: () => Promise.resolve(crypto.randomUUID()) },
    applier,
    logger: silentLogger,
  }, {
    retryIntervalMs: options.retryIntervalMs,
    callTimeoutMs: options.callTimeoutMs,
    joinServicePort: options.targets.port,
  });
  const started = performance.now();
  try {
    result.joined = (await client.run({ signal: options.signal })).status === "joined";
  } catch (error) {
    result.failures.push(reasonOf(error));
    result.lastError = messageOf(error);
  }
  result.ms = performance.now() - started;
  return result;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function reasonOf(error: unknown): string {
  const reason = typeof error === "object" && error !== null && "reason" in error ? error.reason : undefined;
  return typeof reason === "string" ? reason : error instanceof Error ? error.name : "unknown";
}
