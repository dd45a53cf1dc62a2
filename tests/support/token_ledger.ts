/**
 * Holds the Kubernetes API's bootstrap tokens and JoiningNodes against the
 * tickets nodes received, for fault tests and benchmarks: nothing may be
 * lost or half-created.
 *
 * The ledger lists the token Secrets and JoiningNodes every `intervalMs`
 * while load runs, and remembers each token it saw: when it was first and
 * last seen, its expiration. Then:
 *
 * - a **ticket without its token** is a delivered ticket whose token Secret
 *   (same ID and secret) was not seen at or after the ticket's arrival: a
 *   node would hold a token the API server does not know;
 * - a **ticket without its JoiningNode** is one whose node has no record;
 * - an **orphan** is a token no delivered ticket holds and that the join
 *   service did not delete again: still there at its expiration (the token
 *   cleaner's to delete) or at the last listing. One the service deleted
 *   (gone well before it expired) is a failed ticket cleaned up, not an
 *   orphan. Every orphan must expire within the TTL of its creation and be
 *   gone once the cleaner has run after that ({@linkcode TokenLedger.waitForCleaner}).
 *
 * @module
 */
import { BOOTSTRAP_TOKEN_SECRET_TYPE } from "../../src/joinservice/bootstraptoken.ts";
import { JOINING_NODES } from "../../src/joinservice/joiningnodes.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../../src/kubernetes/names.ts";
import type { DeliveredTicket } from "./node_joiners.ts";

/** What the ledger knows of one token Secret. */
export interface SeenToken {
  id: string;
  secret: string;
  /** `performance.now()` of the first listing that held it. */
  firstSeen: number;
  /** `performance.now()` of the last listing that held it. */
  lastSeen: number;
  /** Its `expiration`, as `performance.now()` time. */
  expiresAt: number;
  /** Its expiration minus its creation time (the API's second-precision `creationTimestamp`), ms. */
  lifetimeMs: number;
}

/** The ledger's verdict over a set of tickets. */
export interface LedgerReport {
  /** Tickets checked. */
  tickets: number;
  /** Node names of delivered tickets whose token Secret was missing (or held another secret). */
  ticketsWithoutToken: string[];
  /** Node names of delivered tickets without a JoiningNode. */
  ticketsWithoutJoiningNode: string[];
  /** Tokens no ticket holds that the service left in the API. */
  orphans: SeenToken[];
  /** Tokens no ticket holds that the service deleted again. */
  cleanedUp: number;
}

/** Options for {@linkcode startTokenLedger}. */
export interface TokenLedgerOptions {
  /** Lists a collection URL path of the API (straight, not through a fault proxy). */
  list<T = Record<string, unknown>>(path: string): Promise<T[]>;
  /** How often to list; default 250 ms (well within any token's TTL). */
  intervalMs?: number;
}

/** A running ledger. */
export interface TokenLedger {
  /** Every token seen so far, by ID. */
  readonly tokens: ReadonlyMap<string, SeenToken>;
  /** Lists once more now (e.g. after the load stopped). */
  poll(): Promise<void>;
  /** The verdict over `tickets` with what was seen so far. */
  report(tickets: readonly DeliveredTicket[]): LedgerReport;
  /**
   * Waits until every token of `tokens` (default: every token seen) has
   * expired and the API's token cleaner (`cleanupIntervalMs`) has run after
   * that, listing meanwhile; resolves to those of them still there.
   */
  waitForCleaner(cleanupIntervalMs: number, tokens?: readonly SeenToken[]): Promise<SeenToken[]>;
  /** Stops listing. */
  stop(): Promise<void>;
}

const SECRETS_PATH = `/api/v1/namespaces/${KUBE_SYSTEM_NAMESPACE}/secrets`;
const JOINING_NODES_PATH = `/apis/${JOINING_NODES.group}/${JOINING_NODES.version}/${JOINING_NODES.plural}`;
/** Slack for listing intervals and the expiration's second precision. */
const SLACK_MS = 1000;

