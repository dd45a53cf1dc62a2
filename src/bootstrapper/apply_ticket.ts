/**
 * Applying a join ticket (reference §5.5 and §6.9, with the fixes of
 * DESIGN §4), in this order:
 *
 *  1. check the ticket (before anything happens: a malformed ticket is
 *     refused with `retryable: true`, no lock taken, nothing written):
 *     salt, secret, disk key, certificate, token, CA pin, endpoint, and for
 *     control planes exactly the file names a join service sends (no path
 *     traversal possible: the names are an allow-list); a worker ticket
 *     carrying control-plane files is refused; every component checked as
 *     the installer would before downloading it;
 *  2. derive the cluster ID (HKDF of the measurement secret and salt);
 *  3. `tryLock(clusterId)`: false means an init holds the lock ("node is
 *     already being initialized"); an error means the marking failed.
 *     This is the point of no return: from here on every failure is
 *     terminal for this boot, and the caller's signal no longer cancels
 *     (the apply is bounded by its own timeout instead);
 *  4. `onLocked()` (stops the init server), called by the lock the moment
 *     it is taken, before marking: so also when marking fails, and before
 *     an init that asks meanwhile hears that it lost;
 *  5. the state disk's passphrase becomes the ticket's disk key (and the
 *     disk is marked initialized);
 *  6. control-plane files into `pkiDir` (control planes only), then the
 *     kubelet certificate and key; every file atomic (temp file in the same
 *     directory, fsync, rename) and 0600;
 *  7. the ticket's components (download, verify, install);
 *  8. `kubeadm join` with the ticket's token, CA pin and endpoint, at most
 *     `joinAttempts` (3) times with a pause between attempts, removing
 *     what a failed attempt left for kubeadm's preflight to refuse (a
 *     control plane that got as far as its static Pod manifests is not
 *     retried);
 *  9. start the kubelet unit;
 * 10. the node state (written as in step 6), last: on a bound node it says
 *     the join completed, also when the process died in between.
 *
 * **A failure after the lock** rejects with an {@linkcode ApplyError}
 * (`afterLock: true`) naming the step, and first removes every file steps
 * 6 and 10 wrote (control-plane files, kubelet key and certificate, node
 * state), best effort, so no secret of the failed ticket stays on disk and
 * the missing node state tells a restarted bootstrapper that this node
 * never finished joining. What remains: PCR 15 extended (until reboot), the
 * state disk keyed to the ticket's disk key and marked initialized (when
 * step 5 passed), installed components (not secret) and whatever kubeadm
 * itself wrote. **Wipe and retry** means: reformat the state disk (a new
 * LUKS2 header with a fresh initial passphrase and an uninitialized token,
 * which is what a first boot's disk preparation does) and reboot, so PCR 15
 * is zero again and the node starts as a fresh node; on the local cluster,
 * a fresh filesystem root, LUKS header and swtpm state.
 *
 * Tokens, keys and the measurement secret never reach a log line or an
 * error message: sub-errors are passed through with the token redacted by
 * value.
 *
 * @module
 */
import { dirname } from "node:path";
import { errorMessage } from "../error_message.ts";
import type { SaltRecord } from "./state_disk.ts";
import type { Component } from "../gen/components/components_pb.ts";
import type { IssueJoinTicketResponse } from "../gen/join/join_pb.ts";
import { CONTROL_PLANE_FILE_NAMES } from "../joinservice/controlplanefiles.ts";
import { MEASUREMENT_SALT_LENGTH } from "../init/protocol.ts";
import { deriveClusterId } from "../kms/keys.ts";
import type { Logger } from "../log/logger.ts";
import { ReasonError } from "../reason_error.ts";
import type { AppliedTicket, JoiningNode, NodeRole, TicketApplier } from "./joinclient.ts";
import {
  AFTER_DEADLINE_SETTLE_MS,
  errorFields,
  settledWithin,
  systemTimers,
  type Timers,
  withDeadline,
} from "./retry.ts";
import type { KubeadmJoinConfig } from "./kubeadm_config.ts";

/** Writes a file atomically (helper O's `writeFileAtomic` in `src/fs/atomic_write.ts`). */
export type WriteFileAtomic = (
  path: string,
  data: Uint8Array | string,
  options?: { mode?: number; signal?: AbortSignal },
) => Promise<void>;

/** Writes the node state file (helper O's `writeNodeState`). */
export type WriteNodeState = (
  path: string,
  state: { role: NodeRole; measurementSalt: Uint8Array },
  options?: { signal?: AbortSignal },
) => Promise<void>;

