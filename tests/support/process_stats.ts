/**
 * Resident memory, CPU time and open files of another process (and the
 * CPU time of the whole machine), for tests and benchmarks. Deno lets only
 * --allow-all read another process's /proc entries, so `cat` and `ls` (in
 * the test permission set's run list) read them.
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
  const status = await readProc(pid, "status");
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(status)?.[1] ?? NaN);
  const memory = { rssBytes: kib("VmRSS") * 1024, peakRssBytes: kib("VmHWM") * 1024 };
  if (!(memory.rssBytes > 0)) throw new Error(`no memory figures for process ${pid}`);
  return memory;
}

/**
 * Linux reports CPU times in /proc in USER_HZ ticks, which the kernel fixes
 * at 100 per second for user space on every architecture Deno runs on.
 */
const USER_HZ = 100;

/**
 * CPU seconds `pid` has used so far, user and system, all its threads
 * (`utime + stime` of /proc/<pid>/stat; 10 ms resolution).
 */
export async function processCpuSeconds(pid: number): Promise<number> {
  return statSeconds(await readProc(pid, "stat"), [14, 15]);
}

/**
 * CPU seconds of `pid`'s children that have ended and been waited for, user
 * and system (`cutime + cstime` of /proc/<pid>/stat; 10 ms resolution): for
 * `Deno.pid`, what the processes it started and saw end have used in all.
 */
export async function childrenCpuSeconds(pid: number): Promise<number> {
  return statSeconds(await readProc(pid, "stat"), [16, 17]);
}

/** `utime + stime` of one /proc `stat` line (a process's or a thread's), in seconds. */
function statCpuSeconds(stat: string): number {
  return statSeconds(stat, [14, 15]);
}

/** The sum of the tick fields `numbers` (numbered as in proc(5)) of one /proc `stat` line, in seconds. */
function statSeconds(stat: string, numbers: number[]): number {
  // Fields after the command name, which is in parentheses and may contain spaces, start with field 3.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = numbers.reduce((sum, number) => sum + Number(fields[number - 3]), 0);
  if (!Number.isFinite(ticks)) throw new Error(`no CPU times in ${stat.slice(0, stat.indexOf(" "))}'s stat`);
  return ticks / USER_HZ;
}

/** CPU seconds of a process's threads, by what runs on them. */
export interface ThreadCpuSeconds {
  /** The main thread: the JavaScript event loop, V8's work on it included (its share of garbage collection). */
  main: number;
  /** V8's worker threads ("V8 DefaultWorke"): concurrent and parallel garbage collection, compilation. */
  v8Workers: number;
  /**
   * Every other thread, those that ended included (the runtime's thread pool: WebCrypto,
   * blocking file and DNS calls).
   */
  others: number;
}

/**
 * `pid`'s CPU seconds by thread kind. A thread that has ended no longer has a
 * /proc entry, but its time stays in the process's total, so `others` is the
 * total less the main thread and V8's workers.
 */
export async function processThreadCpuSeconds(pid: number): Promise<ThreadCpuSeconds> {
  const [total, tasks] = await Promise.all([
    processCpuSeconds(pid),
    runCat(["sh", "-c", `cat /proc/${pid}/task/*/stat`], `/proc/${pid}/task/*/stat`),
  ]);
  let main = 0;
  let v8Workers = 0;
  for (const stat of tasks.split("\n")) {
    if (!stat) continue;
    const seconds = statCpuSeconds(stat);
    const tid = Number(stat.slice(0, stat.indexOf(" ")));
    if (tid === pid) main += seconds;
    else if (stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")).startsWith("V8 ")) v8Workers += seconds;
  }
  return { main, v8Workers, others: Math.max(0, total - main - v8Workers) };
}

/**
 * CPU seconds the whole machine has been busy so far, over all cores and
 * processes (/proc/stat: user, nice, system, irq, softirq and steal).
 */
export async function machineCpuSeconds(): Promise<number> {
  const [label, ...ticks] = (await readProcFile("/proc/stat")).split("\n")[0].trim().split(/\s+/);
  const [user, nice, system, , , irq, softirq, steal] = ticks.map(Number);
  const busy = user + nice + system + irq + softirq + (steal ?? 0);
  if (label !== "cpu" || !Number.isFinite(busy)) throw new Error("no CPU times in /proc/stat");
  return busy / USER_HZ;
}

/** How many file descriptors (files, sockets, pipes) `pid` has open: the entries of /proc/<pid>/fd. */
export async function processOpenFiles(pid: number): Promise<number> {
  const { stdout, success } = await new Deno.Command("ls", {
    args: [`/proc/${pid}/fd`],
    clearEnv: true,
    stdout: "piped",
    stderr: "null",
  }).output();
  if (!success) throw new Error(`cannot list /proc/${pid}/fd`);
  return new TextDecoder().decode(stdout).split("\n").filter((line) => line !== "").length;
}

function readProc(pid: number, file: "status" | "stat"): Promise<string> {
  return readProcFile(`/proc/${pid}/${file}`);
}

function readProcFile(path: string): Promise<string> {
  return runCat(["cat", path], path);
}

/** Runs `command` (cat, or sh for a glob) and returns what it printed; `what` names it in an error. */
async function runCat([command, ...args]: string[], what: string): Promise<string> {
  const { stdout, success } = await new Deno.Command(command, {
    args,
    clearEnv: true,
    stdout: "piped",
    stderr: "null",
  }).output();
  if (!success) throw new Error(`cannot read ${what}`);
  return new TextDecoder().decode(stdout);
}
