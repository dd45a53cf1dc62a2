/**
 * The invocation record: one JSON line per kubeadm invocation in
 * `<root>/var/lib/kubeadm-sim/invocations.jsonl` (0600), so tests can see
 * what the bootstrapper ran. Every credential (bootstrap tokens, certificate
 * keys, anything token-shaped) is `<redacted>` in every field.
 *
 * @module
 */
import { redactTokens } from "../kubernetes/bootstrap_token.ts";
import { rfc3339 } from "../rfc3339.ts";
import type { Command } from "./args.ts";
import type { Json } from "./documents.ts";
import { SIM_STATE_DIR, type SimRoot } from "./root.ts";

/** The record file, as a node path. */
export const RECORD_FILE = `${SIM_STATE_DIR}/invocations.jsonl`;

/** One line of the record. */
export interface InvocationRecord {
  /** When the invocation started (RFC 3339, UTC). */
  time: string;
  /** The arguments after the program name (redacted). */
  argv: string[];
  /** The command, e.g. "join"; undefined when the command line did not parse. */
  command?: Command;
  /** `--config` as given (a host path). */
  configPath?: string;
  /** The configuration's main settings (see the command modules), redacted. */
  summary?: Json;
  /** The configuration documents as parsed, redacted. */
  documents?: Json[];
  /** Phases run, in order. */
  phases: string[];
  /** The exit code. */
  exitCode: number;
  /** The error's reason and message when it failed. */
  error?: { reason: string; message: string };
}

/** Appends `record` to the record of `root`, with every string of `secrets` and every token-shaped text redacted. */
export async function appendRecord(
  root: SimRoot,
  record: InvocationRecord,
  secrets: readonly string[],
): Promise<void> {
  // As the secrets appear inside JSON strings: escaped.
  const escaped = secrets.flatMap((secret) => [secret, JSON.stringify(secret).slice(1, -1)]);
  await root.appendLine(RECORD_FILE, redactTokens(JSON.stringify(record), escaped));
}

/** The records of `root`, oldest first (tests call this). */
export async function readRecords(root: SimRoot): Promise<InvocationRecord[]> {
  const text = await root.readIfExists(RECORD_FILE) ?? "";
  return text.split("\n").filter((line) => line !== "").map((line) => JSON.parse(line) as InvocationRecord);
}

/** The current time for a record. */
export function recordTime(): string {
  return rfc3339(Date.now());
}
