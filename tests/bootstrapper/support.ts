/**
 * Test support for the join client, the ticket applier and rejoin: hand-driven
 * timers on a {@linkcode ManualClock}, a log that keeps its lines, a valid
 * join ticket, and fakes of every OS dependency of the applier over a
 * temporary root (a simple atomic write standing in for helper O's
 * `writeFileAtomic`).
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import type { Timers } from "../../src/bootstrapper/retry.ts";
import { writeNodeState } from "../../src/bootstrapper/node_state.ts";
import { removeIfExists, writeFileAtomic } from "../../src/fs/atomic_write.ts";
import type { KubeadmJoinConfig } from "../../src/bootstrapper/kubeadm_config.ts";
import type { ApplyDependencies } from "../../src/bootstrapper/apply_ticket.ts";
import type { Component } from "../../src/gen/components/components_pb.ts";
import { type IssueJoinTicketResponse, IssueJoinTicketResponseSchema } from "../../src/gen/join/join_pb.ts";
import { CONTROL_PLANE_FILE_NAMES } from "../../src/joinservice/controlplanefiles.ts";
import { ComponentInstaller } from "../../src/bootstrapper/components.ts";
import { createLogger, type Logger, silentLogger } from "../../src/log/logger.ts";
import { ManualClock } from "../support/manual_clock.ts";

interface PendingTimer {
  at: number;
  ms: number;
  resolve: () => void;
}

/** {@linkcode Timers} that fire only when the test says so, moving a {@linkcode ManualClock}. */
export class ManualTimers implements Timers {
  readonly clock: ManualClock = new ManualClock();
  readonly #pending = new Set<PendingTimer>();
  /** Every sleep requested, in order (ms). */
  readonly requested: number[] = [];