interface ListedSecret {
  type?: string;
  metadata: { name: string; creationTimestamp?: string };
  data?: Record<string, string>;
}

/** Starts listing. */
export function startTokenLedger(options: TokenLedgerOptions): TokenLedger {
  const intervalMs = options.intervalMs ?? 250;
  const tokens = new Map<string, SeenToken>();
  const joiningNodes = new Set<string>();
  /** Token IDs in the last listing. */
  let present = new Set<string>();
  let lastPoll = 0;
  // `performance.now()` of wall-clock time `ms`: expirations are wall-clock instants.
  const monotonic = (ms: number) => performance.now() - (Date.now() - ms);
  const decode = (value: string | undefined) =>
    value === undefined ? "" : new TextDecoder().decode(Uint8Array.fromBase64(value));

  const poll = async () => {
    const [secrets, nodes] = await Promise.all([
      options.list<ListedSecret>(SECRETS_PATH),
      options.list<{ metadata: { name: string } }>(JOINING_NODES_PATH),
    ]);
    const now = performance.now();
    present = new Set();
    for (const secret of secrets) {
      if (secret.type !== BOOTSTRAP_TOKEN_SECRET_TYPE) continue;
      const id = decode(secret.data?.["token-id"]);
      const expiration = Date.parse(decode(secret.data?.expiration));
      present.add(id);
      const seen = tokens.get(id);
      if (seen) {
        seen.lastSeen = now;
        continue;
      }
      tokens.set(id, {
        id,
        secret: decode(secret.data?.["token-secret"]),
        firstSeen: now,
        lastSeen: now,
        expiresAt: monotonic(expiration),
        lifetimeMs: expiration - Date.parse(secret.metadata.creationTimestamp ?? ""),
      });
    }
    for (const node of nodes) joiningNodes.add(node.metadata.name);
    lastPoll = now;
  };

  let stopped = false;
  const running = (async () => {
    while (!stopped) {
      await poll().catch(() => {}); // the API itself is not under fault: a failed listing is retried
      await new Promise((resolve) => setTimeout(resolve, intervalMs));
    }
  })();

  const report = (tickets: readonly DeliveredTicket[]): LedgerReport => {
    const held = new Set<string>();
    const ticketsWithoutToken: string[] = [];
    const ticketsWithoutJoiningNode: string[] = [];
    for (const ticket of tickets) {
      const [id, secret] = ticket.token.split(".");
      held.add(id);
      const seen = tokens.get(id);
      if (!seen || seen.secret !== secret || seen.lastSeen < ticket.at) {
        ticketsWithoutToken.push(ticket.nodeName);
      }
      if (!joiningNodes.has(ticket.nodeName)) ticketsWithoutJoiningNode.push(ticket.nodeName);
    }
    const orphans: SeenToken[] = [];
    let cleanedUp = 0;
    for (const token of tokens.values()) {
      if (held.has(token.id)) continue;
      const deletedByService = !present.has(token.id) && token.lastSeen < token.expiresAt - SLACK_MS;
      if (deletedByService) cleanedUp++;
      else orphans.push(token);
    }
    return { tickets: tickets.length, ticketsWithoutToken, ticketsWithoutJoiningNode, orphans, cleanedUp };
  };

  return {
    tokens,
    poll,
    report,
    async waitForCleaner(cleanupIntervalMs, waitFor = [...tokens.values()]) {
      const latest = Math.max(0, ...waitFor.map((token) => token.expiresAt));
      const until = latest + cleanupIntervalMs + SLACK_MS;
      while (performance.now() < until || lastPoll < until) {
        await new Promise((resolve) => setTimeout(resolve, intervalMs));
      }
      await poll();
      return waitFor.filter((token) => present.has(token.id));
    },
    async stop() {
      stopped = true;
      await running;
    },
  };
}
