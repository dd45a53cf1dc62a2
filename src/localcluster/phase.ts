/**
 * A local cluster node's phase, read off its bootstrapper's JSON log lines
 * as they arrive: what the live view and `cluster status` show.
 *
 * @module
 */

/** Where a node is. */
export type NodePhase =
  /** Its TPM is booting and its bootstrapper starting. */
  | "starting"
  /** The bootstrapper listens for Init and looks for a join service. */
  | "waiting"
  /** It sent its attestation to a join service (or, first node, received Init). */
  | "attesting"
  /** A join service refused it; it keeps asking. */
  | "refused"
  /** It holds a ticket (or the Init) and runs kubeadm. */
  | "joining"
  /** It is part of the cluster. */
  | "joined"
  /** Its bootstrapper ended without joining; the node needs to be wiped. */
  | "failed";

/** A node's phase with the reason of the last setback, if any. */
export interface PhaseState {
  /** Where the node is. */
  phase: NodePhase;
  /** Why it waits, was refused, or failed (a log message, never a secret: the bootstrapper logs none). */
  reason?: string;
}

/** Why a control plane whose rejoin serves the operator's recovery waits. */
export const WAITING_FOR_RECOVERY = "for a join service, or the operator's recovery (cli recover)";

/** Join failures that only mean "no join service to talk to yet". */
const UNREACHABLE = new Set(["unreachable", "deadline"]);

/**
 * The phase after bootstrapper log line `line`, given the `current` one.
 * Lines that say nothing about the phase (and lines that are not JSON)
 * leave it as it is.
 */
export function nextPhase(current: PhaseState, line: string): PhaseState {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(line);
  } catch {
    return current;
  }
  if (typeof entry !== "object" || entry === null || typeof entry.msg !== "string") return current;
  const msg = entry.msg;
  const error = typeof entry.error === "string" ? entry.error : undefined;
  switch (msg) {
    case "listening":
      return current.phase === "starting"
        ? { phase: "waiting", reason: "for Init or a join service" }
        : current;
    case "recovery server listening":
      return { phase: "waiting", reason: WAITING_FOR_RECOVERY };
    case "joining as":
    case "rejoining":
    case "Init called":
      return { phase: "attesting" };
    case "join service refused or unreachable":
    case "rejoin ticket refused, unreachable or unusable":
    case "join ticket refused before the node lock":
      if (typeof entry.reason === "string" && UNREACHABLE.has(entry.reason)) {
        // A node that waits for a recovery still does: the join services are the other way out.
        return current.reason === WAITING_FOR_RECOVERY
          ? current
          : { phase: "waiting", reason: "join service unreachable" };
      }
      return { phase: "refused", reason: error ?? msg };
    case "received a join ticket":
    case "running kubeadm init":
      return { phase: "joining" };
    case "joined the cluster":
    case "Init succeeded":
    case "rejoined: PCR 15 bound to the cluster again":
    case "node is bound to a cluster (PCR 15 set): starting the kubelet":
      return { phase: "joined" };
    default:
      if (entry.level === "error" && current.phase !== "joined") {
        return { phase: "failed", reason: error === undefined ? msg : `${msg}: ${error}` };
      }
      return current;
  }
}
