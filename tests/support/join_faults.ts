/**
 * Faults while the join service is loaded, shared by the CI test
 * (`tests/faults/join_faults_test.ts`) and the benchmark
 * (`tests/bench/join_faults.ts`): each fault is injected into a load
 * cluster (`tests/bench/join_load_cluster.ts`: two join-service replicas,
 * the key service and the local API as processes, a fault proxy in front
 * of the API) while joiners (`node_joiners.ts`, the real join client) keep
 * joining, and {@linkcode runFault} measures what the joiners got during
 * it, what the fault's own clients got, and how long until a ticket was
 * delivered again after the fault ended.
 *
 * The faults:
 *
 * - **replica killed**: SIGKILL of the replica every node asks first, started
 *   again later;
 * - **key service restarted**: SIGTERM, down for a while, started again on
 *   its port;
 * - **API 500s**: a share of every API request answered 500 for a window;
 * - **API timeouts**: for a window, a share of every request never answered
 *   and a share of token and JoiningNode writes applied but never answered,
 *   until the join service's client gives up;
 * - **clients disconnecting**: attested requests given up mid-request (the
 *   call cancelled, or the whole connection closed);
 * - **slowloris**: connections from another address trickling a header
 *   block to the first replica;
 * - **oversized messages**: requests far above the join service's 256 KiB
 *   message limit, over gRPC and Connect.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { API, IssueJoinTicketRequestSchema } from "../../src/gen/join/join_pb.ts";
import { connectRpc, type RpcProtocol } from "../../src/rpc/client.ts";
import { AttestedTicketSource } from "../../src/bootstrapper/join_ticket_source.ts";
import type { LoadCluster } from "../bench/join_load_cluster.ts";
import { slowloris } from "./hostile_h2.ts";
import { generateNodeKeys, nodeCsr } from "./join_cluster.ts";
import { attestedJoinRequest, openJoinTicket } from "./join_request.ts";
import type { DeliveredTicket, Joiners } from "./node_joiners.ts";
import { sleep } from "../../src/async/sleep.ts";

/** How long faults last: short in CI, longer in the benchmark. */
export interface FaultScale {
  /** How long an outage or a fault window lasts. */
  windowMs: number;
  /** Share of requests a proxy fault hits while its window is open. */
  fraction: number;
  /** Disconnecting clients. */
  disconnects: number;
  /** Slowloris connections. */
  slowlorisConnections: number;
}

/** What a fault needs. */
export interface FaultContext {
  cluster: LoadCluster;
  joiners: Joiners;
  scale: FaultScale;
  /** Tickets the fault's own clients received (they must hold up like the joiners'). */
  extraTickets: DeliveredTicket[];
}

/** What injecting a fault did. */
interface Injected {
  /** When the fault ended (`performance.now()`): the outage over, the window closed. */
  endedAt: number;
  /** What the fault's own clients got, by outcome. */
  hostile?: Record<string, number>;
  /** Waits until the fault's after-effects are over (hung calls answered, a replica back). */
  settle?: () => Promise<void>;
  /** Facts worth reporting (e.g. how many requests a proxy fault hit). */
  notes?: Record<string, number | string>;
}

/** One fault. */
export interface Fault {
  /** Its name in results and tables. */
  name: string;
  /** Injects it; resolves once it ended. */
  inject(context: FaultContext): Promise<Injected>;
}

/** What one fault did to the callers, measured by {@linkcode runFault}. */
export interface FaultOutcome {
  fault: string;
  /** `performance.now()` when it started, ended, and when its after-effects were over. */
  startedAt: number;
  endedAt: number;
  settledAt: number;
  /**
   * The joiners' attempts sent from its start until it settled: "OK" per
   * ticket delivered then, else the Connect code.
   */
  callers: Record<string, number>;
  /** The joiners' failures by code and the client's reason, e.g. "Unavailable/unreachable". */
  failures: Record<string, number>;
  /** One message a node logged, per key of `failures` (what an operator reads). */
  messages: Record<string, string>;
  /** Nodes that got their ticket after at least one failed attempt, in that time. */
  succeededAfterRetry: number;
  /** What the fault's own clients got. */
  hostile?: Record<string, number>;
  /**
   * From the fault's end until a fresh node (a probe asking the control
   * planes in order, every 100 ms) got a ticket: how long the service
   * needed, whatever the joiners were still waiting for. Undefined: none
   * within the wait.
   */
  recoveryMs: number | undefined;
  /** From the fault's end to the next ticket a joiner received. */
  nextJoinerTicketMs: number | undefined;
  /** The last failed attempt of a joiner after the fault's end, relative to it (0: none). */
  lastFailureAfterEndMs: number;
  notes?: Record<string, number | string>;
}

