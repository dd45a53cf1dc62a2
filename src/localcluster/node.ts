/**
 * One node of a local cluster, as a VM image would give it: a filesystem
 * root of its own, a swtpm whose boot PCRs hold the image's measurements
 * (its state kept across reboots), a file-backed LUKS2 state disk with a
 * first-boot passphrase as the disk-mapper leaves it, and the recording
 * kubeadm installed as the node's kubeadm (a stand-in: a real image runs the
 * real kubeadm). The bootstrapper then runs as its own process under its
 * permission set, widened to the node's root only.
 *
 * @module
 */
import { shellQuote } from "../os/shell_quote.ts";
import { readPcrs } from "../attestation/tpm/pcr.ts";
import { nodePaths } from "../bootstrapper/node_paths.ts";
import { LuksStateDisk } from "../bootstrapper/state_disk.ts";
import { removeIfExists } from "../fs/atomic_write.ts";
import { runLoadingTpmTool } from "../attestation/tpm/tools.ts";
import { runTool, stderrExcerpt } from "../os/run_tool.ts";
import { startSwtpm, type Swtpm } from "./swtpm.ts";

/** PCRs the image's boot chain measures into on every node before the bootstrapper starts. */
export const BOOT_PCRS: readonly number[] = [4, 9];
/** The bootstrapper's "listening" line, with the init server's port. */
export const BOOTSTRAPPER_LISTENING = /"msg":"listening".*"port":(\d+)/;

/** The log line of `bootstrapper rejoin` once its recovery server listens (on a control plane). */
export const RECOVERY_LISTENING = /"msg":"recovery server listening".*"port":(\d+)/;

/** Cheap key derivation for the throwaway disks (a real disk keeps cryptsetup's argon2id). */
const FAST_PBKDF = ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"];
/** A LUKS2 header takes 16 MiB; the file is sparse. */
const DISK_BYTES = 20 << 20;
/** The project's checkout, with a trailing slash (src/localcluster/ is two levels down). */
export const REPO_ROOT: string = decodeURIComponent(new URL("../../", import.meta.url).pathname);
/**
 * The deno that runs every component: the checkout's own, by the path the
 * `cluster` permission set may run (`node_modules/deno/deno`). Not
 * `Deno.execPath()`: that is the binary's real path, another one when
 * `node_modules` is a symlink (e.g. in a git worktree), or a global deno.
 */
export const DENO: string = `${REPO_ROOT}node_modules/deno/deno`;
const TPM2_TOOLS = "tpm2_createprimary,tpm2_quote,tpm2_flushcontext,tpm2_pcrread,tpm2_pcrevent";

/** A node's files. */
export interface NodeFiles {
  /** Instance name. */
  readonly name: string;
  /** `<dir>/<name>`: everything of the node. */
  readonly home: string;
  /** The node's filesystem root. */
  readonly root: string;
  /** The LUKS2 container file. */
  readonly disk: string;
  /** The swtpm's state (kept across reboots). */
  readonly tpmState: string;
}

/** Options for {@linkcode prepareNode}. */
export interface PrepareNodeOptions {
  /** Parent directory; the node lives in `<dir>/<name>`. */
  dir: string;
  /** Instance name. */
  name: string;
}

/** The files of node `options.name` under `options.dir` (made by {@linkcode prepareNode}). */
export function nodeFiles(options: PrepareNodeOptions): NodeFiles {
  const home = `${options.dir}/${options.name}`;
  const root = `${home}/root`;
  return { name: options.name, home, root, disk: `${root}/dev/state.img`, tpmState: `${home}/tpm` };
}

