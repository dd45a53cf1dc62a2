/**
 * The bootstrapper's init server (`init.API`): the first node's half of the
 * init exchange (docs/attested-exchange.md §7) and the init itself
 * (reference §4.4 with the fixes of DESIGN.md §4).
 *
 * {@linkcode InitServer.getAttestation}: a fresh HPKE key pair per client
 * nonce, evidence over the "init-attestation" report data; the key pair is
 * held for `DEFAULT_ATTESTATION_KEY_LIFETIME_MS`, for one use, in a
 * bounded map. {@linkcode InitServer.showAttestation} is the same evidence
 * for the browser listener, whose key pair is not held (no Init can follow
 * it), a few at a time.
 *
 * {@linkcode InitServer.init}, in order:
 *
 *  1. the exchange: the request is sealed, its nonce names a held key pair
 *     (taken: one use), it opens with it. Failures are plain statuses (no
 *     logs: the caller proved nothing yet);
 *  2. the init secret, bcrypt-compared with the metadata's hash. Wrong: a
 *     refusal (no logs), no lock, the server keeps serving;
 *  3. this node's state: one Init at a time; after a join took the lock,
 *     after a success, or after a failure past the lock, every Init is
 *     refused naming why;
 *  4. the parameters: storage and KMS URIs (only `cluster-kms`; the URI
 *     holds the master secret and is never echoed), a 32-byte measurement
 *     salt, the attestation config (same variant as this node), the
 *     components, a usable client key; then this node's name and addresses
 *     ({@linkcode ClusterInitializer.describeNode}): a metadata API that
 *     does not answer, or a name Kubernetes cannot take, is refused here,
 *     while the node can still be initialized;
 *  5. measurement secret and cluster ID;
 *  6. the node lock (`false`: a join took it). From here on the work runs
 *     to its end even if the client goes away, and any failure is terminal
 *     for this boot;
 *  7. `onLocked()` (stops the join client), called by the lock the moment
 *     it is taken, before marking: so also when marking fails (which ends
 *     the Init and this boot), and before a join ticket that arrives
 *     meanwhile hears that it lost;
 *  8. the state disk's passphrase becomes the derived disk key;
 *  9. {@linkcode ClusterInitializer.initialize} → the admin kubeconfig;
 * 10. the node state file (ControlPlane, the salt), once the cluster is
 *     initialized (removed again if the Init still fails);
 * 11. `InitSuccessResponse` sealed to the client's key.
 *
 * Steps 8-11 have a deadline ({@linkcode DEFAULT_INIT_TIMEOUT_MS}).
 *
 * A failure from step 3 on is streamed as `init_failure` with the error,
 * then the node's logs in chunks, on every failed attempt; then the call
 * ends with the error's status. No secret ever reaches a message or a log
 * line.
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { create } from "@bufbuild/protobuf";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import bcrypt from "bcryptjs";
import type { Issuer } from "../attestation/attestation.ts";
import { parseAttestationConfig } from "../attestation/config.ts";
import type { SaltRecord } from "./state_disk.ts";
import {
  AttestedKeys,
  checkNonce,
  type NodeExchangeReason,
  type OpenedRequest,
  rejectExchange,
} from "./attested_keys.ts";
import type { Clock } from "../clock.ts";
import type { Sealed } from "../gen/atls/v1/atls_pb.ts";
import {
  API,
  type GetAttestationRequest,
  type GetAttestationResponse,
  type InitRequest,
  InitRequestSchema,
  type InitResponse,
  InitResponseSchema,
} from "../gen/init/init_pb.ts";
import { INIT_PURPOSE, MEASUREMENT_SALT_LENGTH, sealInitSuccess } from "../init/protocol.ts";
import { encodeComponents, type KubernetesComponent, parseComponents } from "../joinservice/components.ts";
import { ClusterKms } from "../kms/cluster_kms.ts";
import { deriveClusterId, deriveMeasurementSecret, deriveStateDiskKey } from "../kms/keys.ts";
import { requestKms } from "../kms/request.ts";
import { type CheckedInitParameter, initParameterProblem } from "../init/parameters.ts";
import type { MasterSecret } from "../kms/uri.ts";
import { PoolFullError, WorkPool } from "../limits/pool.ts";
import type { Logger } from "../log/logger.ts";
import { ReasonError } from "../reason_error.ts";
import {
  asRejection,
  COMMON_REASON_CODES,
  type CommonReason,
  Rejection,
  toConnectError,
} from "../rpc/rejection.ts";
import {
  AFTER_DEADLINE_SETTLE_MS,
  DeadlineError,
  settledWithin,
  systemTimers,
  type Timers,
  withDeadline,
} from "./retry.ts";

/** The Init request's field of each parameter that {@linkcode initParameterProblem} checks. */
const INIT_REQUEST_FIELDS: Record<CheckedInitParameter, string> = {
  kubernetesVersion: "kubernetes_version",
  clusterName: "cluster_name",
  serviceCidr: "service_cidr",
  apiServerCertSans: "apiserver_cert_sans",
};

