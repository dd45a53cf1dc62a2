/**
 * The bootstrapper's command line: `bootstrapper [flags]` turns the node into
 * a cluster member (init server and join client); `bootstrapper rejoin
 * [flags]` unlocks an initialized state disk and re-binds PCR 15 after a
 * reboot, before the normal start.
 *
 * Where the original read an environment variable, the flag defaults to it
 * (`CONSTEL_ATTESTATION_VARIANT`).
 *
 * @module
 */
import { isAbsolute } from "node:path";
import type { LogLevel } from "../log/logger.ts";
import {
  parseFlags,
  parseHttpUrlFlag,
  parseListenAddress,
  parseLogLevelFlag,
  parsePort,
  parsePositive,
  parseSeconds,
  UsageError,
} from "../flags/flags.ts";
import {
  BROWSER_LISTENER_OPTIONS,
  type BrowserListenerFlags,
  browserListenerUsage,
  parseBrowserListener,
} from "../flags/browser_listener.ts";
import { KubeconfigError, parseApiServerUrl } from "../kubernetes/kubeconfig.ts";

/** What the process does. */
export type BootstrapperCommand = "run" | "rejoin";

/** A TPM given to tpm2-tools as a TCTI string, or none (the dummy variant only). */
export type TpmFlag = { tcti: string } | "none";

/** The bootstrapper's settings. */
export interface BootstrapperFlags {
  /** `run` (default) or `rejoin`. */
  command: BootstrapperCommand;
  /** The init server's port. */
  port: number;
  /** The address the init server binds. */
  listenAddress: string;
  /** The attestation variant, e.g. "qemu-vtpm". */
  attestationVariant: string;
  /** The TPM holding PCR 15 and the attestation key. */
  tpm: TpmFlag;
  /** Base URL of the QEMU-style metadata API. */
  metadataUrl: string;
  /** The node's filesystem root: node state, /etc/kubernetes and kubelet files go under it. */
  root: string;
  /** The kubeadm executable. */
  kubeadm: string;
  /** The cryptsetup executable. */
  cryptsetup: string;
  /** The systemctl executable, or "none" on a node without systemd (the kubelet is not started). */
  systemctl: string;
  /** The journalctl executable, or "none" (logs come from the bootstrapper's own log file). */
  journalctl: string;
  /** The state disk: a LUKS2 block device, or a file holding a LUKS2 header. */
  stateDisk: string;
  /** The state disk's first-boot passphrase. */
  stateDiskPassphraseFile: string;
  /** Key derivation for the disk key's keyslot; undefined: cryptsetup's default (argon2id). */
  stateDiskPbkdf?: { type: "pbkdf2" | "argon2i" | "argon2id"; forceIterations?: number };
  /**
   * Where Init creates the cluster objects (the master secret among them) after kubeadm init: this node's own
   * API server, so that they never cross the network.
   */
  initApiServer: string;
  /** The join service's port on control-plane nodes. */
  joinServicePort: number;
  /** The recovery server's port (`rejoin` on control-plane nodes); 0 picks a free port. */
  recoveryPort: number;
  /** Pause between join attempts. */
  joinRetryIntervalMs: number;
  /** Deadline of each metadata or join-service call. */
  joinCallTimeoutMs: number;
  /** The lowest level logged. */
  logLevel: LogLevel;
  /** The browser listener (GetAttestation only, plain HTTP), when `--browser-port` is given. */
  browser?: BrowserListenerFlags;
}

/**
 * The node's own kube-apiserver over loopback (kubeadm's configuration here certifies 127.0.0.1): Deno trusts
 * admin.conf's CA only in addition to its default roots, so the master secret must not go to an address a
 * public CA could certify, such as the control plane endpoint's.
 */
export const DEFAULT_INIT_API_SERVER = "https://127.0.0.1:6443";

