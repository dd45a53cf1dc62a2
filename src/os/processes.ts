/**
 * Other processes by PID, through `ps` and `kill`: Deno reads no
 * `/proc/<pid>/` file without all permissions, and `Deno.kill` needs
 * permission to run anything, so a component with a scoped run list asks
 * these two tools instead.
 *
 * @module
 */
import { runTool } from "./run_tool.ts";

/** The command line of process `pid`, or undefined when there is no such process. */
export async function commandLineOf(pid: number): Promise<string | undefined> {
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  const output = await runTool("ps", ["-o", "args=", "-p", String(pid)]);
  const line = output.stdout.trim();
  return output.success && line !== "" ? line : undefined;
}

/**
 * When process `pid` started, as `ps` prints it (`lstart`, to the second), or
 * undefined when there is no such process: with the PID it names one process,
 * where a PID alone may have been reused.
 */
export async function startTimeOf(pid: number): Promise<string | undefined> {
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  const output = await runTool("ps", ["-o", "lstart=", "-p", String(pid)], {
    env: { LC_ALL: "C", TZ: "UTC" },
  });
  const line = output.stdout.trim();
  return output.success && line !== "" ? line : undefined;
}

/** Sends `signal` to process `pid`; false when there is no such process (any more). */
export async function signalProcess(pid: number, signal: "SIGTERM" | "SIGKILL"): Promise<boolean> {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  return (await runTool("kill", [`-${signal.slice(3)}`, String(pid)])).success;
}
