/**
 * The join service's audit trail: one entry per ticket decision, issued or
 * rejected, with what was decided about whom. Entries hold no secret.
 *
 * @module
 */
import type { MeasurementMismatch } from "../attestation/attestation.ts";
import type { Logger } from "../log/logger.ts";

/** The ticket methods. */
export type TicketMethod = "IssueJoinTicket" | "IssueRejoinTicket";

/** The role a request asks for; a rejoin has none. */
export type RequestRole = "worker" | "control-plane" | "rejoin";

/** One decision. */
export interface AuditEntry {
  /** The ticket method. */
  method: TicketMethod;
  /** The peer's address as the connection reported it. */
  peer: string;
  /** Attestation variant of the config the request was judged by. */
  variant: string;
  /** Digest of that config's measurements. */
  measurementsDigest: string;
  /** The disk UUID as sent (shortened, control characters replaced). */
  diskUuid: string;
  /** The role the request asks for. */
  role: RequestRole;
  /** The node name from its accepted CSR. */
  nodeName?: string;
  /** Hex SHA-256 of the node's attestation key, once known (also on rejections after the key was parsed). */
  keyDigest?: string;
  /** Hex SHA-256 of the measurements the node reported, once verified. */
  reportedMeasurementsDigest?: string;
  /** Warn-only measurement mismatches the node passed with. */
  warnings?: MeasurementMismatch[];
  /** Whether the node got its ticket. */
  outcome: "issued" | "rejected";
  /** Why a request was rejected (a `JoinReason`). */
  reason?: string;
  /** The Connect code the node got. */
  code?: string;
  /** The message the node got. */
  error?: string;
}

/** Where audit entries go. */
export interface AuditLog {
  /** Records one decision; never throws. */
  write(entry: AuditEntry): void;
}

/** Audit entries as JSON log lines of `logger` (which adds `"log":"audit"` in the join service). */
export function auditLog(logger: Logger): AuditLog {
  return {
    write(entry) {
      logger.info(entry.outcome === "issued" ? "ticket issued" : "ticket rejected", {
        audit: true,
        ...entry,
      });
    },
  };
}

/** An audit entry with the time it was decided. */
export interface TimedAuditEntry extends AuditEntry {
  /** When it was decided, Unix milliseconds. */
  timeUnixMs: number;
}

/** How many decisions {@linkcode RecentDecisions} keeps by default. */
export const RECENT_DECISIONS_KEPT = 50;

/**
 * The most recent decisions, in memory, for `GetStatus` (the operator's
 * dashboard); the audit log stays the record. Keeps at most `limit`.
 */
export class RecentDecisions {
  readonly #limit: number;
  #entries: TimedAuditEntry[] = [];

  /** Keeps the last `limit` decisions (default {@linkcode RECENT_DECISIONS_KEPT}). */
  constructor(limit = RECENT_DECISIONS_KEPT) {
    if (!(limit > 0)) throw new RangeError(`RecentDecisions needs a positive limit, got ${limit}`);
    this.#limit = limit;
  }

  /** Records `entry`, decided at `timeUnixMs`. */
  add(entry: AuditEntry, timeUnixMs: number): void {
    this.#entries.unshift({ ...entry, timeUnixMs });
    if (this.#entries.length > this.#limit) this.#entries.length = this.#limit;
  }

  /** The decisions kept, newest first. */
  list(): readonly TimedAuditEntry[] {
    return this.#entries;
  }
}