/** How long {@linkcode runFault} waits for the first ticket after a fault. */
const RECOVERY_WAIT_MS = 30_000;

/** Injects `fault` while the joiners run, and measures it. */
export async function runFault(context: FaultContext, fault: Fault): Promise<FaultOutcome> {
  const { joiners } = context;
  const startedAt = performance.now();
  const injected = await fault.inject(context);
  const { endedAt } = injected;
  const probed = await probeUntilTicket(context);
  const deadline = endedAt + RECOVERY_WAIT_MS;
  while (!joiners.tickets.some((t) => t.at > endedAt) && performance.now() < deadline) await sleep(20);
  const nextJoinerTicket = joiners.tickets.find((t) => t.at > endedAt);
  await injected.settle?.();
  // Attempts still running when the fault settled end within a moment; the next fault's start cuts off.
  await sleep(250);
  const settledAt = performance.now();

  const during = <T extends { at: number }>(items: readonly T[]) =>
    items.filter((item) => item.at >= startedAt && item.at <= settledAt);
  const tickets = during(joiners.tickets);
  // Attempts sent during the fault: one sent before it (e.g. hung by the previous fault) is not its doing.
  const failures = joiners.failures.filter((f) => f.startedAt >= startedAt && f.startedAt <= settledAt);
  const callers: Record<string, number> = tickets.length > 0 ? { OK: tickets.length } : {};
  const detail: Record<string, number> = {};
  const messages: Record<string, string> = {};
  for (const failure of failures) {
    callers[failure.code] = (callers[failure.code] ?? 0) + 1;
    const key = `${failure.code}/${failure.reason}`;
    detail[key] = (detail[key] ?? 0) + 1;
    messages[key] ??= failure.message;
  }
  const afterEnd = failures.filter((f) => f.at > endedAt).map((f) => f.at - endedAt);
  return {
    fault: fault.name,
    startedAt,
    endedAt,
    settledAt,
    callers,
    failures: detail,
    messages,
    succeededAfterRetry: tickets.filter((t) => t.failedAttempts > 0).length,
    hostile: injected.hostile,
    recoveryMs: probed && probed - endedAt,
    nextJoinerTicketMs: nextJoinerTicket && nextJoinerTicket.at - endedAt,
    lastFailureAfterEndMs: Math.max(0, ...afterEnd),
    notes: injected.notes,
  };
}

/**
 * A fresh node asking for a ticket as the join client does (the control
 * planes in list order) every 100 ms until one is issued; resolves to when
 * (`performance.now()`), or undefined after {@linkcode RECOVERY_WAIT_MS}.
 * Its tickets join the context's extra tickets.
 */
async function probeUntilTicket(context: FaultContext): Promise<number | undefined> {
  const { cluster, extraTickets } = context;
  const source = new AttestedTicketSource({ issuer: cluster.issuer });
  const keys = await generateNodeKeys();
  const started = performance.now();
  for (let attempt = 0; performance.now() - started < RECOVERY_WAIT_MS; attempt++) {
    const nodeName = `probe-${Math.round(started)}-${attempt}`;
    const certificateRequest = await nodeCsr({
      nodeName,
      ips: [`10.198.${attempt >> 8}.${attempt & 255}`],
      keys,
    });
    for (const address of cluster.joinServiceAddresses) {
      const endpoint = `${address}:${cluster.joinServicePort}`;
      try {
        const ticket = await source.joinTicket(endpoint, {
          diskUuid: crypto.randomUUID(),
          certificateRequest,
          isControlPlane: false,
        }, { signal: AbortSignal.timeout(RECOVERY_WAIT_MS) });
        const at = performance.now();
        extraTickets.push({
          at,
          startedAt: started,
          nodeName,
          token: ticket.token,
          endpoint,
          failedAttempts: attempt,
        });
        return at;
      } catch {
        // The next control plane, or the next attempt.
      }
    }
    await sleep(100);
  }
  return undefined;
}

/** The key service stopped (SIGTERM), down for the window, started again on its port. */
export const keyServiceRestart: Fault = {
  name: "key service restarted",
  async inject({ cluster, scale }) {
    await cluster.keyService.stop();
    await sleep(scale.windowMs);
    await cluster.keyService.start();
    return { endedAt: performance.now() };
  },
};

/** A share of every API request answered 500 InternalError for the window. */
export const apiErrors: Fault = {
  name: "API server 500s",
  async inject({ cluster, scale }) {
    const proxy = requireProxy(cluster);
    const before = proxy.counts["error-500"];
    const remove = proxy.inject({ fault: "error-500", fraction: scale.fraction });
    await sleep(scale.windowMs);
    remove();
    return {
      endedAt: performance.now(),
      notes: { "requests answered 500": proxy.counts["error-500"] - before },
    };
  },
};