/** The one-way node lock (helper O's `NodeLock`). */
export interface NodeLockLike {
  /**
   * True for exactly one caller; rejects when marking the node failed (the lock stays taken).
   * `onTaken` is called synchronously when this caller takes the lock, before marking.
   */
  tryLock(clusterId: Uint8Array, options?: { signal?: AbortSignal; onTaken?: () => void }): Promise<boolean>;
}

/** The state disk (helper O's `LuksStateDisk`). */
export interface PassphraseChanger {
  /** Keyslot 0 from the initial passphrase to `newKey`, then the token marked initialized. */
  changePassphrase(
    newKey: Uint8Array,
    record: SaltRecord,
    options?: { signal?: AbortSignal },
  ): Promise<void>;
}

/** Installs Kubernetes components (`components.ts`'s `ComponentInstaller`). */
export interface ComponentsInstaller {
  /** Throws when `components` could not be installed here, before anything is downloaded (a malformed field). */
  check(components: readonly Component[]): void;
  /** Downloads, verifies and installs `components` in order. */
  install(components: readonly Component[], options?: { signal?: AbortSignal }): Promise<void>;
}

/** Runs `kubeadm join` ({@linkcode Kubeadm} in kubeadm.ts). */
export interface KubeadmJoiner {
  /** `kubeadm join` with `config`; rejects on failure (with a token-free message). */
  join(config: KubeadmJoinConfig, options?: { signal?: AbortSignal }): Promise<unknown>;
}

/** Starts systemd units (helper O's `Systemctl`). */
export interface UnitStarter {
  /** Starts `unit`. */
  start(unit: string, options?: { signal?: AbortSignal }): Promise<void>;
}

/** Where the applier writes (a subset of helper O's `NodePaths`). */
export interface ApplyPaths {
  /** `<root>/etc/kubernetes`: where kubeadm join writes the kubelet's kubeconfigs and static Pod manifests. */
  kubernetesDir: string;
  /** `<root>/etc/kubernetes/pki`. */
  pkiDir: string;
  /** `<root>/run/state/kubelet/pki/kubelet-client-key.pem`. */
  kubeletKey: string;
  /** `<root>/run/state/kubelet/pki/kubelet-client-crt.pem`. */
  kubeletCert: string;
  /** `<root>/run/state/constellation/node_state.json`. */
  nodeState: string;
}

/** What the applier needs. */
export interface ApplyDependencies {
  /** The node lock; taking it marks the node (PCR 15). */
  lock: NodeLockLike;
  /**
   * Called once when this applier takes the lock, before marking (so also if marking fails): stops the init
   * server. Must not throw.
   */
  onLocked(): void;
  /** The state disk. */
  disk: PassphraseChanger;
  /** Writes secret files atomically. */
  writeFile: WriteFileAtomic;
  /** Writes the node state file. */
  writeNodeState: WriteNodeState;
  /** Removes a file if it exists (helper O's `removeIfExists`); used to clean up after a terminal failure. */
  removeFile(path: string): Promise<unknown>;
  /** Installs the ticket's Kubernetes components. */
  components: ComponentsInstaller;
  /** Runs `kubeadm join`. */
  kubeadm: KubeadmJoiner;
  /** Starts the kubelet unit. */
  systemd: UnitStarter;
  /** Where the files go. */
  paths: ApplyPaths;
  /** Structured log; never receives a secret. */
  logger: Logger;
  /** Pauses and the apply timeout; default real time. */
  timers?: Timers;
}

/** Knobs of the applier. */
export interface ApplyOptions {
  /** Attempts of `kubeadm join`; default 3. */
  joinAttempts?: number;
  /** Pause between `kubeadm join` attempts; default 10 s. */
  joinRetryPauseMs?: number;
  /** Bound on everything after the lock; default 15 min. */
  applyTimeoutMs?: number;
  /** The kubelet unit; default "kubelet.service". */
  kubeletUnit?: string;
  /** The API server port a control plane advertises; default 6443. */
  apiServerPort?: number;
}

/** Why applying a ticket failed. */
export type ApplyFailure =
  | "invalid-ticket" // before the lock: the ticket is malformed
  | "aborted" // before the lock: the caller aborted
  | "lock-held" // an init holds the node lock
  | "lock-failed" // taking the lock failed (marking PCR 15)
  | "disk" // the state disk passphrase could not be changed
  | "files" // control-plane files, kubelet files or node state could not be written
  | "components" // a component could not be installed
  | "kubeadm-join" // kubeadm join failed on every attempt
  | "kubelet" // the kubelet unit did not start
  | "timeout"; // the apply timeout passed after the lock

