/**
 * The recovery server (`recoverproto.API`, port {@linkcode RECOVERY_PORT}):
 * the original's way back for a control-plane node whose rejoin finds no
 * join service (the cluster's only control plane rebooted, or all of them
 * did). The operator's `cli recover` verifies the node's attestation and
 * sends the cluster's master secret, sealed to the node's attested key
 * (docs/attested-exchange.md §7.7); the node derives its disk key and cluster
 * ID itself and rebinds, exactly as a rejoin ticket would have let it.
 *
 * {@linkcode RecoveryServer.recover}, in order:
 *
 *  1. the exchange (`attested_keys.ts`): sealed, nonce held, opens;
 *  2. the node is waiting for a recovery (its rejoin runs and has not
 *     rebound), and no other recovery is under way;
 *  3. the parameters: `kms_uri` a cluster KMS, `storage_uri` no-store;
 *  4. the disk key `HKDF(master, salt, "key-" + uuid)` opens the state disk
 *     (else `wrong-master-secret`: another cluster's secret changes nothing);
 *  5. the measurement salt the disk's token recorded when it was initialized,
 *     with its tag under the measurement secret (the token is not
 *     encrypted: a salt changed there is refused);
 *  6. the keys go to the waiting rejoin ({@linkcode RecoveryServer.accept}),
 *     which writes the disk's key file and binds PCR 15, and says how that
 *     ended; the answer is the disk UUID and the cluster ID, sealed to the
 *     client's key.
 *
 * No secret reaches a message or a log line.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import type { Issuer } from "../attestation/attestation.ts";
import type { Clock } from "../clock.ts";
import type { GetAttestationRequest, GetAttestationResponse } from "../gen/init/init_pb.ts";
import {
  API,
  type RecoverRequest,
  RecoverRequestSchema,
  type RecoverResponse,
  RecoverResponseSchema,
} from "../gen/recoverproto/recover_pb.ts";
import { MEASUREMENT_SALT_LENGTH, RECOVER_PURPOSE, sealNodeResponse } from "../init/protocol.ts";
import { deriveMeasurementSecret, deriveStateDiskKey } from "../kms/keys.ts";
import { requestKms } from "../kms/request.ts";
import type { Logger } from "../log/logger.ts";
import {
  asRejection,
  COMMON_REASON_CODES,
  type CommonReason,
  Rejection,
  toConnectError,
} from "../rpc/rejection.ts";
import { isRecordedSaltOf, type RecordedSalt } from "./state_disk.ts";
import {
  AttestedKeys,
  type AttestedKeysOptions,
  type NodeExchangeReason,
  rejectExchange,
} from "./attested_keys.ts";

/** The recovery server's port (the original's `recoveryPort`). */
export const RECOVERY_PORT = 9999;

/** The state disk, closed (satisfied by `LuksStateDisk`). */
export interface RecoveryDisk {
  /** The LUKS UUID, lower-case. */
  uuid(options?: { signal?: AbortSignal }): Promise<string>;
  /** Whether `key` opens the disk. */
  testPassphrase(key: Uint8Array, options?: { signal?: AbortSignal }): Promise<boolean>;
  /** The measurement salt the disk's token recorded and its tag, if any. */
  measurementSalt(options?: { signal?: AbortSignal }): Promise<RecordedSalt | undefined>;
}

/** Everything {@linkcode RecoveryServer} uses. */
export interface RecoveryServerDependencies {
  /** Produces this node's evidence. */
  issuer: Issuer;
  /** The state disk. */
  disk: RecoveryDisk;
  /** Time, for attestation key expiry. */
  clock: Clock;
  /** Where the server logs (never a secret). */
  logger: Logger;
}

/** How the rebinding with recovered keys ended, as the rejoin reports it (or that a join service won). */
export type RebindOutcome = { clusterId: Uint8Array } | { error: string } | { rejoinedMeanwhile: true };

/** Keys an operator's recovery delivered: the disk key opens this node's disk. */
export interface RecoveredKeys {
  /** The state disk's key (a secret). */
  stateDiskKey: Uint8Array;
  /** The cluster's measurement secret (a secret). */
  measurementSecret: Uint8Array;
  /** The measurement salt the disk recorded. */
  measurementSalt: Uint8Array;
  /** Tells the waiting operator how the rebinding ended; call exactly once. */
  settle(outcome: RebindOutcome): void;
}