/** Creates the node's root, state disk, kubeadm and a systemctl that records its calls. */
export async function prepareNode(options: PrepareNodeOptions): Promise<NodeFiles> {
  const files = nodeFiles(options);
  const { root, disk } = files;
  for (const dir of ["run/cryptsetup-keys.d", "run/state/bin", "usr/bin", "var/lib", "dev"]) {
    await Deno.mkdir(`${root}/${dir}`, { recursive: true });
  }
  const initialKey = `${root}/run/cryptsetup-keys.d/state.key`;
  await Deno.writeFile(initialKey, crypto.getRandomValues(new Uint8Array(32)), { mode: 0o400 });
  await formatStateDisk(disk, initialKey);

  const env = (name: string) => shellQuote(Deno.env.get(name) ?? "");
  const times = shellQuote(`${root}/var/lib/kubeadm-times`);
  await Deno.writeTextFile(
    `${root}/run/state/bin/kubeadm`,
    `#!/bin/sh
# The recording kubeadm (a stand-in for kubeadm), writing under this node's root; it logs each call's times.
export KUBEADM_SIM_ROOT=${shellQuote(root)} DENO_DIR=${env("DENO_DIR")} HOME=${env("HOME")} PATH=${
      env("PATH")
    }
echo "start $(date +%s%N)" >> ${times}
${shellQuote(`${REPO_ROOT}scripts/kubeadm-sim`)} "$@"
status=$?
echo "end $(date +%s%N)" >> ${times}
exit $status
`,
    { mode: 0o755 },
  );
  await Deno.writeTextFile(
    `${root}/usr/bin/systemctl`,
    `#!/bin/sh\necho "$*" >> ${shellQuote(`${root}/var/lib/systemctl-calls`)}\n`,
    { mode: 0o755 },
  );
  return files;
}

/**
 * Formats `device` (a regular file; with `header`, a detached header file)
 * as the disk-mapper leaves a fresh state disk: LUKS2, the first-boot
 * passphrase from `initialKeyFile` in keyslot 0, token 0 saying not
 * initialized.
 */
export async function formatStateDisk(
  device: string,
  initialKeyFile: string,
  options: { header?: string } = {},
): Promise<void> {
  for (const file of [device, options.header]) {
    if (file) {
      await Deno.writeFile(file, new Uint8Array());
      await Deno.truncate(file, DISK_BYTES);
    }
  }
  const target = options.header ? ["--header", options.header, device] : [device];
  await cryptsetup([
    "luksFormat",
    "--type",
    "luks2",
    "--batch-mode",
    ...FAST_PBKDF,
    "--key-file",
    initialKeyFile,
    ...target,
  ]);
  await cryptsetup(
    ["token", "import", "--token-id", "0", ...target],
    new TextEncoder().encode('{"type":"constellation-state-disk","keyslots":[],"diskIsInitialized":false}'),
  );
}

async function cryptsetup(args: string[], stdin?: Uint8Array): Promise<void> {
  const output = await runTool("cryptsetup", args, { stdin });
  if (!output.success) throw new Error(`cryptsetup ${args[0]}: ${stderrExcerpt(output.stderr)}`);
}

/**
 * Starts the node's swtpm on its kept state and measures the image's boot
 * chain into {@linkcode BOOT_PCRS}, as firmware would on every boot;
 * `tamperPcr4` measures an extra event (a kernel the cluster does not
 * expect).
 */
export async function bootNodeTpm(node: NodeFiles, options: { tamperPcr4?: boolean } = {}): Promise<Swtpm> {
  const tpm = await startSwtpm({ stateDir: node.tpmState });
  const measure = (pcr: number, event: string) =>
    runLoadingTpmTool({ tcti: tpm.tcti }, "tpm2_pcrevent", [String(pcr)], {
      stdin: new TextEncoder().encode(event),
    });
  try {
    for (const pcr of BOOT_PCRS) await measure(pcr, `boot component measured into PCR ${pcr}`);
    if (options.tamperPcr4) await measure(4, "a kernel the cluster does not expect");
  } catch (error) {
    // Nobody else knows this swtpm yet: it must not outlive a boot that failed.
    await tpm.stop();
    throw error;
  }
  return tpm;
}

/**
 * Boots the node again after its old swtpm stopped: `/run` is a tmpfs, so
 * an initialized state disk's key file is gone (the rejoin writes it back;
 * the node's `run/state` stands for the state disk and keeps its files),
 * while a disk never initialized keeps its first-boot key (the image's
 * first-boot preparation would make a new one), and the TPM starts anew on
 * its kept state ({@linkcode bootNodeTpm}).
 */
