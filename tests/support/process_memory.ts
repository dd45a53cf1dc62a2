/**
 * Resident memory of another process, for tests and benchmarks. Deno lets
 * only --allow-all read another process's /proc entries, so `cat` (in the
 * test permission set's run list) reads them.
 *
 * @module
 */

/** A process's resident set size now and at its peak, in bytes. */
export interface ProcessMemory {
  /** VmRSS. */
  rssBytes: number;
  /** VmHWM: the highest RSS so far. */
  peakRssBytes: number;
}

/** Reads `pid`'s memory from /proc/<pid>/status. */
export async function processMemory(pid: number): Promise<ProcessMemory> {
  const { stdout, success } = await new Deno.Command("cat", {
    args: [`/proc/${pid}/status`],
    clearEnv: true,
    stdout: "piped",
    stderr: "null",
  }).output();
  const status = new TextDecoder().decode(stdout);
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(status)?.[1] ?? NaN);
  const memory = { rssBytes: kib("VmRSS") * 1024, peakRssBytes: kib("VmHWM") * 1024 };
  if (!success || !(memory.rssBytes > 0)) throw new Error(`no memory figures for process ${pid}`);
  return memory;
}
