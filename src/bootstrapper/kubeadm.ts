/**
 * Runs kubeadm to make this node the first control-plane node (`init`) or to
 * join a cluster (`join`), with the configuration documents of
 * `kubeadm_config.ts` (reference §6.3, §6.9).
 *
 * Before each run the audit policy is written to
 * `<kubernetesDir>/audit-policy.yaml` (0644) and `<kubernetesDir>/manifests`
 * is created, as the original does. The configuration goes to a file of its
 * own in `tmpDir` (0600, since a join configuration holds the bootstrap
 * token), which is removed on every path: success, failure and abort (the
 * original never removed it, §12.12). The token, and anything shaped like a
 * bootstrap token (kubeadm init prints the one it creates), is replaced by
 * `[REDACTED]` in the captured output and in every error.
 *
 * `init` runs the original's sequence minus what moved elsewhere:
 * `init phase preflight`, `init phase certs all`, an optional hook (the
 * caller signs this node's kubelet certificate with the fresh CA there),
 * then `init --skip-phases=preflight,certs,addon/kube-proxy`. The admin
 * kubeconfig is the `admin.conf` kubeadm writes; the original's extra
 * `kubeadm kubeconfig user` call is not made.
 *
 * Needs `--allow-run=<binary>` and write access to `tmpDir` and `kubernetesDir`.
 *
 * @module
 */
import { join } from "node:path";
import { removeIfExists, writeFileAtomic } from "../fs/atomic_write.ts";
import { ReasonError } from "../reason_error.ts";
import {
  exitStatus,
  REDACTED,
  runTool,
  stderrExcerpt,
  ToolError,
  type ToolFailure,
  type ToolOutput,
} from "../os/run_tool.ts";
import {
  auditPolicy,
  initConfiguration,
  joinConfiguration,
  type KubeadmInitConfig,
  type KubeadmJoinConfig,
} from "./kubeadm_config.ts";

export type { KubeadmInitConfig, KubeadmJoinConfig } from "./kubeadm_config.ts";

/** What kubeadm printed, over all of a call's runs, with tokens redacted. */
export interface KubeadmResult {
  /** stdout, redacted. */
  stdout: string;
  /** stderr, redacted. */
  stderr: string;
}

/** Why kubeadm failed. */
export type KubeadmFailure = "failed" | "aborted" | "not-found" | "not-permitted";

/** kubeadm could not run or failed. Message and output are redacted: no token in them. */
export class KubeadmError extends ReasonError<KubeadmFailure> {
  /** kubeadm's exit code, when it ran to the end. */
  readonly exitCode?: number | null;
  /** The command that failed, e.g. "init phase preflight" or "join". */
  readonly command: string;
  /** The failed run's stdout and stderr, redacted (the last 64 KiB). */
  readonly output: string;

  /** `command` failed for `reason`; `output` must already be redacted. */
  constructor(
    reason: KubeadmFailure,
    command: string,
    message: string,
    output: string,
    options?: ErrorOptions & { exitCode?: number | null },
  ) {
    super(reason, message, options);
    this.command = command;
    this.output = output;
    if (options && "exitCode" in options) this.exitCode = options.exitCode;
  }
}

/** Options of {@linkcode Kubeadm}. */
export interface KubeadmOptions {
  /** The kubeadm binary, e.g. `/run/state/bin/kubeadm`. */
  binary: string;
  /** Where configuration files are written (and removed after use). */
  tmpDir: string;
  /** The environment of kubeadm (nothing is inherited); default {@linkcode DEFAULT_KUBEADM_ENV}. */
  env?: Record<string, string>;
  /** Arguments placed before kubeadm's own (e.g. a simulator's `--root <dir>`); default none. */
  leadingArgs?: readonly string[];
  /** Where the audit policy and the manifests directory go; default `/etc/kubernetes`. */
  kubernetesDir?: string;
  /** kubeadm's log verbosity (`-v`); default 5, as the original. */
  verbosity?: number;
}

/** Options of {@linkcode Kubeadm.init}. */
export interface KubeadmInitOptions {
  /** Aborting kills kubeadm; the configuration file is still removed. */
  signal?: AbortSignal;
  /** Runs after the certificates exist and before the main init (e.g. to sign the kubelet certificate). */
  afterCerts?: (options: { signal?: AbortSignal }) => Promise<void>;
}

/** kubeadm's environment by default: the bootstrapper unit's PATH, so kubeadm finds the node's tools. */
export const DEFAULT_KUBEADM_ENV: Readonly<Record<string, string>> = {
  PATH: "/run/state/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
};

/** Bootstrap tokens, `[a-z0-9]{6}.[a-z0-9]{16}`: kubeadm init prints the one it creates. */
const BOOTSTRAP_TOKEN_SHAPE = /\b[a-z0-9]{6}\.[a-z0-9]{16}\b/g;

const MAX_ERROR_OUTPUT_CHARS = 64 * 1024;

/** A configuration file of {@linkcode Kubeadm}'s, or writeFileAtomic's temporary of one. */
const LEFTOVER_CONFIG = /^\.?kubeadm-(init|join)\.[0-9a-f]{16}\.yaml(\.[0-9a-f]{16}\.tmp)?$/;

/** Runs kubeadm init and join. */
export class Kubeadm {
  readonly #options: KubeadmOptions;

  /** A runner for `options.binary`; nothing runs until a call. */
  constructor(options: KubeadmOptions) {
    this.#options = options;
  }

