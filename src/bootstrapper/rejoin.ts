/**
 * Rejoin after a reboot (reference §5.6; the original did this in the
 * initramfs disk-mapper): a node whose state disk is already initialized
 * asks a join service for a rejoin ticket for its disk UUID (attested,
 * `IssueRejoinTicket`), checks that the returned disk key opens the disk,
 * writes it to the key file the image's systemd-cryptsetup maps the state
 * disk with (`/run/cryptsetup-keys.d/state.key`, as the original's
 * disk-mapper), and re-binds PCR 15 to the cluster ID derived from the
 * ticket's measurement secret and salt. Afterwards the normal start path
 * sees PCR 15 set and only starts the kubelet. The lead wires it as
 * `bootstrapper rejoin`.
 *
 * Nothing inside the state disk is read: it is still closed (the original
 * mapped and mounted it to read the salt from the node state; here the
 * join service sends the salt with the ticket). Its LUKS2 token (in the
 * unencrypted header) is: when it does not yet record the cluster's salt
 * and tag, the rejoin records them, so that the node can be recovered.
 *
 * On a control-plane node the operator's recovery runs beside the join
 * services (the original's recovery server, `recoveryserver.ts`): when no
 * other control plane runs, `cli recover` sends the master secret, the node
 * derives the same keys itself, and whichever source delivers first is
 * used; the recovery is told how the rebinding ended. A recovery server
 * that cannot start is logged, and the join services are still asked.
 *
 * Retries as the join client does (every 30 s, 30 s per call, this node's
 * own address excluded from the endpoints): an unreachable or refusing join
 * service, a disk key that does not open the disk (a join service of
 * another cluster, see docs/attested-exchange.md §9 "Verifier
 * authenticity") and a ticket without a usable salt are logged and
 * retried. Terminal: the key file not written, and a failed or lost node
 * lock.
 *
 * @module
 */
import type { IssueRejoinTicketResponse } from "../gen/join/join_pb.ts";
import { deriveClusterId } from "../kms/keys.ts";
import type { Logger } from "../log/logger.ts";
import type { RecoveredKeys } from "./recoveryserver.ts";
import { isRecordedSaltOf, type RecordedSalt, type SaltRecord } from "./state_disk.ts";
import { ReasonError } from "../reason_error.ts";
import type { NodeLockLike } from "./apply_ticket.ts";
import type { TicketCallOptions } from "./join_ticket_source.ts";
import {
  controlPlaneEndpoints,
  DEFAULT_CALL_TIMEOUT_MS,
  DEFAULT_RETRY_INTERVAL_MS,
  JOIN_SERVICE_NODE_PORT,
  type Metadata,
} from "./joinclient.ts";
import { errorFields, retryUntilDone, systemTimers, type Timers, withDeadline } from "./retry.ts";
import { MEASUREMENT_SALT_LENGTH } from "../init/protocol.ts";

/** Where rejoin tickets come from (satisfied by `AttestedTicketSource`). */
export interface RejoinTicketSource {
  /** Requests and opens a rejoin ticket for `diskUuid` from the join service at `endpoint`. */
  rejoinTicket(
    endpoint: string,
    diskUuid: string,
    options?: TicketCallOptions,
  ): Promise<Pick<IssueRejoinTicketResponse, "stateDiskKey" | "measurementSecret" | "measurementSalt">>;
}

/** The state disk (satisfied by `LuksStateDisk`). */
export interface RejoinDisk {
  /** Whether the disk was initialized by an earlier init or join. */
  isInitialized(options?: { signal?: AbortSignal }): Promise<boolean>;
  /** The LUKS UUID, lower-case. */
  uuid(options?: { signal?: AbortSignal }): Promise<string>;
  /** Whether `key` opens the disk. */
  testPassphrase(key: Uint8Array, options?: { signal?: AbortSignal }): Promise<boolean>;
  /** The salt and tag the disk's token recorded, if any. */
  measurementSalt(options?: { signal?: AbortSignal }): Promise<RecordedSalt | undefined>;
  /** Records the cluster's salt and its tag in the token (a disk from before tokens held them). */
  recordSalt(record: SaltRecord, options?: { signal?: AbortSignal }): Promise<void>;
}

/** The operator's recovery (satisfied by the recovery server, started on first use). */
export interface Recovery {
  /**
   * Resolves with the first keys an operator's recovery delivers (their
   * disk key opens this node's disk); rejects when `signal` aborts or the
   * recovery cannot be offered (its server does not start).
   */
  accept(options: { signal: AbortSignal }): Promise<RecoveredKeys>;
}

/** The file the image's systemd-cryptsetup reads the state disk's key from. */
export interface DiskKeyFile {
  /** Writes `key` (a secret) atomically, readable by its owner only. */
  write(key: Uint8Array): Promise<void>;
}

