/**
 * Runs service processes (the local cluster's nodes and services, and the
 * tests' real processes): start one, wait until a log line says it is ready
 * (and which port it bound), read its output, stop it.
 *
 * Processes get a clean environment ({@linkcode cleanEnv}) and are always
 * reaped: a process that never gets ready is killed before the error is
 * thrown. Programs are spawned by name (e.g. "deno", "buf"), so they must be
 * on PATH (npm test puts node_modules/.bin there) and in the caller's
 * permission set's run list.
 *
 * @module
 */

/** Deno's notice about config-file permission sets; not the service's output. */
const DENO_NOTICE = /^Warning Permissions in the config file is an experimental feature/;

/** Options for {@linkcode startService}. */
export interface StartServiceOptions {
  /**
   * Matches the stderr or stdout line saying the service is ready. Its group
   * named `port`, or else its first group, is the bound port.
   */
  readyMatch: RegExp;
  /** Extra environment variables on top of {@linkcode cleanEnv}. */
  env?: Record<string, string>;
  /** Working directory; default the current one. */
  cwd?: string;
  /** How long to wait for the ready line; default 20 s. */
  timeoutMs?: number;
  /** Receives every stderr and stdout line as it arrives (Deno's config notice removed). */
  onLine?: (line: string) => void;
}

/** A running service process. */
export interface RunningService {
  /** The port from the ready line. */
  readonly port: number;
  /** The process ID. */
  readonly pid: number;
  /** stderr lines so far, growing while the process runs (Deno's config notice removed). */
  readonly stderrLines: string[];
  /** stdout lines so far. */
  readonly stdoutLines: string[];
  /** The exit status, once the process has ended and its output is read. */
  readonly status: Promise<Deno.CommandStatus>;
  /** Resolves with the first stderr or stdout line (already seen or to come) matching `match`. */
  waitForLine(match: RegExp, timeoutMs?: number): Promise<string>;
  /**
   * Sends `signal` (default SIGTERM) if the process still runs; resolves to
   * its exit status. With `killAfterMs`, a process still running then gets
   * SIGKILL (one that ignores the signal cannot hold its caller).
   */
  stop(signal?: Deno.Signal, options?: { killAfterMs?: number }): Promise<Deno.CommandStatus>;
}

/** The result of {@linkcode runToExit}. */
export interface ProcessResult {
  /** The exit status. */
  code: number;
  /** stdout lines. */
  stdoutLines: string[];
  /** stderr lines (Deno's config notice removed). */
  stderrLines: string[];
}

/**
 * A minimal environment for child processes: PATH, HOME and DENO_DIR (when
 * set, so Deno finds its cache), NO_COLOR=1 and RUST_BACKTRACE=0, plus `extra`.
 */
export function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = { NO_COLOR: "1", RUST_BACKTRACE: "0" };
  for (const name of ["PATH", "HOME", "DENO_DIR"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) env[name] = value;
  }
  return { ...env, ...extra };
}

/**
 * Starts `cmd args` and resolves once a line matches `options.readyMatch`.
 * Rejects (after reaping the process) if it exits or times out first; the
 * error carries its stderr.
 */
export async function startService(
  cmd: string,
  args: string[],
  options: StartServiceOptions,
): Promise<RunningService> {
  const service = spawn(cmd, args, options);
  const timeoutMs = options.timeoutMs ?? 20_000;
  let readyLine: string;
  try {
    readyLine = await service.waitForLine(options.readyMatch, timeoutMs);
  } catch (err) {
    await service.stop("SIGKILL");
    throw new Error(
      `${cmd} did not get ready: ${(err as Error).message}\n--- stderr ---\n${
        service.stderrLines.join("\n")
      }`,
    );
  }
  const match = options.readyMatch.exec(readyLine)!;
  const port = Number(match.groups?.port ?? match[1]);
  if (!Number.isInteger(port) || port <= 0) {
    await service.stop("SIGKILL");
    throw new Error(`the ready line has no port: ${readyLine}`);
  }
  return { ...service, port };
}

