/**
 * Failure injection for tests: `<root>/var/lib/kubeadm-sim/failures.json`
 * maps a command (`"join"`, `"init"`, `"init phase preflight"`, …) to
 * `{ "count": N, "message": "…", "exitCode": 1 }`. The next N invocations
 * of that command fail with that message and exit code (default 1) after
 * their configuration was read and validated, before they write anything;
 * each one counts the entry down, so "fail twice, then succeed" is
 * `{"join": {"count": 2, "message": "simulated failure"}}`.
 *
 * @module
 */
import type { Command } from "./args.ts";
import { KubeadmSimError } from "./errors.ts";
import { SIM_STATE_DIR, type SimRoot } from "./root.ts";

/** The failure-injection file, as a node path. */
export const FAILURES_FILE = `${SIM_STATE_DIR}/failures.json`;

/** Failures to inject into one command. */
export interface InjectedFailure {
  /** How many more invocations fail. */
  count: number;
  /** The message they print (kubeadm-style, e.g. "error execution phase kubelet-start: …"). */
  message: string;
  /** Their exit code; default 1. */
  exitCode?: number;
}

/** Writes the failure-injection file of `root` (tests call this). */
export async function injectFailures(
  root: SimRoot,
  failures: Partial<Record<Command, InjectedFailure>>,
): Promise<void> {
  await root.write(FAILURES_FILE, JSON.stringify(failures, null, 2), { mode: 0o644 });
}

/**
 * The injected failure for this invocation of `command`, counted down in
 * the file, or undefined when none is due. A file that does not parse is
 * a "usage" error naming it.
 */
export async function takeInjectedFailure(
  root: SimRoot,
  command: Command,
): Promise<KubeadmSimError | undefined> {
  const text = await root.readIfExists(FAILURES_FILE);
  if (text === undefined) return undefined;
  let failures: Record<string, InjectedFailure>;
  try {
    failures = JSON.parse(text);
    if (typeof failures !== "object" || failures === null || Array.isArray(failures)) {
      throw new Error("not an object");
    }
  } catch (error) {
    throw new KubeadmSimError(
      "usage",
      `kubeadm-sim: ${root.path(FAILURES_FILE)}: ${(error as Error).message}`,
    );
  }
  const failure = failures[command];
  if (!failure || !(failure.count > 0)) return undefined;
  failures[command] = { ...failure, count: failure.count - 1 };
  await root.write(FAILURES_FILE, JSON.stringify(failures, null, 2), { mode: 0o644 });
  return new KubeadmSimError("injected", String(failure.message ?? "injected failure"), {
    exitCode: Number.isInteger(failure.exitCode) && failure.exitCode! > 0 ? failure.exitCode : 1,
  });
}
