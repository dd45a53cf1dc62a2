/**
 * Fakes of every interface the init server declares
 * (`src/bootstrapper/initserver.ts`), for the handler's table and the
 * client tests: `fakeInitDependencies(overrides)` builds a working set,
 * records every effect in order (`calls`), and collects log lines.
 *
 * The cluster's secrets are the reference's chained test vector (master key
 * 00…1f, salt 20…3f, measurement salt 32×0xaa, disk
 * 0123abcd-0000-4000-8000-00000000cafe), so the derived values are known.
 *
 * @module
 */
import bcrypt from "bcryptjs";
import { createRouterTransport, type Transport } from "@connectrpc/connect";
import { DummyIssuer } from "../../src/attestation/dummy.ts";
import { DummyValidator } from "../../src/attestation/dummy.ts";
import type { AkTrust } from "../../src/attestation/attestation.ts";
import {
  InitServer,
  type InitServerDependencies,
  type InitServerOptions,
} from "../../src/bootstrapper/initserver.ts";
import { API } from "../../src/gen/init/init_pb.ts";
import type { InitParameters } from "../../src/init/client.ts";
import { createLogger, silentLogger } from "../../src/log/logger.ts";
import { ManualClock } from "./manual_clock.ts";

/** The init secret the fake metadata's hash is made from. */
export const INIT_SECRET = "init-secret-0123456789";
/** The KMS URI of master key 00…1f, salt 20…3f. */
export const KMS_URI =
  "kms://cluster-kms?key=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=&salt=ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
/** The measurement salt. */
export const MEASUREMENT_SALT: Uint8Array<ArrayBuffer> = new Uint8Array(32).fill(0xaa);
/** The cluster ID of that master secret and salt (reference §4.5). */
export const CLUSTER_ID = "2e2fba922b51075708bf5044e2f82169990d755b41fc868db0f1e0b44aa1092d";
/** The state disk's UUID as the fake disk reports it (upper case: the key uses it lower-cased). */
export const DISK_UUID = "0123ABCD-0000-4000-8000-00000000CAFE";
/** The disk key of that UUID (reference §4.5). */
export const DISK_KEY = "cd38fc179a5154a9bd738351a8d0469a30c9edd57f9d8a31bc0153926daeadb1";
/** The kubeconfig the fake cluster initializer returns. */
export const FAKE_KUBECONFIG = "apiVersion: v1\nkind: Config\n# fake admin.conf\n";
/** The node logs the fake log source returns. */
export const FAKE_NODE_LOGS = "node log: kubelet started\nnode log: kubeadm failed\n";
/** A dummy-variant attestation config. */
export const DUMMY_ATTESTATION_CONFIG = JSON.stringify({
  variant: "dummy",
  akTrust: { trustAnyKey: true, controlPlaneAnyKey: true },
});

const hash = bcrypt.hashSync(INIT_SECRET, 4);
const encoder = new TextEncoder();

/** The values that must never appear in a log line or an error message. */
export const SECRETS: readonly string[] = [
  INIT_SECRET,
  "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
  "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8",
  "000102030405060708090a0b0c0d0e0f",
  DISK_KEY,
  "ea7fedd14f5a29b1b8545592fc20bfdae06918e4ff447b1a0b8e4f3356005bda", // measurement secret
];

/** Valid init parameters for the fakes. */
export function initParameters(overrides: Partial<InitParameters> = {}): InitParameters {
  return {
    kmsUri: KMS_URI,
    storageUri: "storage://no-store",
    initSecret: encoder.encode(INIT_SECRET),
    measurementSalt: MEASUREMENT_SALT,
    attestationConfig: DUMMY_ATTESTATION_CONFIG,
    kubernetesVersion: "v1.30.2",
    clusterName: "test-cluster",
    kubernetesComponents: [{
      url: "https://example/kubeadm",
      hash: `sha256:${"ab".repeat(32)}`,
      installPath: "/run/state/bin/kubeadm",
      extract: false,
    }],
    ...overrides,
  };
}

/** Changes to the fake set. */
export interface InitFakeOverrides extends Partial<InitServerDependencies> {
  /** The lock was already taken by a join: tryLock answers false. */
  lockTakenByJoin?: boolean;
  /** The cluster initializer fails with this message. */
  clusterFails?: string;
  /** Reading this node's name and addresses (before the lock) fails with this error. */
  nodeFails?: Error;
  /** The cluster initializer's component check (before the lock) throws this message. */
  componentsRefused?: string;
  /** The cluster initializer waits for this before answering. */
  clusterGate?: Promise<void>;
  /** The cluster initializer (a kubeadm or component server that never answers) ends only when cancelled. */
  clusterNeverEnds?: boolean;
  /** Bytes of the fake node logs. */
  nodeLogs?: string;
  /** Server options. */
  options?: InitServerOptions;
}