/** What a rejoin needs. */
export interface RejoinDependencies {
  /** The state disk. */
  disk: RejoinDisk;
  /** This node's and its peers' metadata. */
  metadata: Metadata;
  /** Requests tickets from join services. */
  tickets: RejoinTicketSource;
  /** Where the disk key goes once it is known to open the disk. */
  diskKeyFile: DiskKeyFile;
  /** The node lock; taking it extends PCR 15 with the cluster ID. */
  lock: NodeLockLike;
  /** The operator's recovery, offered on control-plane nodes; none when absent. */
  recovery?: Recovery;
  /** Structured log; never receives a secret. */
  logger: Logger;
  /** Delays and deadlines; default real time. */
  timers?: Timers;
}

/** Intervals of a rejoin, as the join client's. */
export interface RejoinOptions {
  /** Pause after a failed round; default 30 s. */
  retryIntervalMs?: number;
  /** Deadline of each call; default 30 s. */
  callTimeoutMs?: number;
  /** Join service port; default 30090. */
  joinServicePort?: number;
  /** Stops the rejoin (resolves `stopped`). */
  signal?: AbortSignal;
}

/** How a rejoin ended. */
export type RejoinOutcome =
  /** The disk is not initialized: a fresh node, nothing to rejoin. */
  | { status: "not-initialized" }
  /** PCR 15 is bound again, and the disk key is in the key file; `source` is the join service or "recovery". */
  | { status: "rebound"; clusterId: Uint8Array; source: string }
  /** Aborted. */
  | { status: "stopped" };

/** Why a rejoin ended without binding the node. */
export class RejoinError
  extends ReasonError<"key-file" | "lock-held" | "lock-failed" | "wrong-disk-key" | "malformed-ticket"> {}

/**
 * Rejoins the node if its state disk is initialized. Resolves when PCR 15
 * is bound (or there was nothing to do, or `signal` aborted); rejects with
 * {@linkcode RejoinError} when the node cannot rejoin this boot.
 */
export async function rejoin(deps: RejoinDependencies, options: RejoinOptions = {}): Promise<RejoinOutcome> {
  const { signal } = options;
  const { logger, disk } = deps;
  const timers = deps.timers ?? systemTimers;
  const intervalMs = options.retryIntervalMs ?? DEFAULT_RETRY_INTERVAL_MS;
  const callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
  const port = options.joinServicePort ?? JOIN_SERVICE_NODE_PORT;
  const deadline = <T>(what: string, s: AbortSignal | undefined, call: (d: AbortSignal) => Promise<T>) =>
    withDeadline(timers, what, callTimeoutMs, s, call);
  const retry = <T>(what: string, attempt: (s: AbortSignal | undefined) => Promise<T>) =>
    retryUntilDone(what, attempt, { signal, timers, intervalMs, logger });

  try {
    const initialized = await retry(
      "reading the state disk token",
      (s) => deadline("reading the state disk token", s, (d) => disk.isInitialized({ signal: d })),
    );
    if (!initialized) {
      logger.info("state disk not initialized: nothing to rejoin");
      return { status: "not-initialized" };
    }
    const diskUuid = await retry(
      "reading the state disk UUID",
      (s) => deadline("reading the state disk UUID", s, (d) => disk.uuid({ signal: d })),
    );
    const self = await retry(
      "reading this node's metadata",
      (s) => deadline("metadata self", s, (d) => deps.metadata.self({ signal: d, timeoutMs: callTimeoutMs })),
    );
    logger.info("rejoining", { diskUuid });

    const round = async (s: AbortSignal | undefined) => {
      const peers = await deadline(
        "metadata peers",
        s,
        (d) => deps.metadata.peers({ signal: d, timeoutMs: callTimeoutMs }),
      );
      const endpoints = controlPlaneEndpoints(peers, { metadataName: self.name, vpcIp: self.vpcIp }, port);
      if (endpoints.length === 0) throw new Error("metadata lists no control-plane node with an address yet");
      for (const endpoint of endpoints) {
        try {
          const ticket = await deadline(
            "rejoin ticket request",
            s,
            (d) => deps.tickets.rejoinTicket(endpoint, diskUuid, { signal: d }),
          );
          // Before the disk key is tried: cryptsetup is the slow part of a round.
          if (ticket.measurementSalt.length !== MEASUREMENT_SALT_LENGTH) {
            // An empty salt: a join service older than this node's image.
            throw new RejoinError(
              "malformed-ticket",
              `the rejoin ticket's measurement salt has ${ticket.measurementSalt.length} bytes, want ${MEASUREMENT_SALT_LENGTH}`,
            );
          }
          const opens = await deadline(
            "testing the disk key",
            s,
            (d) => disk.testPassphrase(ticket.stateDiskKey, { signal: d }),
          );
          if (!opens) {
            throw new RejoinError(
              "wrong-disk-key",
              "the rejoin ticket's disk key does not open the state disk",
            );
          }
          return { ticket, endpoint };
        } catch (error) {
          s?.throwIfAborted();
          logger.warn("rejoin ticket refused, unreachable or unusable", { endpoint, ...errorFields(error) });
        }
      }
      throw new Error(`no join service issued a usable rejoin ticket (${endpoints.join(", ")})`);
    };
    const offered = self.role === "ControlPlane" ? deps.recovery : undefined;
    if (offered) logger.info("waiting for a join service, or the operator's recovery (cli recover)");
    const { keys, source, settle } = await firstKeys(
      (s) => retryUntilDone("rejoin round", round, { signal: s, timers, intervalMs, logger }),
      offered,
      { signal, logger },
    );
    try {
      const clusterId = await rebind(keys, deps);
      settle?.({ clusterId });
      logger.info("rejoined: PCR 15 bound to the cluster again", { clusterId: clusterId.toHex(), source });
      if (!settle) await recordSalt(keys, deps);
      return { status: "rebound", clusterId, source };
    } catch (error) {
      settle?.({ error: errorFields(error).error });
      throw error;
    } finally {
      keys.stateDiskKey.fill(0);
      keys.measurementSecret.fill(0);
    }
  } catch (error) {
    if (signal?.aborted && !(error instanceof RejoinError)) {
      logger.info("rejoin stopped");
      return { status: "stopped" };
    }
    if (!(error instanceof RejoinError)) throw error;
    logger.error("rejoin failed", errorFields(error));
    throw error;
  }
}