/** Options of every call that can wait. */
export interface SignalOptions {
  /** Aborts the call. */
  signal?: AbortSignal;
}

/** The bcrypt hash of the cluster's init secret (the metadata API's `/initsecrethash`). */
export interface InitSecretHash {
  /** The hash, e.g. `$2a$10$…`. */
  initSecretHash(options?: SignalOptions): Promise<string>;
}

/** Why an Init is refused on a node a join has locked. */
const JOIN_TOOK_THE_LOCK =
  "node is already being activated: it is joining an existing cluster (a join took the node lock)";

/** The node lock (helper O's `NodeLock`). */
export interface InitNodeLock {
  /**
   * True for exactly one caller ever (it marked PCR 15 with `clusterId`); false for every other.
   * `onTaken` is called synchronously when this caller takes the lock, before marking.
   */
  tryLock(clusterId: Uint8Array, options?: SignalOptions & { onTaken?: () => void }): Promise<boolean>;
  /** "none" until some caller took the lock, "taken" from then on. */
  readonly holder: "none" | "taken";
}

/** The state disk (helper O's `LuksStateDisk`). */
export interface StateDisk {
  /** The LUKS UUID. */
  uuid(options?: SignalOptions): Promise<string>;
  /**
   * Replaces the initial passphrase with `newKey` (raw bytes) and marks the disk initialized,
   * recording the cluster's measurement salt and its tag (which a recovery reads while the disk is closed).
   */
  changePassphrase(
    newKey: Uint8Array,
    record: SaltRecord,
    options?: SignalOptions,
  ): Promise<void>;
}

/** What the node state file holds (reference §8.4). */
export interface InitNodeState {
  /** Always "ControlPlane" for the first node. */
  role: "ControlPlane" | "Worker";
  /** The cluster's measurement salt. */
  measurementSalt: Uint8Array;
}

/** Writes the node state file (helper O's `writeNodeState(paths.nodeState, state)`). */
export interface NodeStateWriter {
  /** Writes `state` atomically. */
  write(state: InitNodeState, options?: SignalOptions): Promise<void>;
  /** Removes it (after a failure past the lock: a bound node without one is not set up); absent is fine. */
  remove(): Promise<void>;
}

/** What the cluster is initialized with (the opened request, checked). */
export interface ClusterInitParameters {
  /** Kubernetes version, e.g. "v1.30.2". */
  kubernetesVersion: string;
  /** Cluster name; "constellation" when the request left it empty. */
  clusterName: string;
  /** Extra API server certificate SANs. */
  apiServerCertSans: string[];
  /** Service CIDR; "" for kubeadm's default. */
  serviceCidr: string;
  /** Keep kube-proxy (conformance mode). */
  conformanceMode: boolean;
  /** Binaries to install before kubeadm runs. */
  components: KubernetesComponent[];
  /** The Helm releases JSON as sent (unused by this port; passed on). */
  helmDeployments: Uint8Array;
  /** The cluster's master secret and salt (for Secret `constellation-mastersecret`). */
  masterSecret: MasterSecret;
  /** The cluster's measurement salt (for ConfigMap `join-config`). */
  measurementSalt: Uint8Array;
  /** The attestation config JSON (for ConfigMap `join-config`), checked to parse for this node's variant. */
  attestationConfig: string;
  /** The cluster ID. */
  clusterId: Uint8Array;
  /** This node, as {@linkcode ClusterInitializer.describeNode} found it before the lock. */
  node: InitNode;
}