/** Usage text for `--help`. */
export const BOOTSTRAPPER_USAGE = `Usage: bootstrapper [rejoin] --attestation-variant <variant> [flags]

Turns this node into a member of a confidential Kubernetes cluster. If PCR 15
is already set, the node is bound to a cluster: starts the kubelet and exits.
Otherwise serves init.API (the operator's init, over TLS) and runs the join
client at once; the first to take the node lock wins and the other stops.

  rejoin    after a reboot with an initialized state disk: asks the join
            service for the disk key, checks it opens the disk, and re-binds
            PCR 15; then run the bootstrapper as usual. A control-plane node
            also serves recoverproto.API on --recovery-port meanwhile, for
            when no join service runs (cli recover --node <address>:9999)

Flags:
  --attestation-variant <v>     qemu-vtpm or dummy (default: $CONSTEL_ATTESTATION_VARIANT;
                                dummy is insecure, for development)
  --tpm <tcti|none>             the TPM, as a tpm2-tools TCTI (default device:/dev/tpmrm0;
                                e.g. swtpm:host=127.0.0.1,port=2321); none only with dummy
                                (PCR 15 is then a file under the root: no measured binding)
  --metadata-url <url>          QEMU-style metadata API (default http://10.42.0.1:8080)
  --root <dir>                  the node's filesystem root (default /)
  --kubeadm <file>              kubeadm (default <root>/run/state/bin/kubeadm)
  --cryptsetup <file>           cryptsetup (default cryptsetup, from PATH)
  --systemctl <file|none>       systemctl (default systemctl)
  --journalctl <file|none>      journalctl (default journalctl)
  --state-disk <file>           the state disk's LUKS2 device or header file
                                (default /dev/disk/by-partlabel/state)
  --state-disk-passphrase-file <file>
                                first-boot passphrase (default <root>/run/cryptsetup-keys.d/state.key)
  --state-disk-pbkdf <type[:iterations]>
                                key derivation for the disk key's keyslot (default: cryptsetup's,
                                argon2id tuned to ~2 s); e.g. pbkdf2:1000 for throwaway test disks
  --init-api-server <url>       where Init creates the cluster objects, the master
                                secret among them: this node's own API server
                                (default ${DEFAULT_INIT_API_SERVER}; admin.conf's CA)
  --port <port>                 init.API port (default 9000)
  --listen-address <addr>       IP address to bind (default 0.0.0.0)
  --join-service-port <port>    the join service on control-plane nodes (default 30090)
  --recovery-port <port>        rejoin: the recovery server's port (default 9999)
  --join-retry-interval <s>     pause between join attempts (default 30)
  --join-call-timeout <s>       deadline per metadata or join-service call (default 30)
  --log-level <level>           debug, info, warn or error (default info)
  --help                        show this help

The browser port (for the browser console's attestation inspector), while the init server runs:
${browserListenerUsage("init.API/GetAttestation")}`;

/** Default TPM: the kernel's resource manager. */
export const DEFAULT_TPM_TCTI = "device:/dev/tpmrm0";

/**
 * Parses the command line; `env` supplies `CONSTEL_ATTESTATION_VARIANT`.
 * Returns "help" when `--help` is given.
 *
 * @throws {UsageError} naming the bad flag.
 */