/** The paths of the two writes of a ticket: the token Secret and the worker's JoiningNode. */
const TICKET_WRITES = /\/secrets$|\/joiningnodes\/[^/]+$/;

/**
 * For the window: a share of every API request never answered, and a share
 * of token and JoiningNode writes applied but never answered; settles once
 * the join services' client gave up on every hung request.
 */
export const apiTimeouts: Fault = {
  name: "API server timeouts",
  async inject({ cluster, scale }) {
    const proxy = requireProxy(cluster);
    const before = { hang: proxy.counts.hang, afterWrite: proxy.counts["hang-after-write"] };
    const removers = [
      proxy.inject({
        fault: "hang-after-write",
        methods: ["POST", "PATCH"],
        path: TICKET_WRITES,
        fraction: scale.fraction,
      }),
      proxy.inject({ fault: "hang", fraction: scale.fraction / 2 }),
    ];
    await sleep(scale.windowMs);
    for (const remove of removers) remove();
    const endedAt = performance.now();
    return {
      endedAt,
      notes: {
        "requests never answered": proxy.counts.hang - before.hang,
        "writes applied, answer lost": proxy.counts["hang-after-write"] - before.afterWrite,
      },
      async settle() {
        while (proxy.hanging > 0) await sleep(50);
      },
    };
  },
};

/**
 * SIGKILL of the replica every node asks first; it is started again after
 * the window, and the fault settles once it issued a ticket again.
 */
export const replicaKilled: Fault = {
  name: "join-service replica killed",
  async inject({ cluster, joiners, scale }) {
    await cluster.joinServices[0].stop("SIGKILL");
    const endedAt = performance.now();
    return {
      endedAt,
      async settle() {
        await sleep(scale.windowMs);
        const restarted = await cluster.restartJoinService(0);
        const endpoint = new URL(restarted.url).host;
        const since = performance.now();
        const deadline = since + RECOVERY_WAIT_MS;
        while (!joiners.tickets.some((t) => t.at > since && t.endpoint === endpoint)) {
          if (performance.now() > deadline) {
            throw new Error(`the restarted replica ${endpoint} issued no ticket`);
          }
          await sleep(20);
        }
      },
    };
  },
};

/**
 * Clients that give up mid-request: each sends an attested request to the
 * first replica and cancels the call, or closes its whole connection, after
 * a random 0–100 ms (a ticket takes tens of ms under load, so they give up
 * in every step of it). A client whose answer came first keeps its ticket.
 */
export const clientDisconnects: Fault = {
  name: "clients disconnecting mid-request",
  async inject(context) {
    const { cluster, scale, extraTickets } = context;
    const hostile: Record<string, number> = {};
    const count = (outcome: string) => hostile[outcome] = (hostile[outcome] ?? 0) + 1;
    const keys = await generateNodeKeys();
    const disconnect = async (i: number) => {
      const connection = connectRpc({ baseUrl: cluster.joinServices[0].url, skipServerVerification: true });
      try {
        const client = createClient(API, connection.transport);
        const nodeName = `gone-${Math.round(performance.now())}-${i}`;
        // Its challenge: more clients than an address may hold connections (64) are turned away here.
        const prepared = await attestedJoinRequest({
          issuer: cluster.issuer,
          client,
          diskUuid: crypto.randomUUID(),
          certificateRequest: await nodeCsr({ nodeName, ips: [`10.199.${i >> 8}.${i & 255}`], keys }),
        }).catch((error: unknown) => {
          count(`no challenge (${codeOf(error)})`);
          return undefined;
        });
        if (!prepared) return;
        const closeConnection = i % 2 === 1;
        const cancel = new AbortController();
        const giveUp = setTimeout(
          () => closeConnection ? connection.close() : cancel.abort(),
          Math.random() * 100,
        );
        const startedAt = performance.now();
        try {
          const response = await client.issueJoinTicket(prepared.request, { signal: cancel.signal });
          const ticket = await openJoinTicket(response, prepared.bundle);
          extraTickets.push({
            at: performance.now(),
            startedAt,
            nodeName,
            token: ticket.token,
            endpoint: new URL(cluster.joinServices[0].url).host,
            failedAttempts: 0,
          });
          count("OK (answered before giving up)");
        } catch (error) {
          count(
            closeConnection
              ? "connection closed by the client"
              : `cancelled by the client (${codeOf(error)})`,
          );
        } finally {
          clearTimeout(giveUp);
        }
      } finally {
        connection.close();
      }
    };
    // At most DISCONNECTING_AT_ONCE at a time: with the joiners, all from 127.0.0.1, they stay under the
    // join service's 64 connections per address, so the fault is the disconnects, not that cap.
    let next = 0;
    await Promise.all(Array.from({ length: Math.min(DISCONNECTING_AT_ONCE, scale.disconnects) }, async () => {
      for (let i = next++; i < scale.disconnects; i = next++) await disconnect(i);
    }));
    return { endedAt: performance.now(), hostile };
  },
};

