/**
 * A node of the local cluster (src/localcluster/node.ts) for the
 * bootstrapper's process tests, with its processes reaped when disposed.
 *
 * @module
 */
import { readPcrs } from "../../src/attestation/tpm/pcr.ts";
import {
  bootNodeTpm,
  BOOTSTRAPPER_LISTENING,
  bootstrapperArgs,
  kubeadmTimes,
  type NodeFiles,
  prepareNode,
  rebootNode,
  RECOVERY_LISTENING,
  systemctlCalls,
} from "../../src/localcluster/node.ts";
import type { Swtpm } from "../../src/localcluster/swtpm.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";
import {
  type ProcessResult,
  type RunningService,
  runToExit,
  startService,
} from "../../src/os/service_process.ts";

/** Options for {@linkcode createBootstrapNode}. */
export interface BootstrapNodeOptions {
  /** Parent directory; the node lives in `<dir>/<name>`. */
  dir: string;
  /** Instance name, as in the metadata API. */
  name: string;
  /** The metadata API base URL for this node (`MetadataServer.nodeUrl(name)`). */
  metadataUrl: string;
  /** Extra event measured into PCR 4 (makes the node's measurements differ from its peers'). */
  tamperPcr4?: boolean;
}

/** A prepared node. Dispose it to stop its processes and swtpm. */
export interface BootstrapNode extends AsyncDisposable, NodeFiles {
  /** The TPM now (a new one after {@linkcode reboot}, on the same state). */
  readonly tpm: Swtpm;
  /** Starts the bootstrapper with `flags`; resolves once its init server listens. */
  start(flags?: string[]): Promise<RunningService>;
  /** Starts `bootstrapper rejoin` with `flags`; resolves once its recovery server listens (a control plane). */
  startRejoin(flags?: string[]): Promise<RunningService>;
  /** Runs the bootstrapper to its exit (a bound node, or `rejoin`), with `env` added to its environment. */
  run(flags?: string[], env?: Record<string, string>): Promise<ProcessResult>;
  /** PCR 15 of the node's TPM. */
  pcr15(): Promise<Uint8Array>;
  /** When each kubeadm invocation started and ended (Unix ms), in order. */
  kubeadmTimes(): Promise<{ start: number; end: number }[]>;
  /** The systemctl invocations so far, one argument string each. */
  systemctlCalls(): Promise<string[]>;
  /** Stops the swtpm and starts it again on the same state: the PCRs reset, the keys stay. */
  reboot(): Promise<void>;
}

/** Prepares a node: root, swtpm, state disk, kubeadm and systemctl stand-ins. */
export async function createBootstrapNode(options: BootstrapNodeOptions): Promise<BootstrapNode> {
  const files = await prepareNode(options);
  let tpm = await bootNodeTpm(files, options);
  const processes = new Set<RunningService>();
  const args = (flags?: string[]) =>
    bootstrapperArgs(files, { tpm, metadataUrl: options.metadataUrl, flags });
  return {
    ...files,
    get tpm() {
      return tpm;
    },
    async start(flags) {
      const process = await startService("deno", args(flags), {
        readyMatch: BOOTSTRAPPER_LISTENING,
        cwd: REPO_ROOT,
        timeoutMs: 30_000,
      });
      processes.add(process);
      return process;
    },
    async startRejoin(flags = []) {
      const process = await startService("deno", args(["rejoin", "--recovery-port", "0", ...flags]), {
        readyMatch: RECOVERY_LISTENING,
        cwd: REPO_ROOT,
        timeoutMs: 30_000,
      });
      processes.add(process);
      return process;
    },
    run: (flags, env) => runToExit("deno", args(flags), { cwd: REPO_ROOT, timeoutMs: 60_000, env }),
    async pcr15() {
      return (await readPcrs({ tcti: tpm.tcti }, [15])).get(15)!;
    },
    kubeadmTimes: () => kubeadmTimes(files),
    systemctlCalls: () => systemctlCalls(files),
    async reboot() {
      await tpm.stop();
      tpm = await rebootNode(files, options);
    },
    async [Symbol.asyncDispose]() {
      for (const process of processes) await process.stop("SIGKILL").catch(() => {});
      await tpm.stop();
    },
  };
}