export function parseBootstrapperFlags(
  args: string[],
  env: { attestationVariant?: string } = {},
): BootstrapperFlags | "help" {
  let command: BootstrapperCommand = "run";
  if (args[0] === "rejoin" || args[0] === "run") {
    command = args[0];
    args = args.slice(1);
  } else if (args[0] !== undefined && !args[0].startsWith("-")) {
    throw new UsageError(`unknown command "${args[0]}" (want rejoin, or flags only)`);
  }
  const values = parseFlags(args, {
    "attestation-variant": { type: "string" },
    tpm: { type: "string", default: DEFAULT_TPM_TCTI },
    "metadata-url": { type: "string", default: "http://10.42.0.1:8080" },
    root: { type: "string", default: "/" },
    kubeadm: { type: "string" },
    cryptsetup: { type: "string", default: "cryptsetup" },
    systemctl: { type: "string", default: "systemctl" },
    journalctl: { type: "string", default: "journalctl" },
    "state-disk": { type: "string", default: "/dev/disk/by-partlabel/state" },
    "state-disk-passphrase-file": { type: "string" },
    "state-disk-pbkdf": { type: "string" },
    "init-api-server": { type: "string", default: DEFAULT_INIT_API_SERVER },
    port: { type: "string", default: "9000" },
    "listen-address": { type: "string", default: "0.0.0.0" },
    "join-service-port": { type: "string", default: "30090" },
    "recovery-port": { type: "string", default: "9999" },
    "join-retry-interval": { type: "string", default: "30" },
    "join-call-timeout": { type: "string", default: "30" },
    "log-level": { type: "string", default: "info" },
    help: { type: "boolean", default: false },
    ...BROWSER_LISTENER_OPTIONS,
  }, "bootstrapper");
  if (values.help) return "help";

  const variant = values["attestation-variant"] ?? env.attestationVariant;
  if (!variant) {
    throw new UsageError(
      "--attestation-variant (or CONSTEL_ATTESTATION_VARIANT) is required: qemu-vtpm, or dummy for development",
    );
  }
  const tpm: TpmFlag = values.tpm === "none" ? "none" : { tcti: values.tpm };
  if (tpm === "none" && variant !== "dummy") {
    throw new UsageError(`--tpm none works only with the dummy variant, not ${variant}: PCR 15 needs a TPM`);
  }
  const metadataUrl = parseHttpUrlFlag(values["metadata-url"], "--metadata-url");
  const root = absolute(values.root, "--root");
  const logLevel = parseLogLevelFlag(values["log-level"]);
  const listenAddress = parseListenAddress(values["listen-address"], "--listen-address");
  return {
    command,
    port: parsePort(values.port),
    listenAddress,
    attestationVariant: variant,
    tpm,
    metadataUrl,
    root,
    kubeadm: values.kubeadm ?? underRoot(root, "run/state/bin/kubeadm"),
    cryptsetup: values.cryptsetup,
    systemctl: values.systemctl,
    journalctl: values.journalctl,
    stateDisk: values["state-disk"],
    stateDiskPassphraseFile: values["state-disk-passphrase-file"] ??
      underRoot(root, "run/cryptsetup-keys.d/state.key"),
    stateDiskPbkdf: values["state-disk-pbkdf"] === undefined ? undefined : pbkdf(values["state-disk-pbkdf"]),
    initApiServer: parseHttpsUrl(values["init-api-server"], "--init-api-server"),
    joinServicePort: parsePort(values["join-service-port"], "--join-service-port"),
    recoveryPort: parsePort(values["recovery-port"], "--recovery-port"),
    joinRetryIntervalMs: seconds(values["join-retry-interval"], "--join-retry-interval"),
    joinCallTimeoutMs: seconds(values["join-call-timeout"], "--join-call-timeout"),
    logLevel,
    browser: parseBrowserListener(values, listenAddress),
  };
}

function parseHttpsUrl(value: string, flag: string): string {
  try {
    return parseApiServerUrl(value, flag);
  } catch (error) {
    if (error instanceof KubeconfigError) throw new UsageError(error.message);
    throw error;
  }
}

function absolute(value: string, flag: string): string {
  if (!isAbsolute(value)) throw new UsageError(`${flag} must be an absolute path, got "${value}"`);
  return value.length > 1 ? value.replace(/\/+$/, "") : value;
}

function underRoot(root: string, path: string): string {
  return root === "/" ? `/${path}` : `${root}/${path}`;
}

function pbkdf(value: string): NonNullable<BootstrapperFlags["stateDiskPbkdf"]> {
  const match = /^(pbkdf2|argon2i|argon2id)(?::(\d+))?$/.exec(value);
  if (!match) {
    throw new UsageError(
      `invalid --state-disk-pbkdf "${value}": want pbkdf2, argon2i or argon2id, e.g. pbkdf2:1000`,
    );
  }
  const type = match[1] as "pbkdf2" | "argon2i" | "argon2id";
  return match[2] === undefined
    ? { type }
    : { type, forceIterations: parsePositive(match[2], "--state-disk-pbkdf") };
}

const seconds = parseSeconds;