/** This node as kubeadm init names and reaches it (from the metadata API). */
export interface InitNode {
  /** The Kubernetes node name (the instance name made a compliant host name). */
  nodeName: string;
  /** The node's VPC IP. */
  nodeIp: string;
  /** The API server endpoint kubeadm puts in the kubeconfigs ("host" or "host:port"), if the platform has one. */
  controlPlaneHost?: string;
}

/** Why {@linkcode ClusterInitializer.describeNode} failed: the metadata API, or the name it gave. */
export class InitNodeError extends ReasonError<"metadata" | "node-name"> {}

/** Runs `kubeadm init` and creates the objects the cluster's services read (cluster_init.ts). */
export interface ClusterInitializer {
  /**
   * Reads this node's name and addresses, before the node lock: a metadata API that does not answer, or
   * a name Kubernetes cannot take, then refuses the Init while the node can still be initialized.
   * Rejects with an {@linkcode InitNodeError}.
   */
  describeNode(options?: SignalOptions): Promise<InitNode>;
  /**
   * Throws when `components` could not be installed on this node (a path under its root longer than Linux
   * allows): checked before the lock, as the join client checks a ticket's.
   */
  checkComponents(components: readonly KubernetesComponent[]): void;
  /** Initializes the cluster; resolves with the admin kubeconfig kubeadm wrote. */
  initialize(params: ClusterInitParameters, options?: SignalOptions): Promise<{ kubeconfig: Uint8Array }>;
}

/** The node's logs (helper O's `JournalLogs`): bounded, secret-free. */
export interface LogSource {
  /** The recent logs. */
  collect(options?: SignalOptions): Promise<Uint8Array>;
}

/** Everything {@linkcode InitServer} uses. */
export interface InitServerDependencies {
  /** Produces this node's evidence. */
  issuer: Issuer;
  /** The init secret's bcrypt hash. */
  initSecretHash: InitSecretHash;
  /** The node lock shared with the join client. */
  lock: InitNodeLock;
  /** Called once, when this server takes the lock, before marking (so also if marking fails): stops the join client. */
  onLocked(): void;
  /** The state disk. */
  disk: StateDisk;
  /** The node state file. */
  nodeState: NodeStateWriter;
  /** kubeadm and the cluster's objects. */
  cluster: ClusterInitializer;
  /** Logs streamed after a failure. */
  logs: LogSource;
  /** Time, for attestation key expiry. */
  clock: Clock;
  /** The deadline of the work past the lock; default real time. */
  timers?: Timers;
  /** Where the server logs (never a secret). */
  logger: Logger;
}

/** Size of one streamed log chunk. */
export const DEFAULT_LOG_CHUNK_BYTES = 64 * 1024;
/** Browser-listener attestations running at once ({@linkcode InitServer.showAttestation}). */
export const SHOW_ATTESTATION_CONCURRENCY = 1;
/** Browser-listener attestations waiting at most; more are refused as busy. */
export const SHOW_ATTESTATION_QUEUE = 4;
/** Cluster name when the request leaves it empty. */
export const DEFAULT_CLUSTER_NAME = "constellation";
/**
 * How long the work past the lock may take: then it fails, terminally. Less than the CLI's default
 * --init-timeout (30 min), so the CLI receives the failure and the node's logs.
 */
export const DEFAULT_INIT_TIMEOUT_MS = 25 * 60_000;
/**
 * How long the init server lets one call run (its RPC layer's request
 * timeout): the Init's work past the lock ({@linkcode DEFAULT_INIT_TIMEOUT_MS}),
 * the steps before it, and the answer (the kubeconfig, or the failure with the
 * node's logs). The RPC layer's default, 30 s, would cut off every real
 * `kubeadm init`: the cluster would come up, and its kubeconfig never reach the
 * operator. Still less than the CLI's default --init-timeout (30 min).
 */
export const INIT_CALL_TIMEOUT_MS: number = DEFAULT_INIT_TIMEOUT_MS + 2 * 60_000;