/** The keys a rebinding needs, from a rejoin ticket or a recovery. */
type RebindKeys = Pick<IssueRejoinTicketResponse, "stateDiskKey" | "measurementSecret" | "measurementSalt">;

/** Writes the disk's key file and binds PCR 15 to the cluster ID; resolves with it. */
async function rebind(keys: RebindKeys, deps: RejoinDependencies): Promise<Uint8Array> {
  try {
    await deps.diskKeyFile.write(keys.stateDiskKey);
  } catch (error) {
    throw new RejoinError("key-file", `writing the state disk's key file: ${errorFields(error).error}`, {
      cause: error,
    });
  }
  const clusterId = await deriveClusterId(keys.measurementSecret, keys.measurementSalt);
  let locked: boolean;
  try {
    locked = await deps.lock.tryLock(clusterId);
  } catch (error) {
    throw new RejoinError("lock-failed", `binding PCR 15: ${errorFields(error).error}`, { cause: error });
  }
  if (!locked) throw new RejoinError("lock-held", "the node lock is already taken");
  return clusterId;
}

/**
 * Records the ticket's salt and its tag in the disk's token unless it holds them already (a disk
 * initialized before tokens did), so that the node can be recovered later. Best effort: the node is
 * bound either way, and a failure is logged.
 */
async function recordSalt(keys: RebindKeys, deps: RejoinDependencies): Promise<void> {
  try {
    const recorded = await deps.disk.measurementSalt();
    if (recorded && await isRecordedSaltOf(recorded, keys.measurementSecret, keys.measurementSalt)) return;
    await deps.disk.recordSalt({
      measurementSalt: keys.measurementSalt,
      measurementSecret: keys.measurementSecret,
    });
    deps.logger.info(
      "recorded the measurement salt on the state disk: the node can be recovered from now on",
    );
  } catch (error) {
    deps.logger.warn("recording the measurement salt on the state disk failed", errorFields(error));
  }
}

/**
 * The first of the join services' rounds and the operator's recovery to
 * deliver keys; the other is stopped. Keys a recovery delivered too late
 * are turned away through their `settle`, so its caller gets an answer.
 */
async function firstKeys(
  fromJoinServices: (signal: AbortSignal) => Promise<{ ticket: RebindKeys; endpoint: string }>,
  recovery: Recovery | undefined,
  options: { signal?: AbortSignal; logger: Logger },
): Promise<{ keys: RebindKeys; source: string; settle?: RecoveredKeys["settle"] }> {
  const race = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, race.signal]) : race.signal;
  const joined = fromJoinServices(signal).then(({ ticket, endpoint }) => ({
    keys: ticket,
    source: endpoint,
  }));
  const recovered = recovery?.accept({ signal }).then(
    (keys) => ({ keys, source: "recovery", settle: keys.settle }),
    (error) => {
      if (!signal.aborted) {
        options.logger.warn("the operator's recovery is unavailable; only join services are asked", {
          ...errorFields(error),
        });
      }
      return new Promise<never>(() => {});
    },
  );
  let winner: { keys: RebindKeys; source: string; settle?: RecoveredKeys["settle"] } | undefined;
  try {
    winner = await Promise.race(recovered ? [joined, recovered] : [joined]);
    return winner;
  } finally {
    race.abort(new DOMException("another source delivered the keys", "AbortError"));
    joined.catch(() => {});
    if (winner?.source !== "recovery") {
      const outcome = winner ? { rejoinedMeanwhile: true as const } : { error: "the rejoin stopped" };
      recovered?.then((late) => {
        late.keys.stateDiskKey.fill(0);
        late.keys.measurementSecret.fill(0);
        late.settle(outcome);
      });
    }
  }
}