/** A fake world: the server, what it did, and a client transport to it. */
export interface InitWorld {
  server: InitServer;
  deps: InitServerDependencies;
  /**
   * Effects in order: "lock <hex>", "onLocked", "disk uuid", "passphrase <hex> salt <hex>", "initialize <clusterName>"
   * (then "initialize cancelled" if `clusterNeverEnds` and its signal aborts), "node state <role> <hex>",
   * and "node state removed" after a failure past the lock.
   */
  calls: string[];
  /** The parameters the cluster initializer got. */
  initialized: Parameters<InitServerDependencies["cluster"]["initialize"]>[0][];
  /** Raw JSON log lines of the server. */
  logLines: string[];
  clock: ManualClock;
  /** An in-memory transport to the server. */
  transport: Transport;
  /** A dummy validator for the client. */
  validator: DummyValidator;
  /** The client's control-plane keys: any, as {@linkcode DUMMY_ATTESTATION_CONFIG} says (`controlPlaneAnyKey`). */
  controlPlanes: AkTrust;
}

/** Builds a full set of fakes with `overrides` applied. */
export function fakeInitDependencies(overrides: InitFakeOverrides = {}): InitWorld {
  const {
    lockTakenByJoin,
    clusterFails,
    nodeFails,
    componentsRefused,
    clusterGate,
    clusterNeverEnds,
    nodeLogs,
    options,
    ...replaced
  } = overrides;
  const clock = new ManualClock();
  const calls: string[] = [];
  const initialized: InitWorld["initialized"] = [];
  const logLines: string[] = [];
  let locked = lockTakenByJoin ?? false;
  const deps: InitServerDependencies = {
    issuer: new DummyIssuer(silentLogger),
    initSecretHash: { initSecretHash: () => Promise.resolve(hash) },
    lock: {
      tryLock: (clusterId, lockOptions) => {
        calls.push(`lock ${clusterId.toHex()}`);
        if (locked) return Promise.resolve(false);
        locked = true;
        lockOptions?.onTaken?.();
        return Promise.resolve(true);
      },
      get holder() {
        return locked ? "taken" : "none";
      },
    },
    onLocked: () => calls.push("onLocked"),
    disk: {
      uuid: () => {
        calls.push("disk uuid");
        return Promise.resolve(DISK_UUID);
      },
      changePassphrase: (key, record) => {
        calls.push(`passphrase ${key.toHex()} salt ${record.measurementSalt.toHex()}`);
        return Promise.resolve();
      },
    },
    nodeState: {
      write: (state) => {
        calls.push(`node state ${state.role} ${state.measurementSalt.toHex()}`);
        return Promise.resolve();
      },
      remove: () => {
        calls.push("node state removed");
        return Promise.resolve();
      },
    },
    cluster: {
      checkComponents: () => {
        if (componentsRefused) throw new Error(componentsRefused);
      },
      describeNode: () => {
        if (nodeFails) return Promise.reject(nodeFails);
        return Promise.resolve({ nodeName: "control-plane-0", nodeIp: "10.0.0.2" });
      },
      initialize: async (params, o) => {
        calls.push(`initialize ${params.clusterName}`);
        initialized.push(params);
        if (clusterNeverEnds) {
          await new Promise((_resolve, reject) =>
            o?.signal?.addEventListener("abort", () => {
              calls.push("initialize cancelled");
              reject(o.signal!.reason);
            })
          );
        }
        await clusterGate;
        if (clusterFails) throw new Error(clusterFails);
        return { kubeconfig: encoder.encode(FAKE_KUBECONFIG) };
      },
    },
    logs: { collect: () => Promise.resolve(encoder.encode(nodeLogs ?? FAKE_NODE_LOGS)) },
    clock,
    logger: createLogger({ level: "debug", write: (line) => logLines.push(line) }),
    ...replaced,
  };
  const server = new InitServer(deps, options);
  const transport = createRouterTransport((router) => router.service(API, server.handlers()));
  return {
    server,
    deps,
    calls,
    initialized,
    logLines,
    clock,
    transport,
    validator: new DummyValidator(silentLogger),
    controlPlanes: { kind: "any" },
  };
}
