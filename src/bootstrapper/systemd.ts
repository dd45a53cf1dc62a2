/**
 * Starting systemd units (the kubelet, on the already-bootstrapped path and
 * after a join) through `systemctl`, instead of the original's D-Bus calls:
 * `systemctl start` waits for the start job and fails unless it is done,
 * which is the original's check.
 *
 * Needs `--allow-run=<systemctl>`.
 *
 * @module
 */
import { ReasonError } from "../reason_error.ts";
import { exitStatus, runTool, stderrExcerpt, ToolError } from "../os/run_tool.ts";

/** Why a unit could not be started. */
export type SystemctlFailure = "failed" | "not-found" | "not-permitted" | "aborted";

/** systemctl could not run, or the unit did not start. The message carries systemctl's stderr. */
export class SystemctlError extends ReasonError<SystemctlFailure> {
  /** systemctl's exit code, when it ran to the end. */
  readonly exitCode?: number | null;

  /** A failure for `reason`, with systemctl's `exitCode` when it ran. */
  constructor(
    reason: SystemctlFailure,
    message: string,
    options?: ErrorOptions & { exitCode?: number | null },
  ) {
    super(reason, message, options);
    if (options && "exitCode" in options) this.exitCode = options.exitCode;
  }
}

/** Options of {@linkcode Systemctl}. */
export interface SystemctlOptions {
  /** systemctl binary; default "systemctl". */
  binary?: string;
  /** Environment of systemctl (nothing is inherited); default empty. */
  env?: Record<string, string>;
}

/** Starts units through systemctl. */
export class Systemctl {
  readonly #binary: string;
  readonly #env: Record<string, string>;

  /** A systemctl runner with `options.binary` (default "systemctl"). */
  constructor(options: SystemctlOptions = {}) {
    this.#binary = options.binary ?? "systemctl";
    this.#env = options.env ?? {};
  }

  /**
   * `systemctl start <unit>`: resolves once the start job is done.
   *
   * @throws {SystemctlError}
   */
  async start(unit: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    if (unit === "" || unit.startsWith("-")) throw new RangeError(`not a unit name: ${JSON.stringify(unit)}`);
    let output;
    try {
      output = await runTool(this.#binary, ["start", unit], { env: this.#env, signal: options.signal });
    } catch (error) {
      if (!(error instanceof ToolError)) throw error;
      const reason = error.reason === "start-failed" ? "failed" : error.reason;
      throw new SystemctlError(reason, `starting ${unit}: ${error.message}`, { cause: error });
    }
    if (!output.success) {
      throw new SystemctlError(
        "failed",
        `starting ${unit}: ${this.#binary} start failed (${exitStatus(output)}): ${
          stderrExcerpt(output.stderr)
        }`,
        { exitCode: output.code },
      );
    }
  }
}