/** The recovery server's own refusal reasons. */
export type RecoveryServerReason =
  | "not-waiting" // the node is not waiting for a recovery (it rejoined, or its rejoin ended)
  | "recovery-running" // another recovery is under way
  | "invalid-parameters" // kms_uri or storage_uri
  | "wrong-master-secret" // the derived disk key does not open the state disk
  | "no-measurement-salt" // the disk's token records no usable salt (an older bootstrapper initialized it)
  | "salt-tampered" // the recorded salt's tag does not match the cluster's measurement secret
  | "disk-failed" // cryptsetup failed
  | "rebind-failed" // writing the key file or binding PCR 15 failed
  | "seal-failed"; // sealing the answer failed

/** Every reason a recovery-server rejection carries. */
export type RecoveryReason = RecoveryServerReason | NodeExchangeReason | CommonReason;

const codes: Record<RecoveryServerReason | CommonReason, Code> = {
  "not-waiting": Code.FailedPrecondition,
  "recovery-running": Code.FailedPrecondition,
  "invalid-parameters": Code.InvalidArgument,
  "wrong-master-secret": Code.PermissionDenied,
  "no-measurement-salt": Code.FailedPrecondition,
  "salt-tampered": Code.FailedPrecondition,
  "disk-failed": Code.Internal,
  "rebind-failed": Code.Internal,
  "seal-failed": Code.Internal,
  ...COMMON_REASON_CODES,
};

/** A rejection of the recovery server for `reason`; `message` is what the client reads. */
export function rejectRecovery(
  reason: RecoveryReason,
  message: string,
  options?: { cause?: unknown },
): Rejection {
  if (!Object.hasOwn(codes, reason)) return rejectExchange(reason as NodeExchangeReason, message, options);
  return new Rejection(reason, codes[reason as RecoveryServerReason | CommonReason], message, options);
}

/** Options of {@linkcode RecoveryServer}: the attestation keys' lifetime and bound. */
export type RecoveryServerOptions = AttestedKeysOptions;

/** The `recoverproto.API` handler. */
export class RecoveryServer {
  readonly #deps: RecoveryServerDependencies;
  readonly #keys: AttestedKeys;
  /** The rejoin waiting for keys, while it waits. */
  #waiter: PromiseWithResolvers<RecoveredKeys> | undefined;
  #running = false;

  /** A handler over `deps`. */
  constructor(deps: RecoveryServerDependencies, options: RecoveryServerOptions = {}) {
    this.#deps = deps;
    this.#keys = new AttestedKeys(deps, RECOVER_PURPOSE, options);
  }

  /** The `recoverproto.API` implementation, for a Connect router. */
  handlers(): ServiceImpl<typeof API> {
    const connectErrors = <T>(work: () => Promise<T>) =>
      work().catch((error) => {
        throw toConnectError(asRejection(error));
      });
    return {
      getAttestation: (request, context) => connectErrors(() => this.getAttestation(request, context)),
      recover: (request, context) => connectErrors(() => this.recover(request, context)),
    };
  }

  /** A fresh key pair and evidence binding it to the client's 32-byte nonce; the key is held for one Recover. */
  getAttestation(
    request: GetAttestationRequest,
    options: { signal?: AbortSignal } = {},
  ): Promise<GetAttestationResponse> {
    return this.#keys.attest(request, options);
  }