  /**
   * Removes the configuration files (and their half-written temporaries) an
   * earlier run left in `tmpDir` when it was killed mid-kubeadm: a join's
   * holds its bootstrap token. Resolves to how many were removed; a missing
   * `tmpDir` has none.
   */
  async removeLeftovers(): Promise<number> {
    let removed = 0;
    try {
      for await (const entry of Deno.readDir(this.#options.tmpDir)) {
        if (!entry.isFile || !LEFTOVER_CONFIG.test(entry.name)) continue;
        if (await removeIfExists(join(this.#options.tmpDir, entry.name))) removed++;
      }
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
    }
    return removed;
  }

  /**
   * Makes this node the first control-plane node.
   *
   * @throws {KubeadmError} when a kubeadm run fails or is aborted
   * @throws {NodeNameError} for a node name that cannot be normalized
   */
  init(config: KubeadmInitConfig, options: KubeadmInitOptions = {}): Promise<KubeadmResult> {
    const { signal, afterCerts } = options;
    const skipPhases = ["preflight", "certs", ...(config.keepKubeProxy ? [] : ["addon/kube-proxy"])];
    return this.#withConfig("kubeadm-init", initConfiguration(config), [], signal, async (run, file) => {
      await run(["init", "phase", "preflight", "--config", file]);
      await run(["init", "phase", "certs", "all", "--config", file]);
      if (afterCerts) await afterCerts({ signal });
      await run(["init", `--skip-phases=${skipPhases.join(",")}`, "--config", file]);
    });
  }

  /**
   * Joins the cluster the configuration's discovery points at.
   *
   * @throws {KubeadmError} when kubeadm fails or is aborted (the token is not in it)
   * @throws {NodeNameError} for a node name that cannot be normalized
   */
  join(config: KubeadmJoinConfig, options: { signal?: AbortSignal } = {}): Promise<KubeadmResult> {
    return this.#withConfig(
      "kubeadm-join",
      joinConfiguration(config),
      [config.token],
      options.signal,
      (run, file) => run(["join", "--config", file]),
    );
  }

  /**
   * Writes the audit policy and the configuration file, runs `steps`, and
   * removes the file whatever happens.
   */
  async #withConfig(
    name: string,
    configuration: string,
    secrets: readonly string[],
    signal: AbortSignal | undefined,
    steps: (run: (args: string[]) => Promise<void>, file: string) => Promise<void>,
  ): Promise<KubeadmResult> {
    const kubernetesDir = this.#options.kubernetesDir ?? "/etc/kubernetes";
    const file = join(
      this.#options.tmpDir,
      `${name}.${crypto.getRandomValues(new Uint8Array(8)).toHex()}.yaml`,
    );
    const stdout: string[] = [];
    const stderr: string[] = [];
    const run = async (args: string[]) => {
      const output = await this.#run(args, secrets, signal);
      stdout.push(output.stdout);
      stderr.push(output.stderr);
    };
    try {
      signal?.throwIfAborted();
      await writeFileAtomic(join(kubernetesDir, "audit-policy.yaml"), auditPolicy(), { mode: 0o644, signal });
      await Deno.mkdir(join(kubernetesDir, "manifests"), { recursive: true });
      await Deno.mkdir(this.#options.tmpDir, { recursive: true });
      await writeFileAtomic(file, configuration, { mode: 0o600, signal });
      await steps(run, file);
    } catch (error) {
      // Every abort, wherever it struck (file writes, the hook, kubeadm), is reported the same way.
      if (signal?.aborted && !(error instanceof KubeadmError && error.reason === "aborted")) {
        throw new KubeadmError(
          "aborted",
          name.replace("-", " "),
          `${name.replace("-", " ")} was aborted`,
          "",
          {
            cause: signal.reason,
          },
        );
      }
      throw error;
    } finally {
      await removeIfExists(file);
    }
    return { stdout: stdout.join(""), stderr: stderr.join("") };
  }

  async #run(kubeadmArgs: string[], secrets: readonly string[], signal?: AbortSignal): Promise<ToolOutput> {
    const { binary, leadingArgs = [], verbosity = 5 } = this.#options;
    const command = kubeadmArgs.filter((arg) => !arg.startsWith("-") && !arg.includes("/")).join(" ");
    const args = [...leadingArgs, ...kubeadmArgs, `-v=${verbosity}`];
    let output: ToolOutput;
    try {
      output = await runTool(binary, args, {
        env: this.#options.env ?? { ...DEFAULT_KUBEADM_ENV },
        signal,
        redact: secrets,
      });
    } catch (error) {
      if (!(error instanceof ToolError)) throw error;
      throw new KubeadmError(
        kubeadmReason(error.reason),
        command,
        `kubeadm ${command}: ${error.message}`,
        "",
        {
          cause: error,
        },
      );
    }
    const redacted = { ...output, stdout: redactShape(output.stdout), stderr: redactShape(output.stderr) };
    if (!redacted.success) {
      const combined = `${redacted.stdout}${redacted.stderr}`;
      throw new KubeadmError(
        "failed",
        command,
        `kubeadm ${command} failed (${exitStatus(redacted)}): ${stderrExcerpt(redacted.stderr)}`,
        combined.length > MAX_ERROR_OUTPUT_CHARS ? combined.slice(-MAX_ERROR_OUTPUT_CHARS) : combined,
        { exitCode: redacted.code },
      );
    }
    return redacted;
  }
}

function kubeadmReason(reason: ToolFailure): KubeadmFailure {
  return reason === "start-failed" ? "failed" : reason;
}

function redactShape(text: string): string {
  return text.replace(BOOTSTRAP_TOKEN_SHAPE, REDACTED);
}