/** Applying a ticket failed. Never carries a secret. */
export class ApplyError extends ReasonError<ApplyFailure> {
  /** Whether the node lock was taken by this applier before the failure (then it is terminal). */
  readonly afterLock: boolean;
  /** Whether the join client may try another ticket: only failures before the lock. */
  readonly retryable: boolean;

  /** A failure for `reason`; `afterLock` says whether the lock was already taken. */
  constructor(reason: ApplyFailure, message: string, afterLock: boolean, options?: ErrorOptions) {
    super(reason, message, options);
    this.afterLock = afterLock;
    this.retryable = !afterLock && reason !== "lock-held";
  }
}

const TOKEN = /^[a-z0-9]{6}\.[a-z0-9]{16}$/;
const CA_HASH = /^sha256:[0-9a-f]{64}$/;

/** Applies join tickets: {@linkcode TicketApplier} for the join client. */
export class JoinTicketApplier implements TicketApplier {
  readonly #deps: ApplyDependencies;
  readonly #timers: Timers;
  readonly #joinAttempts: number;
  readonly #joinRetryPauseMs: number;
  readonly #applyTimeoutMs: number;
  readonly #kubeletUnit: string;
  readonly #apiServerPort: number;

  /** An applier over `deps`. */
  constructor(deps: ApplyDependencies, options: ApplyOptions = {}) {
    this.#deps = deps;
    this.#timers = deps.timers ?? systemTimers;
    this.#joinAttempts = options.joinAttempts ?? 3;
    this.#joinRetryPauseMs = options.joinRetryPauseMs ?? 10_000;
    this.#applyTimeoutMs = options.applyTimeoutMs ?? 15 * 60_000;
    this.#kubeletUnit = options.kubeletUnit ?? "kubelet.service";
    this.#apiServerPort = options.apiServerPort ?? 6443;
  }