  /**
   * Resolves with the first keys an operator's recovery delivers (they open
   * this node's disk); rejects with `signal`'s reason once it aborts. One
   * waiter at a time.
   */
  accept(options: { signal: AbortSignal }): Promise<RecoveredKeys> {
    const { signal } = options;
    if (this.#waiter) return Promise.reject(new Error("a rejoin already waits for a recovery"));
    if (signal.aborted) return Promise.reject(signal.reason);
    const waiter = Promise.withResolvers<RecoveredKeys>();
    this.#waiter = waiter;
    signal.addEventListener("abort", () => {
      if (this.#waiter === waiter) this.#waiter = undefined;
      waiter.reject(signal.reason);
    }, { once: true });
    return waiter.promise;
  }

  /** Runs a recovery (steps 1-6); resolves with the sealed answer or throws a {@linkcode Rejection}. */
  async recover(request: RecoverRequest, options: { signal?: AbortSignal } = {}): Promise<RecoverResponse> {
    const { logger } = this.#deps;
    const opened = await this.#keys.open(RecoverRequestSchema, request);
    if (this.#running) throw rejectRecovery("recovery-running", "another recovery is under way on this node");
    if (!this.#waiter) {
      throw rejectRecovery(
        "not-waiting",
        "this node is not waiting for a recovery: it has rejoined already, or its rejoin has ended",
      );
    }
    this.#running = true;
    logger.info("recovery requested");
    try {
      const keys = await this.#derive(opened.request, options);
      const waiter = this.#waiter;
      if (!waiter) {
        keys.stateDiskKey.fill(0);
        keys.measurementSecret.fill(0);
        throw rejectRecovery("not-waiting", "this node rejoined through a join service meanwhile");
      }
      this.#waiter = undefined;
      const settled = Promise.withResolvers<RebindOutcome>();
      waiter.resolve({ ...keys, settle: settled.resolve });
      const outcome = await settled.promise;
      if ("rejoinedMeanwhile" in outcome) {
        throw rejectRecovery("not-waiting", "this node rejoined through a join service meanwhile");
      }
      if ("error" in outcome) {
        throw rejectRecovery(
          "rebind-failed",
          `the master secret opens this node's disk, but the node could not rebind itself: ${outcome.error}`,
        );
      }
      logger.info("recovered: PCR 15 bound to the cluster again", { clusterId: outcome.clusterId.toHex() });
      let sealed;
      try {
        sealed = await sealNodeResponse(
          RECOVER_PURPOSE,
          RecoverResponseSchema,
          { diskUuid: await this.#deps.disk.uuid(options), clusterId: outcome.clusterId },
          opened.request.clientPublicKey,
          opened.reportData,
        );
      } catch (error) {
        throw rejectRecovery("seal-failed", "sealing the answer failed", { cause: error });
      }
      return create(RecoverResponseSchema, { sealed });
    } catch (error) {
      const rejection = asRejection(error);
      logger.warn("recovery refused", { reason: rejection.reason, error: rejection.message });
      throw rejection;
    } finally {
      this.#running = false;
    }
  }

  /** Steps 3-5: the keys of this node from the request's master secret, checked against the disk. */
  async #derive(
    request: Pick<RecoverRequest, "kmsUri" | "storageUri">,
    options: { signal?: AbortSignal },
  ): Promise<Omit<RecoveredKeys, "settle">> {
    const { disk } = this.#deps;
    let kms;
    try {
      kms = requestKms(request).kms;
    } catch (error) {
      // KmsError messages name parameters, never values: the URI holds the master secret.
      throw rejectRecovery("invalid-parameters", (error as Error).message, { cause: error });
    }
    const onDisk = async <T>(what: string, call: () => Promise<T>) => {
      try {
        return await call();
      } catch (error) {
        throw rejectRecovery("disk-failed", `${what}: ${(error as Error).message}`, { cause: error });
      }
    };
    const uuid = await onDisk("reading the state disk's UUID", () => disk.uuid(options));
    const stateDiskKey = await deriveStateDiskKey(kms, uuid);
    const opens = await onDisk("testing the disk key", () => disk.testPassphrase(stateDiskKey, options));
    if (!opens) {
      stateDiskKey.fill(0);
      throw rejectRecovery(
        "wrong-master-secret",
        `the master secret does not open this node's state disk ${uuid}: it is not this cluster's`,
      );
    }
    const recorded = await onDisk("reading the state disk's token", () => disk.measurementSalt(options));
    if (recorded?.salt.length !== MEASUREMENT_SALT_LENGTH) {
      stateDiskKey.fill(0);
      throw rejectRecovery(
        "no-measurement-salt",
        `the state disk ${uuid} records no measurement salt (an older bootstrapper initialized it), so this ` +
          "node cannot derive its cluster ID and cannot be recovered online (a rejoin through a join service " +
          "records the salt); `cli recover --disk-uuid` still gives its disk key",
      );
    }
    const measurementSecret = await deriveMeasurementSecret(kms);
    if (!await isRecordedSaltOf(recorded, measurementSecret)) {
      stateDiskKey.fill(0);
      measurementSecret.fill(0);
      throw rejectRecovery(
        "salt-tampered",
        `the measurement salt recorded on the state disk ${uuid} is not this cluster's (its tag does not match): ` +
          "the disk's header was changed; the node stays unbound",
      );
    }
    return { stateDiskKey, measurementSecret, measurementSalt: recorded.salt };
  }
}