export async function rebootNode(node: NodeFiles, options: { tamperPcr4?: boolean } = {}): Promise<Swtpm> {
  if (await isInitialized(node)) await removeIfExists(nodePaths(node.root).initialPassphrase);
  return await bootNodeTpm(node, options);
}

/** Whether the node's state disk is initialized: the node joined a cluster (its LUKS2 token says so). */
export async function isInitialized(node: NodeFiles): Promise<boolean> {
  const keyFile = nodePaths(node.root).initialPassphrase;
  return await new LuksStateDisk({ device: node.disk, initialPassphraseFile: keyFile }).isInitialized();
}

/** The image's measurements: PCRs {@linkcode BOOT_PCRS} and 15 (zero until bound) of a freshly booted node. */
export async function imageMeasurements(
  tpm: Swtpm,
): Promise<Record<string, { expected: string; warnOnly: false }>> {
  const pcrs = await readPcrs({ tcti: tpm.tcti }, [...BOOT_PCRS, 15]);
  return Object.fromEntries([...pcrs].map(([i, v]) => [String(i), { expected: v.toHex(), warnOnly: false }]));
}

/** Options of {@linkcode bootstrapperArgs}. */
export interface BootstrapperArgsOptions {
  /** The node's TPM now. */
  tpm: Swtpm;
  /** This node's metadata API base URL. */
  metadataUrl: string;
  /** Where the bootstrapper listens. */
  listenAddress?: string;
  /** More flags, appended; a leading "rejoin" is the command. */
  flags?: string[];
  /**
   * "dummy": the node runs the insecure development variant without a TPM
   * (as a node built for development would); default "qemu-vtpm" on `tpm`.
   */
  variant?: "qemu-vtpm" | "dummy";
}

/** The `deno run` arguments of the bootstrapper on `node` (run from the project's checkout). */
export function bootstrapperArgs(node: NodeFiles, options: BootstrapperArgsOptions): string[] {
  const { root } = node;
  const flags = options.flags ?? [];
  return [
    "run",
    "-P=bootstrapper",
    "--no-prompt",
    `--allow-read=${root},/tmp`,
    `--allow-write=${root},/tmp`,
    `--allow-run=${root}/run/state/bin/kubeadm,${root}/usr/bin/systemctl,cryptsetup,ln,${TPM2_TOOLS}`,
    `${REPO_ROOT}src/bootstrapper/main.ts`,
    ...flags.filter((flag) => flag === "rejoin"),
    ...(options.variant === "dummy"
      ? ["--attestation-variant", "dummy", "--tpm", "none"]
      : ["--attestation-variant", "qemu-vtpm", "--tpm", options.tpm.tcti]),
    ...["--root", root, "--metadata-url", options.metadataUrl],
    ...["--state-disk", node.disk, "--state-disk-pbkdf", "pbkdf2:1000"],
    ...["--systemctl", `${root}/usr/bin/systemctl`, "--journalctl", "none"],
    ...["--port", "0", "--listen-address", options.listenAddress ?? "127.0.0.1"],
    // A local cluster's nodes come up within seconds of each other: retry often.
    ...["--join-retry-interval", "0.5", "--join-call-timeout", "10"],
    ...flags.filter((flag) => flag !== "rejoin"),
  ];
}

/** When each kubeadm invocation on `node` started and ended (Unix ms), in order. */
export async function kubeadmTimes(node: NodeFiles): Promise<{ start: number; end: number }[]> {
  const lines = (await Deno.readTextFile(`${node.root}/var/lib/kubeadm-times`).catch(() => "")).split("\n");
  const at = (line: string) => Number(BigInt(line.split(" ")[1]) / 1_000_000n);
  const starts = lines.filter((line) => line.startsWith("start ")).map(at);
  const ends = lines.filter((line) => line.startsWith("end ")).map(at);
  return starts.map((start, i) => ({ start, end: ends[i] }));
}

/** The systemctl invocations on `node` so far, one argument string each. */
export async function systemctlCalls(node: NodeFiles): Promise<string[]> {
  const text = await Deno.readTextFile(`${node.root}/var/lib/systemctl-calls`).catch(() => "");
  return text.split("\n").filter((line) => line !== "");
}