/** Disconnecting clients at once. */
const DISCONNECTING_AT_ONCE = 24;

/** Where slowloris connects from: not the joiners' address, whose per-peer connection cap it would use up. */
const SLOWLORIS_ADDRESS = "127.0.0.3";

/**
 * Slowloris against the first replica for the window: connections from
 * another address each trickling a header block one byte every 200 ms.
 */
export const slowlorisFault: Fault = {
  name: "slowloris",
  async inject({ cluster, scale }) {
    const service = cluster.joinServices[0];
    const url = new URL(service.url);
    const result = await slowloris({
      hostname: url.hostname,
      port: Number(url.port),
      tls: { caCerts: [cluster.joinCaPem] },
      path: "/join.API/GetChallenge",
      message: new Uint8Array(),
    }, {
      connections: scale.slowlorisConnections,
      localAddress: SLOWLORIS_ADDRESS,
      byteIntervalMs: 200,
      durationMs: scale.windowMs,
    });
    return {
      endedAt: performance.now(),
      hostile: {
        "connections established": result.established,
        "closed by the service": result.closed,
        "refused (per-peer cap)": scale.slowlorisConnections - result.established,
      },
    };
  },
};

/** Request messages above the join service's 256 KiB limit, over gRPC and Connect. */
export const oversizedMessages: Fault = {
  name: "oversized messages",
  async inject({ cluster }) {
    const hostile: Record<string, number> = {};
    const cases: [RpcProtocol, number][] = [["grpc", 300 << 10], ["connect", 300 << 10], ["grpc", 8 << 20]];
    for (const [protocol, size] of cases) {
      const connection = connectRpc({
        baseUrl: cluster.joinServices[0].url,
        protocol,
        skipServerVerification: true,
      });
      try {
        const client = createClient(API, connection.transport);
        const request = create(IssueJoinTicketRequestSchema, {
          diskUuid: crypto.randomUUID(),
          certificateRequest: new Uint8Array(size),
        });
        const outcome = await client.issueJoinTicket(request).then(() => "OK", (error) => codeOf(error));
        const key = `${protocol} ${size >> 10} KiB: ${outcome}`;
        hostile[key] = (hostile[key] ?? 0) + 1;
      } finally {
        connection.close();
      }
    }
    return { endedAt: performance.now(), hostile };
  },
};

/** Every fault, in the order the test and the benchmark inject them. */
export const ALL_FAULTS: readonly Fault[] = [
  replicaKilled,
  keyServiceRestart,
  apiErrors,
  apiTimeouts,
  clientDisconnects,
  slowlorisFault,
  oversizedMessages,
];

function requireProxy(cluster: LoadCluster) {
  if (!cluster.apiProxy) throw new Error("this fault needs the cluster's API fault proxy");
  return cluster.apiProxy;
}

function codeOf(error: unknown): string {
  return error instanceof ConnectError
    ? Code[error.code]
    : error instanceof Error
    ? error.name
    : String(error);
}

/** A stretch of a run that orphans are counted for: a fault, or e.g. the load stopping. */
export interface RunWindow {
  fault: string;
  startedAt: number;
  settledAt: number;
}

/**
 * Orphaned tokens per window: each orphan counts for the window (a fault
 * from its start until it settled, or another stretch) in which it was
 * first listed, else for "between faults".
 */
export function orphansByFault(
  windows: readonly RunWindow[],
  orphans: readonly { firstSeen: number }[],
): Record<string, number> {
  const counts: Record<string, number> = Object.fromEntries(windows.map((w) => [w.fault, 0]));
  for (const orphan of orphans) {
    const window = windows.find((w) => orphan.firstSeen >= w.startedAt && orphan.firstSeen <= w.settledAt);
    const key = window?.fault ?? "between faults";
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

/**
 * How long the joiners get to finish the nodes they are joining when the
 * load stops: those given up mid-request are the "clients disconnecting"
 * fault's business, and their tokens (whose answers were on the way) would
 * only wait for the TTL.
 */
export const STOP_GRACE_MS = 5000;

/**
 * How long to wait after stopping the joiners before the last listing: the
 * services undo the tokens of the requests the joiners gave up on (an undo
 * may take up to 5 s when the API server does not answer; it does here).
 */
export const SETTLE_AFTER_STOP_MS = 1000;

/** The name of the window in which the joiners are stopped (each gives up mid-request). */
export const LOAD_STOPPED = "load stopped (joiners gave up mid-request)";