/** Options for {@linkcode InitServer}. */
export interface InitServerOptions {
  /** Default `DEFAULT_ATTESTATION_KEY_LIFETIME_MS` (attested_keys.ts). */
  attestationKeyLifetimeMs?: number;
  /** Default `DEFAULT_MAX_ATTESTATION_KEYS` (attested_keys.ts). */
  maxAttestationKeys?: number;
  /** Default {@linkcode DEFAULT_LOG_CHUNK_BYTES}. */
  logChunkBytes?: number;
  /** Default {@linkcode DEFAULT_INIT_TIMEOUT_MS}. */
  initTimeoutMs?: number;
}

/** The init server's own refusal reasons. */
export type InitServerReason =
  | "attestation-busy" // too many browser-listener attestations waiting; retry later
  | "invalid-init-secret" // the init secret does not match the metadata's hash
  | "init-secret-hash-unavailable" // the metadata's hash could not be read
  | "invalid-parameters" // a URI, the salt, the attestation config, the components, the client key
  | "node-metadata-unavailable" // this node's name or address could not be read from the metadata API
  | "invalid-node-name" // the metadata API names this node with a name Kubernetes cannot take
  | "init-running" // another Init is running on this node
  | "shutting-down" // the bootstrapper is stopping: no Init takes the lock any more
  | "already-activated" // a join took the node lock
  | "already-initialized" // an earlier Init succeeded
  | "failed-after-lock" // an earlier Init failed past the lock: terminal for this boot
  | "lock-failed" // taking the lock failed (PCR 15 marking)
  | "disk-failed" // changing the state disk's passphrase failed
  | "node-state-failed" // writing the node state file failed
  | "cluster-init-failed" // kubeadm or the cluster objects failed
  | "seal-failed"; // sealing the success message failed

/** Every reason an init-server rejection carries. */
export type InitReason = InitServerReason | NodeExchangeReason | CommonReason;

const codes: Record<InitServerReason | CommonReason, Code> = {
  "attestation-busy": Code.ResourceExhausted,
  "invalid-init-secret": Code.PermissionDenied,
  "init-secret-hash-unavailable": Code.Unavailable,
  "invalid-parameters": Code.InvalidArgument,
  "node-metadata-unavailable": Code.Unavailable,
  "invalid-node-name": Code.FailedPrecondition,
  "init-running": Code.FailedPrecondition,
  "shutting-down": Code.Unavailable,
  "already-activated": Code.FailedPrecondition,
  "already-initialized": Code.FailedPrecondition,
  "failed-after-lock": Code.FailedPrecondition,
  "lock-failed": Code.Internal,
  "disk-failed": Code.Internal,
  "node-state-failed": Code.Internal,
  "cluster-init-failed": Code.Internal,
  "seal-failed": Code.Internal,
  ...COMMON_REASON_CODES,
};

/** A rejection of the init server for `reason`, with its code; `message` is what the client reads. */
export function rejectInit(reason: InitReason, message: string, options?: { cause?: unknown }): Rejection {
  if (!Object.hasOwn(codes, reason)) return rejectExchange(reason as NodeExchangeReason, message, options);
  return new Rejection(reason, codes[reason as InitServerReason | CommonReason], message, options);
}

/** Reasons whose refusal is not followed by the node's logs: the caller has not proven the init secret. */
const NO_LOGS: ReadonlySet<string> = new Set<InitReason>([
  "invalid-init-secret",
  "init-secret-hash-unavailable",
]);

/** Where this node stands. */
export type InitPhase =
  | "idle" // accepting Init
  | "running" // an Init is between its checks and its end
  | "initialized" // an Init succeeded
  | "failed" // an Init failed after the lock: terminal for this boot
  | "taken"; // a join took the lock

/** How the Init that took the lock ended. */
export type InitOutcome =
  | { ok: true; clusterId: Uint8Array }
  | { ok: false; error: string };