  /**
   * Applies `ticket` for `node`. `signal` cancels only before the lock.
   * Rejects with {@linkcode ApplyError}.
   */
  async apply(
    ticket: IssueJoinTicketResponse,
    node: JoiningNode,
    options: { signal?: AbortSignal } = {},
  ): Promise<AppliedTicket> {
    const { signal } = options;
    const { logger, lock } = this.#deps;
    const controlPlaneFiles = checkTicket(ticket, node.role);
    try {
      // A component this node cannot install would fail only after the lock.
      this.#deps.components.check(ticket.kubernetesComponents);
    } catch (error) {
      throw new ApplyError("invalid-ticket", `invalid join ticket: ${errorMessage(error)}`, false, {
        cause: error,
      });
    }
    const clusterId = await deriveClusterId(ticket.measurementSecret, ticket.measurementSalt);
    if (signal?.aborted) throw new ApplyError("aborted", "aborted before the node lock", false);
    let locked: boolean;
    try {
      locked = await lock.tryLock(clusterId, { onTaken: () => this.#deps.onLocked() });
    } catch (error) {
      // Marking failed but the lock is taken (onLocked stopped the init server): this boot is over.
      throw new ApplyError("lock-failed", `acquiring node lock: ${errorMessage(error)}`, true, {
        cause: error,
      });
    }
    if (!locked) throw new ApplyError("lock-held", "node is already being initialized", false);
    logger.info("took the node lock for a join", { clusterId: clusterId.toHex(), role: node.role });

    const written: string[] = [];
    let work: Promise<void> | undefined;
    try {
      await withDeadline(
        this.#timers,
        "applying the join ticket",
        this.#applyTimeoutMs,
        undefined,
        (deadline) => work = this.#afterLock(ticket, node, controlPlaneFiles, written, deadline),
      );
    } catch (error) {
      // After the deadline a step may still be finishing: its file must not land after the cleanup.
      if (work) await settledWithin(work, this.#timers, AFTER_DEADLINE_SETTLE_MS);
      await this.#removeWritten(written);
      const failure = error instanceof ApplyError
        ? error
        : new ApplyError("timeout", redact(errorMessage(error), ticket.token), true, { cause: error });
      logger.error("joining failed after the node lock", { ...errorFields(failure), step: failure.reason });
      throw failure;
    }
    logger.info("joined the cluster", { nodeName: node.nodeName, role: node.role });
    return { clusterId };
  }

  async #afterLock(
    ticket: IssueJoinTicketResponse,
    node: JoiningNode,
    controlPlaneFiles: readonly { name: string; data: Uint8Array }[],
    written: string[],
    signal: AbortSignal,
  ): Promise<void> {
    const deps = this.#deps;
    const step = async (reason: ApplyFailure, what: string, run: () => Promise<unknown>) => {
      try {
        await run();
      } catch (error) {
        if (error instanceof ApplyError) throw error;
        throw new ApplyError(reason, `${what}: ${redact(errorMessage(error), ticket.token)}`, true, {
          cause: error,
        });
      }
    };
    const write = async (path: string, data: Uint8Array | string) => {
      await Deno.mkdir(dirname(path), { recursive: true, mode: 0o755 });
      written.push(path);
      await deps.writeFile(path, data, { mode: 0o600, signal });
    };

    await step(
      "disk",
      "updating disk passphrase",
      () =>
        deps.disk.changePassphrase(ticket.stateDiskKey, {
          measurementSalt: ticket.measurementSalt,
          measurementSecret: ticket.measurementSecret,
        }, { signal }),
    );
    await step("files", "writing control plane files", async () => {
      for (const file of controlPlaneFiles) await write(`${deps.paths.pkiDir}/${file.name}`, file.data);
    });
    await step("files", "writing kubelet certificate and key", async () => {
      await write(deps.paths.kubeletCert, ticket.kubeletCert);
      await write(deps.paths.kubeletKey, node.kubeletKeyPem);
    });
    await step(
      "components",
      "installing kubernetes components",
      () => deps.components.install(ticket.kubernetesComponents, { signal }),
    );
    const config: KubeadmJoinConfig = {
      apiServerEndpoint: ticket.apiServerEndpoint,
      token: ticket.token,
      caCertHashes: [ticket.discoveryTokenCaCertHash],
      nodeName: node.nodeName,
      nodeIp: node.vpcIp,
      providerId: node.providerId,
      ...(node.role === "ControlPlane"
        ? { controlPlane: { advertiseAddress: node.vpcIp, bindPort: this.#apiServerPort } }
        : {}),
    };
    await this.#kubeadmJoin(config, node.role, signal);
    await step(
      "kubelet",
      `starting ${this.#kubeletUnit}`,
      () => deps.systemd.start(this.#kubeletUnit, { signal }),
    );
    // Last: a node state on a bound node says its join completed (run.ts starts only such a node's kubelet).
    await step("files", "persisting node state", async () => {
      written.push(deps.paths.nodeState);
      await deps.writeNodeState(deps.paths.nodeState, {
        role: node.role,
        measurementSalt: ticket.measurementSalt,
      }, { signal });
    });
  }

  /**
   * `kubeadm join`, at most `joinAttempts` times. kubeadm's preflight refuses to run where an earlier attempt
   * left the kubelet's kubeconfigs (and a worker's CA certificate), so before a retry those that the failed
   * attempt wrote are removed. A control plane whose attempt got as far as writing static Pod manifests is not
   * retried: that needs `kubeadm reset`, and the attempt may have added an etcd member.
   */
  async #kubeadmJoin(config: KubeadmJoinConfig, role: NodeRole, signal: AbortSignal): Promise<void> {
    const { logger, kubeadm, paths } = this.#deps;
    const leftovers = [
      `${paths.kubernetesDir}/kubelet.conf`,
      `${paths.kubernetesDir}/bootstrap-kubelet.conf`,
    ];
    if (role !== "ControlPlane") leftovers.push(`${paths.pkiDir}/ca.crt`);
    const manifests = `${paths.kubernetesDir}/manifests`;
    const existedBefore = new Set(await existingFiles(leftovers));
    const manifestsBefore = new Set(await fileNames(manifests));
    let first: string | undefined;
    for (let attempt = 1;; attempt++) {
      try {
        await kubeadm.join(config, { signal });
        return;
      } catch (error) {
        const message = redact(errorMessage(error), config.token);
        first ??= message;
        const wroteManifests = role === "ControlPlane" &&
          (await fileNames(manifests)).some((name) => !manifestsBefore.has(name));
        if (signal.aborted || attempt >= this.#joinAttempts || wroteManifests) {
          const failures = first === message ? `last: ${message}` : `first: ${first}; last: ${message}`;
          throw new ApplyError(
            signal.aborted ? "timeout" : "kubeadm-join",
            `joining Kubernetes cluster: kubeadm join failed ${attempt} time(s)${
              wroteManifests && attempt < this.#joinAttempts
                ? " after writing the control plane's static Pod manifests (not retried: that needs kubeadm reset)"
                : ""
            }; ${failures}`,
            true,
            { cause: error },
          );
        }
        const removed = (await existingFiles(leftovers)).filter((path) => !existedBefore.has(path));
        for (const path of removed) {
          // Left in place, the file makes the next attempt's preflight fail naming it.
          await this.#deps.removeFile(path).catch((error) =>
            logger.error("could not remove a file of the failed kubeadm join", {
              path,
              ...errorFields(error),
            })
          );
        }
        logger.warn("kubeadm join failed; retrying", {
          attempt,
          of: this.#joinAttempts,
          retryInMs: this.#joinRetryPauseMs,
          error: message,
          ...(removed.length > 0 && { removedLeftovers: removed }),
        });
      }
      await this.#timers.sleep(this.#joinRetryPauseMs, { signal });
    }
  }

  /** Removes what this apply wrote, best effort; every removal failure is logged. */
  async #removeWritten(written: readonly string[]): Promise<void> {
    for (const path of [...written].reverse()) {
      try {
        await this.#deps.removeFile(path);
      } catch (error) {
        this.#deps.logger.error("could not remove a file of the failed join", {
          path,
          ...errorFields(error),
        });
      }
    }
  }
}