  sleep(ms: number, options: { signal?: AbortSignal } = {}): Promise<void> {
    const { signal } = options;
    this.requested.push(ms);
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const timer: PendingTimer = {
        at: this.clock.now() + ms,
        ms,
        resolve: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.#pending.delete(timer);
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#pending.add(timer);
    });
  }

  /** Timers not yet fired or cancelled, by duration. */
  get pending(): number[] {
    return [...this.#pending].map((timer) => timer.ms);
  }

  /** Fires the earliest pending timer of duration `ms` (moving the clock); false when there is none. */
  fire(ms: number): boolean {
    const timer = [...this.#pending].filter((t) => t.ms === ms).sort((a, b) => a.at - b.at)[0];
    if (!timer) return false;
    this.#pending.delete(timer);
    this.clock.time = Math.max(this.clock.time, timer.at);
    timer.resolve();
    return true;
  }
}

/**
 * Awaits `promise` while firing every pending timer of duration `ms` (the
 * retry interval) once the code under test waits on one; other timers
 * (deadlines) fire only when `fireAlso` lists them. Fails after `maxTicks`
 * event-loop turns without settling.
 */
export async function drive<T>(
  promise: Promise<T>,
  timers: ManualTimers,
  ms: number | number[],
  maxTicks = 20_000,
): Promise<T> {
  const durations = Array.isArray(ms) ? ms : [ms];
  let settled = false;
  const watched = promise.finally(() => settled = true);
  watched.catch(() => {});
  for (let tick = 0; tick < maxTicks && !settled; tick++) {
    await new Promise((resolve) => setTimeout(resolve, 0));
    if (!settled) { for (const duration of durations) if (timers.fire(duration)) break; }
  }
  if (!settled) throw new Error(`did not settle within ${maxTicks} ticks; pending timers ${timers.pending}`);
  return await watched;
}

/** Waits (real event-loop turns) until `condition` holds. */
export async function until(condition: () => boolean, maxTicks = 20_000): Promise<void> {
  for (let tick = 0; tick < maxTicks; tick++) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
  throw new Error("condition did not hold in time");
}

/** A logger keeping its JSON lines. */
export function recordingLogger(): {
  logger: Logger;
  lines: string[];
  entries: () => Record<string, unknown>[];
} {
  const lines: string[] = [];
  return {
    logger: createLogger({ level: "debug", write: (line) => lines.push(line) }),
    lines,
    entries: () => lines.map((line) => JSON.parse(line)),
  };
}

/** The ticket's bootstrap token (a secret the tests look for in logs). */
export const TOKEN = "abcdef.0123456789abcdef";

/** A valid ticket; control-plane files when `controlPlane`. */
export function validTicket(
  options: { controlPlane?: boolean; components?: Component[] } = {},
): IssueJoinTicketResponse {
  return create(IssueJoinTicketResponseSchema, {
    stateDiskKey: new Uint8Array(32).fill(0xd1),
    measurementSalt: new Uint8Array(32).fill(0x5a),
    measurementSecret: new Uint8Array(32).fill(0x3e),
    kubeletCert: new TextEncoder().encode("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"),
    apiServerEndpoint: "10.0.0.1:6443",
    token: TOKEN,
    discoveryTokenCaCertHash: `sha256:${"ab".repeat(32)}`,
    controlPlaneFiles: options.controlPlane
      ? CONTROL_PLANE_FILE_NAMES.map((name) => ({
        name,
        data: new TextEncoder().encode(`content of ${name}`),
      }))
      : [],
    kubernetesComponents: options.components ?? [],
  });
}

/** What the fake OS recorded. */
export interface FakeOs {
  deps: ApplyDependencies;
  root: string;
  locks: Uint8Array[];
  onLockedCalls: number;
  passphrases: Uint8Array[];
  /** The measurement salt recorded with each passphrase change (in the disk's token). */
  recordedSalts: Uint8Array[];
  joins: KubeadmJoinConfig[];
  /** Whether the node state file existed when the kubelet unit was started, per start. */
  nodeStateAtKubeletStart: boolean[];
  started: string[];
  installed: Component[][];
}

/** Options of {@linkcode fakeOs}. */
export interface FakeOsOptions {
  /** What tryLock answers (a string: it rejects with that message, the lock taken); default true. */
  lock?: boolean | string;
  /** kubeadm join fails this many times first (with the token in its message, to check redaction). */
  kubeadmFailures?: number;
  /**
   * kubeadm join then fails this many times after writing what its phases write before the kubelet's TLS
   * bootstrap times out: a control plane's static Pod manifests, the kubelet's kubeconfigs, a worker's CA.
   */
  kubeadmLateFailures?: number;
  logger: Logger;
  timers: Timers;
}

/** Fakes of every applier dependency over a fresh temporary root. */
export async function fakeOs(options: FakeOsOptions): Promise<FakeOs> {
  const root = await Deno.makeTempDir({ prefix: "apply-ticket-" });
  let kubeadmFailures = options.kubeadmFailures ?? 0;
  let kubeadmLateFailures = options.kubeadmLateFailures ?? 0;
  const os: FakeOs = {
    root,
    locks: [],
    onLockedCalls: 0,
    passphrases: [],
    recordedSalts: [],
    joins: [],
    nodeStateAtKubeletStart: [],
    started: [],
    installed: [],
    deps: undefined as unknown as ApplyDependencies,
  };
  os.deps = {
    lock: {
      tryLock: (clusterId, lockOptions) => {
        os.locks.push(clusterId);
        const lock = options.lock ?? true;
        if (lock !== false) lockOptions?.onTaken?.();
        return typeof lock === "string" ? Promise.reject(new Error(lock)) : Promise.resolve(lock);
      },
    },
    onLocked: () => {
      os.onLockedCalls++;
    },
    disk: {
      changePassphrase: (key, record) => {
        os.passphrases.push(key);
        os.recordedSalts.push(record.measurementSalt);
        return Promise.resolve();
      },
    },
    writeFile: writeFileAtomic,
    writeNodeState,
    removeFile: removeIfExists,
    components: {
      // The real installer's check, over this root: what the node refuses before its lock.
      check: (components) =>
        new ComponentInstaller({ logger: silentLogger }, { root, tmpDir: `${root}/tmp` }).check(components),
      install: (components) => {
        os.installed.push([...components]);
        return Promise.resolve();
      },
    },
    kubeadm: {
      join: async (config) => {
        os.joins.push(config);
        // kubeadm's preflight FileAvailable checks: what an earlier attempt wrote must be gone.
        const kubernetesDir = `${root}/etc/kubernetes`;
        const outputs = [`${kubernetesDir}/kubelet.conf`, `${kubernetesDir}/bootstrap-kubelet.conf`];
        if (!config.controlPlane) outputs.push(`${kubernetesDir}/pki/ca.crt`);
        for (const file of outputs) {
          if (await Deno.lstat(file).then(() => true, () => false)) {
            throw new Error(`kubeadm join failed (code 1): [ERROR FileAvailable]: ${file} already exists`);
          }
        }
        if (kubeadmFailures > 0) {
          kubeadmFailures--;
          throw new Error(`kubeadm join failed (code 1): token ${config.token} rejected`);
        }
        if (kubeadmLateFailures > 0) {
          kubeadmLateFailures--;
          if (config.controlPlane) {
            await Deno.mkdir(`${kubernetesDir}/manifests`, { recursive: true });
            await Deno.writeTextFile(`${kubernetesDir}/manifests/kube-apiserver.yaml`, "kind: Pod\n");
          }
          await Deno.mkdir(`${kubernetesDir}/pki`, { recursive: true });
          for (const file of outputs) await Deno.writeTextFile(file, "written by the failed attempt\n");
          throw new Error("kubeadm join failed (code 1): error execution phase kubelet-start: timed out");
        }
        return { stdout: "", stderr: "" };
      },
    },
    systemd: {
      start: async (unit) => {
        os.started.push(unit);
        const nodeState = `${root}/run/state/constellation/node_state.json`;
        os.nodeStateAtKubeletStart.push(await Deno.stat(nodeState).then(() => true, () => false));
      },
    },
    paths: {
      kubernetesDir: `${root}/etc/kubernetes`,
      pkiDir: `${root}/etc/kubernetes/pki`,
      kubeletKey: `${root}/run/state/kubelet/pki/kubelet-client-key.pem`,
      kubeletCert: `${root}/run/state/kubelet/pki/kubelet-client-crt.pem`,
      nodeState: `${root}/run/state/constellation/node_state.json`,
    },
    logger: options.logger,
    timers: options.timers,
  };
  return os;
}

/** Every regular file under `dir`, relative, sorted. */
export async function listFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (at: string, prefix: string) => {
    let entries: Deno.DirEntry[];
    try {
      entries = await Array.fromAsync(Deno.readDir(at));
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return;
      throw error;
    }
    for (const entry of entries) {
      if (entry.isDirectory) await walk(`${at}/${entry.name}`, `${prefix}${entry.name}/`);
      else out.push(`${prefix}${entry.name}`);
    }
  };
  await walk(dir, "");
  return out.sort();
}
