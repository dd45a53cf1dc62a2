/**
 * Joining nodes as steady load for fault tests and benchmarks: each joiner
 * runs the bootstrapper's real join client (`src/bootstrapper/joinclient.ts`
 * over `AttestedTicketSource`: a connection per attempt, the control planes
 * in list order, a pause after a round without a ticket) for one node after
 * another, each with a fresh name and disk. Only the node's surroundings
 * are the test's: its metadata (itself and the control planes), its disk
 * UUID, and the step after the ticket, which records the ticket instead of
 * taking the node lock and running kubeadm.
 *
 * Every attempt is recorded: what a failed one got (its Connect code, the
 * client's reason and the service's message) and every ticket delivered (its
 * node, token and when it arrived), so a test can say what callers got
 * during a fault and check the cluster's objects against the tickets.
 *
 * @module
 */
import { Code } from "@connectrpc/connect";
import type { Issuer } from "../../src/attestation/attestation.ts";
import { AttestedTicketSource, TicketError } from "../../src/bootstrapper/join_ticket_source.ts";
import {
  type InstanceMetadata,
  JoinClient,
  type JoinTicketSource,
  type TicketApplier,
} from "../../src/bootstrapper/joinclient.ts";
import { silentLogger } from "../../src/log/logger.ts";

/** A ticket a joining node received and opened. */
export interface DeliveredTicket {
  /** When it arrived (`performance.now()`). */
  at: number;
  /** When its node started asking. */
  startedAt: number;
  /** The node's name (its JoiningNode's name). */
  nodeName: string;
  /** The kubeadm token `<id>.<secret>` (a credential of the test cluster). */
  token: string;
  /** The endpoint that issued it. */
  endpoint: string;
  /** How many attempts of this node failed before. */
  failedAttempts: number;
}

/** One failed ticket request of a node. */
export interface FailedAttempt {
  /** When it was sent (`performance.now()`). */
  startedAt: number;
  /** When it failed (`performance.now()`). */
  at: number;
  /** The endpoint asked. */
  endpoint: string;
  /** The Connect code the service answered, or "none" when it gave none (no connection, a deadline). */
  code: string;
  /** The join client's reason, e.g. "unreachable", "deadline", "refused". */
  reason: string;
  /** The message the node logs. */
  message: string;
}

/** Options for {@linkcode startJoiners}. */
export interface JoinersOptions {
  /** Nodes joining at once. */
  joiners: number;
  /** The nodes' evidence (one allow-listed key for all: the service's cost per ticket is the same). */
  issuer: Issuer;
  /** The control planes' addresses, in the order the metadata lists them. */
  controlPlanes: readonly string[];
  /** The join services' port on every control plane. */
  port: number;
  /** The join client's pause after a round without a ticket (a node's default is 30 s). */
  retryIntervalMs: number;
  /** The join client's deadline per ticket request (a node's default is 30 s). */
  callTimeoutMs: number;
  /** Prefix of the node names; default "worker". */
  namePrefix?: string;
}

/** Running joiners. */
export interface Joiners {
  /** Every ticket delivered so far, in order of arrival. */
  readonly tickets: readonly DeliveredTicket[];
  /** Every failed attempt so far, in order. */
  readonly failures: readonly FailedAttempt[];
  /** Resolves once `count` tickets were delivered in all, or rejects after `timeoutMs`. */
  waitForTickets(count: number, options?: { timeoutMs?: number }): Promise<void>;
  /**
   * Stops the joiners: no node starts anymore, the nodes joining finish
   * within `graceMs` (default 0), then the rest give up, mid-request or
   * between attempts. Resolves once every joiner stopped.
   */
  stop(options?: { graceMs?: number }): Promise<void>;
}

/** Starts `options.joiners` joiners, each joining one node after another until stopped. */
export function startJoiners(options: JoinersOptions): Joiners {
  const tickets: DeliveredTicket[] = [];
  const failures: FailedAttempt[] = [];
  const stopping = new AbortController();
  let draining = false;
  const prefix = options.namePrefix ?? "worker";
  const source = new AttestedTicketSource({ issuer: options.issuer });
  const controlPlanes: InstanceMetadata[] = options.controlPlanes.map((vpcIp, i) => ({
    name: `control-plane-${i}`,
    providerId: "",
    role: "ControlPlane",
    vpcIp,
  }));

  const joinOne = async (joiner: number, serial: number) => {
    const startedAt = performance.now();
    // Addresses a kubelet certificate may carry: not loopback, not the service network.
    const self: InstanceMetadata = {
      name: `${prefix}-${joiner}-${serial}`,
      providerId: "",
      role: "Worker",
      vpcIp: `10.${200 + (joiner >> 8)}.${joiner & 255}.${1 + (serial % 250)}`,
    };
    let failedAttempts = 0;
    let endpoint = "";
    // The real source, observed: what each attempt got.
    const recorded: JoinTicketSource = {
      async joinTicket(asked, request, callOptions) {
        const startedAt = performance.now();
        try {
          const ticket = await source.joinTicket(asked, request, callOptions);
          endpoint = asked;
          return ticket;
        } catch (error) {
          if (!stopping.signal.aborted) {
            failedAttempts++;
            failures.push(failedAttempt(startedAt, asked, error));
          }
          throw error;
        }
      },
    };
    const applier: TicketApplier = {
      apply(ticket, node) {
        tickets.push({
          at: performance.now(),
          startedAt,
          nodeName: node.nodeName,
          token: ticket.token,
          endpoint,
          failedAttempts,
        });
        return Promise.resolve({ clusterId: new Uint8Array(32) });
      },
    };
    const client = new JoinClient({
      metadata: {
        self: () => Promise.resolve(self),
        peers: () => Promise.resolve([self, ...controlPlanes]),
      },
      tickets: recorded,
      disk: { uuid: () => Promise.resolve(crypto.randomUUID()) },
      applier,
      logger: silentLogger,
    }, {
      retryIntervalMs: options.retryIntervalMs,
      callTimeoutMs: options.callTimeoutMs,
      joinServicePort: options.port,
    });
    await client.run({ signal: stopping.signal });
  };

  const running = Promise.all(Array.from({ length: options.joiners }, async (_, joiner) => {
    for (let serial = 0; !draining && !stopping.signal.aborted; serial++) await joinOne(joiner, serial);
  }));

  return {
    tickets,
    failures,
    async waitForTickets(count, wait = {}) {
      const deadline = performance.now() + (wait.timeoutMs ?? 30_000);
      while (tickets.length < count) {
        if (performance.now() > deadline) {
          throw new Error(`${tickets.length} of ${count} tickets within ${wait.timeoutMs ?? 30_000} ms`);
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async stop(stop = {}) {
      draining = true;
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([running, new Promise((resolve) => timer = setTimeout(resolve, stop.graceMs ?? 0))]);
      clearTimeout(timer);
      stopping.abort();
      await running;
    },
  };
}

function failedAttempt(startedAt: number, endpoint: string, error: unknown): FailedAttempt {
  const at = performance.now();
  if (error instanceof TicketError) {
    return {
      startedAt,
      at,
      endpoint,
      code: error.code === undefined ? "none" : Code[error.code],
      reason: error.reason,
      message: error.message,
    };
  }
  const reason = typeof error === "object" && error !== null && "reason" in error ? String(error.reason) : "";
  return {
    startedAt,
    at,
    endpoint,
    code: "none",
    reason,
    message: error instanceof Error ? error.message : String(error),
  };
}