/** Runs `cmd args` to completion (killed after `timeoutMs`, default 20 s) and returns its output. */
export async function runToExit(
  cmd: string,
  args: string[],
  options: { env?: Record<string, string>; cwd?: string; timeoutMs?: number } = {},
): Promise<ProcessResult> {
  const service = spawn(cmd, args, options);
  const timer = setTimeout(() => service.stop("SIGKILL"), options.timeoutMs ?? 20_000);
  try {
    const status = await service.status;
    return { code: status.code, stdoutLines: service.stdoutLines, stderrLines: service.stderrLines };
  } finally {
    clearTimeout(timer);
  }
}

/** A started process, before anything about it is known: {@linkcode RunningService} without a port. */
export type SpawnedProcess = Omit<RunningService, "port">;

/**
 * Starts `cmd args` and returns at once, e.g. to wait for a log line that
 * names no port ({@linkcode SpawnedProcess.waitForLine}) and then stop it.
 * Stop it when done.
 */
export function startProcess(
  cmd: string,
  args: string[],
  options: { env?: Record<string, string>; cwd?: string; onLine?: (line: string) => void } = {},
): SpawnedProcess {
  return spawn(cmd, args, options);
}

function spawn(
  cmd: string,
  args: string[],
  options: { env?: Record<string, string>; cwd?: string; onLine?: (line: string) => void },
): SpawnedProcess {
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(cmd, {
      args,
      cwd: options.cwd,
      env: cleanEnv(options.env),
      clearEnv: true,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new Error(`cannot run ${cmd}: not on PATH (put node_modules/.bin on PATH, as npm test does)`);
    }
    throw err;
  }
  const stdoutLines: string[] = [];
  const stderrLines: string[] = [];
  const watchers = new Set<(line: string) => void>();
  const collectInto = (lines: string[]) => (line: string) => {
    if (DENO_NOTICE.test(line)) return;
    lines.push(line);
    options.onLine?.(line);
    for (const watcher of watchers) watcher(line);
  };
  let exited = false;
  const status = Promise.all([
    child.status,
    readLines(child.stdout, collectInto(stdoutLines)),
    readLines(child.stderr, collectInto(stderrLines)),
  ]).then(([status]) => {
    exited = true;
    for (const watcher of watchers) watcher("");
    return status;
  });

  const waitForLine = (match: RegExp, timeoutMs = 20_000) => {
    const seen = [...stderrLines, ...stdoutLines].find((line) => match.test(line));
    if (seen !== undefined) return Promise.resolve(seen);
    if (exited) return Promise.reject(new Error(`the process exited before printing ${match}`));
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(
        () => finish(new Error(`no line matching ${match} within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const finish = (result: string | Error) => {
        clearTimeout(timer);
        watchers.delete(watcher);
        if (typeof result === "string") resolve(result);
        else reject(result);
      };
      const watcher = (line: string) => {
        if (match.test(line)) finish(line);
        else if (exited) finish(new Error(`the process exited before printing ${match}`));
      };
      watchers.add(watcher);
    });
  };

  return {
    pid: child.pid,
    stdoutLines,
    stderrLines,
    status,
    waitForLine,
    stop(signal: Deno.Signal = "SIGTERM", options: { killAfterMs?: number } = {}) {
      const send = (s: Deno.Signal) => {
        if (exited) return;
        try {
          child.kill(s);
        } catch {
          // Already exited between the check and the kill.
        }
      };
      send(signal);
      if (options.killAfterMs === undefined || exited) return status;
      const timer = setTimeout(() => send("SIGKILL"), options.killAfterMs);
      return status.finally(() => clearTimeout(timer));
    },
  };
}

async function readLines(stream: ReadableStream<Uint8Array>, onLine: (line: string) => void): Promise<void> {
  let rest = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    const lines = (rest + chunk).split("\n");
    rest = lines.pop()!;
    lines.forEach(onLine);
  }
  if (rest !== "") onLine(rest);
}
