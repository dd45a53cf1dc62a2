/**
 * A node for the bootstrapper's process tests: its own filesystem root, its
 * own swtpm (kept across simulated reboots), a file-backed LUKS2 state disk
 * with a first-boot passphrase as the disk-mapper leaves it, the recording
 * kubeadm installed as the node's kubeadm, and a recording systemctl. The
 * bootstrapper runs as the real process under its permission set, widened
 * to the node's root only.
 *
 * @module
 */
import { runLoadingTpmTool } from "../../src/attestation/tpm/tools.ts";
import { readPcrs } from "../../src/attestation/tpm/pcr.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";
import { type ProcessResult, type RunningService, runToExit, startService } from "./process.ts";
import { formatStateDisk } from "./cryptsetup.ts";
import { startSwtpm, type Swtpm } from "./swtpm.ts";

/** The bootstrapper's "listening" line, with the init server's port. */
export const BOOTSTRAPPER_LISTENING = /"msg":"listening".*"port":(\d+)/;
/** PCRs extended with boot-chain-like events on every node before it starts. */
export const BOOT_PCRS: readonly number[] = [4, 9];

const DISK_BYTES = 20 << 20; // a LUKS2 header takes 16 MiB; the file is sparse

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
export interface BootstrapNode extends AsyncDisposable {
  readonly name: string;
  /** The node's filesystem root. */
  readonly root: string;
  /** The LUKS2 container file. */
  readonly disk: string;
  /** The TPM now (a new one after {@linkcode reboot}, on the same state). */
  readonly tpm: Swtpm;
  /** The `deno run` arguments of the bootstrapper on this node, with `flags` appended. */
  args(flags?: string[]): string[];
  /** Starts the bootstrapper; resolves once its init server listens. */
  start(flags?: string[]): Promise<RunningService>;
  /** Runs the bootstrapper to its exit (a bound node, or `rejoin`). */
  run(flags?: string[]): Promise<ProcessResult>;
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
  const home = `${options.dir}/${options.name}`;
  const root = `${home}/root`;
  const tpmState = `${home}/tpm`;
  for (const dir of ["run/cryptsetup-keys.d", "run/state/bin", "usr/bin", "var/lib", "dev"]) {
    await Deno.mkdir(`${root}/${dir}`, { recursive: true });
  }
  const disk = `${root}/dev/state.img`;
  const initialKey = `${root}/run/cryptsetup-keys.d/state.key`;
  await Deno.writeFile(initialKey, crypto.getRandomValues(new Uint8Array(32)), { mode: 0o400 });
  await Deno.writeFile(disk, new Uint8Array());
  await Deno.truncate(disk, DISK_BYTES);
  await formatStateDisk(disk, initialKey);

  // The node's kubeadm: the recording kubeadm writing under this root.
  const env = (name: string) => Deno.env.get(name) ?? "";
  await Deno.writeTextFile(
    `${root}/run/state/bin/kubeadm`,
    `#!/bin/sh
export KUBEADM_SIM_ROOT='${root}' DENO_DIR='${env("DENO_DIR")}' HOME='${env("HOME")}' PATH='${env("PATH")}'
echo "start $(date +%s%N)" >> '${root}/var/lib/kubeadm-times'
'${REPO_ROOT}scripts/kubeadm-sim' "$@"
status=$?
echo "end $(date +%s%N)" >> '${root}/var/lib/kubeadm-times'
exit $status
`,
    { mode: 0o755 },
  );
  await Deno.writeTextFile(
    `${root}/usr/bin/systemctl`,
    `#!/bin/sh\necho "$*" >> '${root}/var/lib/systemctl-calls'\n`,
    { mode: 0o755 },
  );

  let tpm = await startTpm(tpmState, options.tamperPcr4);
  const processes = new Set<RunningService>();
  // A command ("rejoin") comes first, before the node's flags.
  const args = (flags: string[] = []) => [
    "run",
    "-P=bootstrapper",
    "--no-prompt",
    `--allow-read=${root},/tmp`,
    `--allow-write=${root},/tmp`,
    `--allow-run=${root}/run/state/bin/kubeadm,${root}/usr/bin/systemctl,cryptsetup,ln,` +
    "tpm2_createprimary,tpm2_quote,tpm2_flushcontext,tpm2_pcrread,tpm2_pcrevent",
    "src/bootstrapper/main.ts",
    ...flags.filter((flag) => flag === "rejoin"),
    ...["--attestation-variant", "qemu-vtpm", "--tpm", tpm.tcti],
    ...["--root", root, "--metadata-url", options.metadataUrl],
    ...["--state-disk", disk, "--state-disk-pbkdf", "pbkdf2:1000"],
    ...["--systemctl", `${root}/usr/bin/systemctl`, "--journalctl", "none"],
    ...["--port", "0", "--listen-address", "127.0.0.1"],
    ...["--join-retry-interval", "0.5", "--join-call-timeout", "10"],
    ...flags.filter((flag) => flag !== "rejoin"),
  ];
  return {
    name: options.name,
    root,
    disk,
    get tpm() {
      return tpm;
    },
    args,
    async start(flags) {
      const process = await startService("deno", args(flags), {
        readyMatch: BOOTSTRAPPER_LISTENING,
        cwd: REPO_ROOT,
        timeoutMs: 30_000,
      });
      processes.add(process);
      return process;
    },
    run: (flags) => runToExit("deno", args(flags), { cwd: REPO_ROOT, timeoutMs: 60_000 }),
    async pcr15() {
      return (await readPcrs({ tcti: tpm.tcti }, [15])).get(15)!;
    },
    async kubeadmTimes() {
      const lines = (await Deno.readTextFile(`${root}/var/lib/kubeadm-times`).catch(() => "")).split("\n");
      const at = (line: string) => Number(BigInt(line.split(" ")[1]) / 1_000_000n);
      const starts = lines.filter((line) => line.startsWith("start ")).map(at);
      const ends = lines.filter((line) => line.startsWith("end ")).map(at);
      return starts.map((start, i) => ({ start, end: ends[i] }));
    },
    async systemctlCalls() {
      const text = await Deno.readTextFile(`${root}/var/lib/systemctl-calls`).catch(() => "");
      return text.split("\n").filter((line) => line !== "");
    },
    async reboot() {
      await tpm.stop();
      tpm = await startTpm(tpmState, options.tamperPcr4);
    },
    async [Symbol.asyncDispose]() {
      for (const process of processes) await process.stop("SIGKILL").catch(() => {});
      await tpm.stop();
    },
  };
}

/** The node's swtpm with its boot measurements in PCRs 4 and 9. */
async function startTpm(stateDir: string, tamperPcr4 = false): Promise<Swtpm> {
  const tpm = await startSwtpm({ stateDir });
  for (const pcr of BOOT_PCRS) {
    await runLoadingTpmTool({ tcti: tpm.tcti }, "tpm2_pcrevent", [String(pcr)], {
      stdin: new TextEncoder().encode(`boot component measured into PCR ${pcr}`),
    });
  }
  if (tamperPcr4) {
    await runLoadingTpmTool({ tcti: tpm.tcti }, "tpm2_pcrevent", ["4"], {
      stdin: new TextEncoder().encode("a kernel the cluster does not expect"),
    });
  }
  return tpm;
}