/** The `init.API` handler. */
export class InitServer {
  readonly #deps: InitServerDependencies;
  readonly #keys: AttestedKeys;
  readonly #logChunkBytes: number;
  readonly #lifetime = new AbortController();
  readonly #initTimeoutMs: number;
  /** Bounds the browser listener's attestations. */
  readonly #shows = new WorkPool({
    concurrency: SHOW_ATTESTATION_CONCURRENCY,
    maxQueued: SHOW_ATTESTATION_QUEUE,
  });
  readonly #outcome = Promise.withResolvers<InitOutcome>();
  /** How the Init past the lock ended, until its answer is sent and {@linkcode outcome} settles. */
  #settled: InitOutcome | undefined;
  #phase: InitPhase = "idle";
  /** Set once the server began stopping ({@linkcode InitServer.stopAccepting}). */
  #stopping = false;
  /** Why the phase is terminal ("failed"), for later refusals. */
  #failure = "";
  #hash: string | undefined;

  /** A handler over `deps`. */
  constructor(deps: InitServerDependencies, options: InitServerOptions = {}) {
    this.#deps = deps;
    this.#keys = new AttestedKeys(deps, INIT_PURPOSE, {
      lifetimeMs: options.attestationKeyLifetimeMs,
      max: options.maxAttestationKeys,
    });
    this.#logChunkBytes = options.logChunkBytes ?? DEFAULT_LOG_CHUNK_BYTES;
    if (!(this.#logChunkBytes > 0)) throw new RangeError("logChunkBytes must be positive");
    this.#initTimeoutMs = options.initTimeoutMs ?? DEFAULT_INIT_TIMEOUT_MS;
  }

  /** Where this node stands. */
  get phase(): InitPhase {
    return this.#phase;
  }

  /**
   * Settles once an Init that took the lock has ended: success (the lead
   * stops the server and exits 0) or a terminal failure (exit non-zero).
   * Never settles when a join took the lock instead.
   */
  get outcome(): Promise<InitOutcome> {
    return this.#outcome.promise;
  }

  /**
   * Refuses every Init not yet past the lock from now on (`shutting-down`):
   * the server is stopping, and an Init that took the lock now would be cut
   * short, leaving a node bound but not set up. Idempotent.
   */
  stopAccepting(): void {
    this.#stopping = true;
  }

  /** Aborts work past the lock (the server is stopping). Idempotent. */
  close(): void {
    this.#lifetime.abort(new DOMException("init server stopped", "AbortError"));
  }

  /** The `init.API` implementation, for a Connect router. */
  handlers(): ServiceImpl<typeof API> {
    return {
      getAttestation: async (request, context) => {
        try {
          return await this.getAttestation(request, { signal: context.signal });
        } catch (error) {
          throw toConnectError(asRejection(error));
        }
      },
      init: (request, context) => connectErrors(this.init(request, { signal: context.signal })),
    };
  }

  /** A fresh key pair and evidence binding it to the client's 32-byte nonce; the key is held for one Init. */
  getAttestation(
    request: GetAttestationRequest,
    options: SignalOptions = {},
  ): Promise<GetAttestationResponse> {
    return this.#keys.attest(request, options);
  }

  /**
   * The browser listener's `GetAttestation`: the same evidence as
   * {@linkcode InitServer.getAttestation}, bound to a fresh key pair that is
   * forgotten at once, so no Init can follow it and it holds nothing on the
   * node. At most {@linkcode SHOW_ATTESTATION_CONCURRENCY} run at once and a
   * few wait (the TPM quotes one at a time); more are refused as busy.
   */
  async showAttestation(
    request: GetAttestationRequest,
    options: SignalOptions = {},
  ): Promise<GetAttestationResponse> {
    checkNonce(request);
    try {
      return await this.#shows.run(() => this.#keys.show(request, options), options);
    } catch (error) {
      if (error instanceof PoolFullError) {
        throw rejectInit("attestation-busy", "this node is busy producing attestation evidence; retry later");
      }
      throw error;
    }
  }

  /** `GetAttestation` alone, as the browser listener serves it ({@linkcode InitServer.showAttestation}). */
  browserHandlers(): Pick<ServiceImpl<typeof API>, "getAttestation"> {
    return {
      getAttestation: async (request, context) => {
        try {
          return await this.showAttestation(request, { signal: context.signal });
        } catch (error) {
          throw toConnectError(asRejection(error));
        }
      },
    };
  }

  /**
   * Runs an Init: yields `init_success` (sealed), or `init_failure` and the
   * node's logs and then throws the {@linkcode Rejection}. Exchange failures
   * throw without yielding.
   */
  async *init(request: InitRequest, options: SignalOptions = {}): AsyncGenerator<InitResponse> {
    const opened = await this.#keys.open(InitRequestSchema, request);
    const { logger } = this.#deps;
    logger.info("Init called");
    // The outcome of an Init past the lock is announced only once its answer has been handed to the
    // stream (a generator resumes after its consumer took the last message), or the client went away:
    // whoever stops the server on it must not cut the answer off.
    try {
      let sealed;
      try {
        sealed = await this.#initialize(opened, options);
      } catch (error) {
        const rejection = asRejection(error);
        logger.error("Init failed", {
          reason: rejection.reason,
          error: rejection.message,
          cause: rejection.cause,
        });
        yield create(InitResponseSchema, {
          kind: { case: "initFailure", value: { error: rejection.message } },
        });
        if (!NO_LOGS.has(rejection.reason)) yield* this.#logChunks(options);
        throw rejection;
      }
      logger.info("Init succeeded");
      yield create(InitResponseSchema, { kind: { case: "initSuccess", value: { sealed } } });
    } finally {
      if (this.#settled) this.#outcome.resolve(this.#settled);
    }
  }

  /** Steps 2-11; resolves with the sealed success. */
  async #initialize(opened: OpenedRequest<typeof InitRequestSchema>, options: SignalOptions) {
    const { request } = opened;
    await this.#checkInitSecret(request.initSecret, options);
    this.#enter();
    let locked = false;
    let work: Promise<Sealed> | undefined;
    const timers = this.#deps.timers ?? systemTimers;
    try {
      const checked = await this.#checkParameters(opened);
      const node = await this.#describeNode(options);
      const kms = new ClusterKms(checked.masterSecret.key, checked.masterSecret.salt);
      const measurementSecret = await deriveMeasurementSecret(kms);
      const clusterId = await deriveClusterId(measurementSecret, checked.measurementSalt);
      measurementSecret.fill(0);

      locked = await this.#lock(clusterId);
      // Past the lock the work is the node's, not the caller's: it runs to its end, or its deadline (a
      // component server that never answers must not hold the node forever).
      const sealed = await withDeadline(
        timers,
        "initializing the node",
        this.#initTimeoutMs,
        this.#lifetime.signal,
        (signal) => work = this.#afterLock(opened, { ...checked, clusterId, node }, kms, signal),
      ).catch((error) => {
        throw error instanceof DeadlineError
          ? rejectInit("deadline", error.message, { cause: error })
          : error;
      });
      this.#phase = "initialized";
      this.#settled = { ok: true, clusterId };
      return sealed;
    } catch (error) {
      if (locked || this.#phase === "failed") {
        // After the deadline a step may still be finishing: its node state must not land after the removal.
        if (work) await settledWithin(work, timers, AFTER_DEADLINE_SETTLE_MS);
        await this.#deps.nodeState.remove().catch((removeError) =>
          this.#deps.logger.warn("removing the node state failed", { error: removeError })
        );
        const rejection = asRejection(error);
        this.#phase = "failed";
        this.#failure = rejection.message;
        this.#settled = { ok: false, error: rejection.message };
      } else if (this.#phase === "running") {
        this.#phase = "idle";
      }
      throw error;
    }
  }

  /** Steps 8-11, under the deadline's `signal`; resolves with the sealed success. */
  async #afterLock(
    opened: OpenedRequest<typeof InitRequestSchema>,
    params: ClusterInitParameters,
    kms: ClusterKms,
    signal: AbortSignal,
  ): Promise<Sealed> {
    const { request } = opened;
    const deps = this.#deps;

    await step("disk-failed", "setting up disk", async () => {
      const uuid = await deps.disk.uuid({ signal });
      const diskKey = await deriveStateDiskKey(kms, uuid);
      const measurementSecret = await deriveMeasurementSecret(kms);
      try {
        const record = { measurementSalt: params.measurementSalt, measurementSecret };
        await deps.disk.changePassphrase(diskKey, record, { signal });
      } finally {
        diskKey.fill(0);
        measurementSecret.fill(0);
      }
    });
    deps.logger.info("state disk set up");
    const { kubeconfig } = await step(
      "cluster-init-failed",
      "initializing cluster",
      () => deps.cluster.initialize(params, { signal }),
    );
    // After kubeadm: on a bound node the node state says its init completed (run.ts starts only such a
    // node's kubelet), also when the process died in between.
    await step(
      "node-state-failed",
      "persisting node state",
      () =>
        deps.nodeState.write({ role: "ControlPlane", measurementSalt: params.measurementSalt }, {
          signal,
        }),
    );
    const sealed = await step(
      "seal-failed",
      "sealing the result",
      () =>
        sealInitSuccess(
          { kubeconfig, clusterId: params.clusterId },
          request.clientPublicKey,
          opened.reportData,
        ),
    );
    return sealed;
  }

  /** Step 2: bcrypt against the metadata's hash (fetched once successfully, then kept). */
  async #checkInitSecret(secret: Uint8Array, options: SignalOptions): Promise<void> {
    if (this.#hash === undefined) {
      let hash: string;
      try {
        hash = await this.#deps.initSecretHash.initSecretHash(options);
      } catch (error) {
        throw rejectInit(
          "init-secret-hash-unavailable",
          "the init secret hash is unavailable from the metadata API",
          {
            cause: error,
          },
        );
      }
      if (hash === "") {
        throw rejectInit("init-secret-hash-unavailable", "the metadata API's init secret hash is empty");
      }
      this.#hash = hash;
    }
    let password: string;
    try {
      password = new TextDecoder("utf-8", { fatal: true }).decode(secret);
    } catch {
      throw rejectInit("invalid-init-secret", "invalid init secret");
    }
    let matches: boolean;
    try {
      matches = secret.length > 0 && await bcrypt.compare(password, this.#hash);
    } catch (error) {
      throw rejectInit(
        "init-secret-hash-unavailable",
        "the metadata API's init secret hash is not a bcrypt hash",
        {
          cause: error,
        },
      );
    }
    if (!matches) throw rejectInit("invalid-init-secret", "invalid init secret");
  }

  /** Step 3: one Init at a time, and none after the lock went elsewhere or an Init ran past it. */
  #enter(): void {
    switch (this.#phase) {
      case "idle":
        this.#phase = "running";
        return;
      case "running":
        throw rejectInit("init-running", "an Init is already running on this node");
      case "initialized":
        throw rejectInit("already-initialized", "this node is already initialized");
      case "taken":
        throw rejectInit("already-activated", JOIN_TOOK_THE_LOCK);
      case "failed":
        throw rejectInit(
          "failed-after-lock",
          `an earlier Init failed after this node was locked (${this.#failure}); wipe the node and retry`,
        );
    }
  }

  /** Step 4, last: this node's name and addresses, read before the lock. */
  async #describeNode(options: SignalOptions): Promise<InitNode> {
    try {
      return await this.#deps.cluster.describeNode(options);
    } catch (error) {
      const reason = error instanceof InitNodeError && error.reason === "node-name"
        ? "invalid-node-name"
        : "node-metadata-unavailable";
      throw rejectInit(reason, (error as Error).message, { cause: error });
    }
  }

  /** Step 4: everything checkable before the lock. */
  async #checkParameters(
    opened: OpenedRequest<typeof InitRequestSchema>,
  ): Promise<Omit<ClusterInitParameters, "clusterId" | "node">> {
    const { request } = opened;
    const invalid = (message: string, cause?: unknown) =>
      rejectInit("invalid-parameters", message, { cause });
    let masterSecret: MasterSecret;
    try {
      masterSecret = requestKms(request).masterSecret;
    } catch (error) {
      // KmsError messages name parameters, never values: the URI holds the master secret.
      throw invalid((error as Error).message, error);
    }
    if (request.measurementSalt.length !== MEASUREMENT_SALT_LENGTH) {
      throw invalid(
        `measurement_salt must be ${MEASUREMENT_SALT_LENGTH} bytes, got ${request.measurementSalt.length}`,
      );
    }
    try {
      parseAttestationConfig(request.attestationConfig, {
        variant: this.#deps.issuer.variant,
        source: "attestation_config",
      });
    } catch (error) {
      throw invalid((error as Error).message, error);
    }
    const problem = initParameterProblem(
      {
        kubernetesVersion: request.kubernetesVersion,
        clusterName: request.clusterName || DEFAULT_CLUSTER_NAME,
        serviceCidr: request.serviceCidr,
        apiServerCertSans: request.apiserverCertSans,
      },
      (parameter) => INIT_REQUEST_FIELDS[parameter],
    );
    if (problem !== undefined) throw invalid(problem);
    let components: KubernetesComponent[];
    try {
      components = parseComponents(encodeComponents(request.kubernetesComponents));
      this.#deps.cluster.checkComponents(components);
    } catch (error) {
      throw invalid(`kubernetes_components: ${errorMessage(error)}`, error);
    }
    // The result is sealed to this key after kubeadm ran: make sure now that it can be.
    try {
      await sealInitSuccess(
        { kubeconfig: new Uint8Array(0), clusterId: new Uint8Array(0) },
        request.clientPublicKey,
        opened.reportData,
      );
    } catch (error) {
      throw invalid("client_public_key is not a usable X25519 public key", error);
    }
    return {
      kubernetesVersion: request.kubernetesVersion,
      clusterName: request.clusterName || DEFAULT_CLUSTER_NAME,
      apiServerCertSans: [...request.apiserverCertSans],
      serviceCidr: request.serviceCidr,
      conformanceMode: request.conformanceMode,
      components,
      helmDeployments: request.helmDeployments,
      masterSecret,
      measurementSalt: request.measurementSalt,
      attestationConfig: request.attestationConfig,
    };
  }

  /**
   * Step 6: the lock; true when taken. A failure to mark still counts as
   * taken (no way back): the join client is stopped either way, and the
   * process ends with the failure instead of waiting for a join that can no
   * longer happen.
   */
  async #lock(clusterId: Uint8Array): Promise<boolean> {
    if (this.#stopping) {
      // The server also stops when a join took the lock: an Init then learns that the node is joining.
      if (this.#deps.lock.holder === "taken") this.#refuseTakenByJoin();
      throw rejectInit("shutting-down", "the node's bootstrapper is stopping; retry once it is back");
    }
    let won: boolean;
    try {
      won = await this.#deps.lock.tryLock(clusterId, {
        signal: this.#lifetime.signal,
        onTaken: () => this.#stopJoinClient(),
      });
    } catch (error) {
      this.#deps.logger.error("locking the node failed", { error });
      // The lock is taken even though marking failed (the join client was stopped when it was taken): terminal.
      this.#phase = "failed";
      throw rejectInit("lock-failed", `locking node: ${(error as Error).message}`, { cause: error });
    }
    if (!won) this.#refuseTakenByJoin();
    this.#deps.logger.info("node locked to the cluster");
    return true;
  }

  /** Refuses the Init that found the lock taken by a join; no Init can run on this node from now on. */
  #refuseTakenByJoin(): never {
    this.#phase = "taken";
    this.#deps.logger.warn("Init refused: a join took the node lock");
    throw rejectInit("already-activated", JOIN_TOOK_THE_LOCK);
  }

  /** Tells the bootstrapper this side took the node lock. */
  #stopJoinClient(): void {
    try {
      this.#deps.onLocked();
    } catch (error) {
      this.#deps.logger.warn("stopping the join client failed", { error });
    }
  }

  /** The node's logs as `log` messages of at most the chunk size; a collection failure is one last chunk. */
  async *#logChunks(options: SignalOptions): AsyncGenerator<InitResponse> {
    let logs: Uint8Array;
    try {
      logs = await this.#deps.logs.collect(options);
    } catch (error) {
      this.#deps.logger.warn("collecting logs failed", { error });
      logs = new TextEncoder().encode(`(the node's logs are unavailable: ${(error as Error).message})\n`);
    }
    for (let offset = 0; offset < logs.length; offset += this.#logChunkBytes) {
      const log = logs.subarray(offset, offset + this.#logChunkBytes);
      yield create(InitResponseSchema, { kind: { case: "log", value: { log } } });
    }
  }
}

/** Runs a step past the lock; its failure is a rejection for `reason` whose message starts with `what`. */
async function step<T>(reason: InitServerReason, what: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    const detail = errorMessage(error);
    throw rejectInit(reason, `${what}: ${detail}`, { cause: error });
  }
}

/** Passes a stream through, turning a thrown rejection into the ConnectError a handler returns. */
async function* connectErrors<T>(stream: AsyncGenerator<T>): AsyncGenerator<T> {
  try {
    yield* stream;
  } catch (error) {
    throw toConnectError(asRejection(error));
  }
}
