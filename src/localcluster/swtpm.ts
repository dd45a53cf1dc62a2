/**
 * Starts a software TPM (swtpm): one per node of the local cluster, and a
 * throwaway one per TPM test.
 *
 * Each call gets a fresh TPM in its own temporary directory, listening on a
 * unix socket; `stop()` shuts it down through its control channel and
 * removes the directory. A missing swtpm fails the test loudly: TPM tests
 * must never be skipped silently.
 *
 * @module
 */

/** A running swtpm. */
export interface Swtpm {
  /** tpm2-tools TCTI for it, e.g. "swtpm:path=/tmp/swtpm-abc/tpm.sock". */
  readonly tcti: string;
  /** The swtpm process's ID. */
  readonly pid: number;
  /** Stops swtpm and removes its state. Idempotent. */
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 5_000;

/** Options for {@linkcode startSwtpm}. */
export interface SwtpmOptions {
  /**
   * Keeps the TPM's state (keys, NV) in this directory, which `stop()` does
   * not remove: a second swtpm on the same directory is the same TPM after
   * a reboot (PCRs reset, the same keys). Default: a fresh TPM whose state
   * `stop()` removes.
   */
  stateDir?: string;
}

/** Starts swtpm (TPM 2.0, already started up with TPM2_Startup(CLEAR)). */
export async function startSwtpm(options: SwtpmOptions = {}): Promise<Swtpm> {
  const dir = await Deno.makeTempDir({ prefix: "swtpm-" });
  const socket = `${dir}/tpm.sock`;
  const control = `${socket}.ctrl`; // where the swtpm TCTI expects the control channel
  const stateDir = options.stateDir ?? `${dir}/state`;
  await Deno.mkdir(stateDir, { recursive: true });
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command("swtpm", {
      args: [
        ...["socket", "--tpm2", "--tpmstate", `dir=${stateDir}`],
        ...["--server", `type=unixio,path=${socket}`, "--ctrl", `type=unixio,path=${control}`],
        ...["--flags", "not-need-init,startup-clear"],
      ],
      clearEnv: true,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
  } catch (error) {
    await Deno.remove(dir, { recursive: true });
    if (error instanceof Deno.errors.NotFound) {
      throw new Error("swtpm is not installed: apt-get install swtpm swtpm-tools tpm2-tools");
    }
    throw error;
  }
  const exited = child.output();
  let running = true;
  exited.then(() => running = false);

  const stop = async () => {
    if (running) {
      await new Deno.Command("swtpm_ioctl", {
        args: ["-s", "--unix", control],
        clearEnv: true,
        stdout: "null",
      })
        .output();
      const timer = setTimeout(() => running && child.kill("SIGKILL"), STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(timer);
    }
    await Deno.remove(dir, { recursive: true }).catch((error) => {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
    });
  };

  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (!running) {
      const output = await exited;
      await stop();
      throw new Error(`swtpm exited before it was ready: ${new TextDecoder().decode(output.stderr).trim()}`);
    }
    // The control channel answers once swtpm has initialized the TPM and entered its main loop.
    const probe = await new Deno.Command("swtpm_ioctl", {
      args: ["-c", "--unix", control],
      clearEnv: true,
      stdout: "null",
      stderr: "null",
    }).output();
    if (probe.success) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`swtpm did not answer on ${control} within ${READY_TIMEOUT_MS} ms`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return { tcti: `swtpm:path=${socket}`, pid: child.pid, stop };
}