/**
 * Checks a ticket before anything happens and returns the control-plane
 * files to write (none for a worker). Throws {@linkcode ApplyError}
 * "invalid-ticket".
 */
export function checkTicket(
  ticket: IssueJoinTicketResponse,
  role: NodeRole,
): { name: string; data: Uint8Array }[] {
  const invalid = (why: string): never => {
    throw new ApplyError("invalid-ticket", `invalid join ticket: ${why}`, false);
  };
  if (ticket.measurementSalt.length !== MEASUREMENT_SALT_LENGTH) {
    invalid(`measurement salt has ${ticket.measurementSalt.length} bytes, want ${MEASUREMENT_SALT_LENGTH}`);
  }
  if (ticket.measurementSecret.length === 0) invalid("no measurement secret");
  if (ticket.stateDiskKey.length === 0) invalid("no state disk key");
  if (ticket.kubeletCert.length === 0) invalid("no kubelet certificate");
  if (!TOKEN.test(ticket.token)) invalid("the bootstrap token is not of the form <6>.<16> ([a-z0-9])");
  if (!CA_HASH.test(ticket.discoveryTokenCaCertHash)) {
    invalid(
      `the discovery CA hash ${JSON.stringify(ticket.discoveryTokenCaCertHash)} is not sha256:<64 hex>`,
    );
  }
  if (!/^[^\s/]+:\d{1,5}$/.test(ticket.apiServerEndpoint)) {
    invalid(`the API server endpoint ${JSON.stringify(ticket.apiServerEndpoint)} is not host:port`);
  }
  const files = ticket.controlPlaneFiles;
  if (role === "Worker") {
    if (files.length > 0) invalid(`a worker's ticket carries ${files.length} control-plane file(s)`);
    return [];
  }
  const seen = new Set<string>();
  for (const file of files) {
    const shown = JSON.stringify(file.name.slice(0, 100));
    if (file.name.startsWith("/") || file.name.split(/[/\\]/).includes("..")) {
      invalid(`control-plane file name ${shown} leaves the PKI directory`);
    }
    if (!CONTROL_PLANE_FILE_NAMES.includes(file.name)) {
      invalid(`control-plane file name ${shown} is not one the join service sends`);
    }
    if (seen.has(file.name)) invalid(`control-plane file ${shown} appears twice`);
    seen.add(file.name);
    if (file.data.length === 0) invalid(`control-plane file ${shown} is empty`);
  }
  const missing = CONTROL_PLANE_FILE_NAMES.filter((name) => !seen.has(name));
  if (missing.length > 0) invalid(`a control plane's ticket lacks ${missing.join(", ")}`);
  return files.map((file) => ({ name: file.name, data: file.data }));
}

/** `text` with every occurrence of the token (and of its secret half) replaced. */
function redact(text: string, token: string): string {
  let out = text;
  const secret = token.split(".")[1];
  if (token !== "") out = out.replaceAll(token, "[redacted]");
  if (secret) out = out.replaceAll(secret, "[redacted]");
  return out;
}

/** Those of `paths` that exist. */
async function existingFiles(paths: readonly string[]): Promise<string[]> {
  const exists = await Promise.all(paths.map((path) => Deno.lstat(path).then(() => true, () => false)));
  return paths.filter((_, i) => exists[i]);
}

/** The names in directory `dir`; none when it cannot be read (kubeadm's own preflight then says why). */
async function fileNames(dir: string): Promise<string[]> {
  try {
    return (await Array.fromAsync(Deno.readDir(dir))).map((entry) => entry.name);
  } catch {
    return [];
  }
}
