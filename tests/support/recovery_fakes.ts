/**
 * A rejoining control plane's recovery server (`recoverproto.API`) on fakes
 * of its state disk and rejoin, for the recovery client's and the CLI's
 * tests: the disk opens with the key derived from {@linkcode RECOVERY_MASTER},
 * and every key the server tries on it is recorded (`received`): a master
 * secret that reached the node.
 *
 * @module
 */
import type { ServiceImpl } from "@connectrpc/connect";
import type { Issuer } from "../../src/attestation/attestation.ts";
import { RecoveryServer } from "../../src/bootstrapper/recoveryserver.ts";
import type { API } from "../../src/gen/recoverproto/recover_pb.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import {
  deriveClusterId,
  deriveMeasurementSecret,
  deriveStateDiskKey,
  measurementSaltTag,
} from "../../src/kms/keys.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { ManualClock } from "./manual_clock.ts";

/** The cluster's master secret, whose disk key opens the fake disk. */
export const RECOVERY_MASTER = { key: new Uint8Array(32).fill(0x11), salt: new Uint8Array(32).fill(0x22) };
/** The fake disk's UUID. */
export const RECOVERY_DISK_UUID = "0123abcd-0000-4000-8000-00000000cafe";

/** A waiting recovery server; dispose to end its rejoin. */
export interface FakeRecoveryNode extends Disposable {
  /** The server's handlers, to route. */
  handlers: ServiceImpl<typeof API>;
  /** Hex of every disk key tried on the disk: one per master secret that reached the node. */
  received: string[];
}

/** A recovery server on `issuer` whose rejoin waits for a recovery. */
export async function fakeRecoveryNode(issuer: Issuer): Promise<FakeRecoveryNode> {
  const kms = new ClusterKms(RECOVERY_MASTER.key, RECOVERY_MASTER.salt);
  const diskKey = await deriveStateDiskKey(kms, RECOVERY_DISK_UUID);
  const measurementSecret = await deriveMeasurementSecret(kms);
  const salt = new Uint8Array(32).fill(0x5a);
  const received: string[] = [];
  const server = new RecoveryServer({
    issuer,
    disk: {
      uuid: () => Promise.resolve(RECOVERY_DISK_UUID),
      testPassphrase: (key) => {
        received.push(key.toHex());
        return Promise.resolve(key.toHex() === diskKey.toHex());
      },
      measurementSalt: async () => ({ salt, tag: await measurementSaltTag(measurementSecret, salt) }),
    },
    clock: new ManualClock(),
    logger: silentLogger,
  });
  const rejoin = new AbortController();
  server.accept({ signal: rejoin.signal }).then(
    async (keys) =>
      keys.settle({ clusterId: await deriveClusterId(keys.measurementSecret, keys.measurementSalt) }),
    () => {},
  );
  return { handlers: server.handlers(), received, [Symbol.dispose]: () => rejoin.abort() };
}
