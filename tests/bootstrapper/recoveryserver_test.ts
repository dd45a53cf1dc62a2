/**
 * The recovery server through the recovery client over an in-memory Connect
 * transport, on fakes of the state disk and the waiting rejoin: who may
 * recover, what each refusal says, and that nothing reaches the rejoin until
 * the master secret opens the disk.
 */
import assert from "node:assert/strict";
import { Code, createClient, createRouterTransport } from "@connectrpc/connect";
import { DummyIssuer, DummyValidator } from "../../src/attestation/dummy.ts";
import { DEFAULT_ATTESTATION_KEY_LIFETIME_MS } from "../../src/bootstrapper/attested_keys.ts";
import {
  type RebindOutcome,
  type RecoveredKeys,
  RecoveryServer,
} from "../../src/bootstrapper/recoveryserver.ts";
import { API } from "../../src/gen/recoverproto/recover_pb.ts";
import type { NodeExchangeError } from "../../src/init/node_exchange.ts";
import { recoverNode } from "../../src/init/recover_client.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import {
  deriveClusterId,
  deriveMeasurementSecret,
  deriveStateDiskKey,
  measurementSaltTag,
} from "../../src/kms/keys.ts";
import { encodeMasterSecretUri } from "../../src/kms/uri.ts";
import { createLogger, silentLogger } from "../../src/log/logger.ts";
import { ManualClock } from "../support/manual_clock.ts";
import { until } from "./support.ts";

const DISK_UUID = "0123abcd-0000-4000-8000-00000000cafe";
const MASTER = { key: new Uint8Array(32).fill(0x11), salt: new Uint8Array(32).fill(0x22) };
const OTHER_MASTER = { key: new Uint8Array(32).fill(0x33), salt: new Uint8Array(32).fill(0x22) };
const SALT = new Uint8Array(32).fill(0x5a);
const kms = new ClusterKms(MASTER.key, MASTER.salt);
const DISK_KEY = await deriveStateDiskKey(kms, DISK_UUID);
const MEASUREMENT_SECRET = await deriveMeasurementSecret(kms);
const CLUSTER_ID = await deriveClusterId(MEASUREMENT_SECRET, SALT);
const RECORDED = { salt: SALT, tag: await measurementSaltTag(MEASUREMENT_SECRET, SALT) };
const request = (master = MASTER) => ({
  kmsUri: encodeMasterSecretUri(master),
  storageUri: "storage://no-store",
});

interface WorldOptions {
  /** Answers testPassphrase for the n-th call (from 0); default whether the key is the disk key. */
  testPassphrase?: (key: Uint8Array, call: number) => Promise<boolean>;
  /** The salt the disk's token records, with its tag; default SALT, tagged right. */
  salt?: { salt: Uint8Array; tag: Uint8Array } | null;
  /** Whether a rejoin waits; default true. */
  waiting?: boolean;
  /** How the rejoin's rebinding ends; default the cluster ID. */
  rebind?: (keys: RecoveredKeys) => RebindOutcome;
}

function world(options: WorldOptions = {}) {
  const logLines: string[] = [];
  const tested: Uint8Array[] = [];
  const clock = new ManualClock();
  const server = new RecoveryServer({
    issuer: new DummyIssuer(silentLogger),
    disk: {
      uuid: () => Promise.resolve(DISK_UUID),
      testPassphrase: (key) => {
        tested.push(key);
        if (options.testPassphrase) return options.testPassphrase(key, tested.length - 1);
        return Promise.resolve(key.toHex() === DISK_KEY.toHex());
      },
      measurementSalt: () =>
        Promise.resolve(options.salt === undefined ? RECORDED : options.salt ?? undefined),
    },
    clock,
    logger: createLogger({ level: "debug", write: (line) => logLines.push(line) }),
  });
  const transport = createRouterTransport((router) => router.service(API, server.handlers()));
  const rejoin = new AbortController();
  const delivered: RecoveredKeys[] = [];
  if (options.waiting ?? true) {
    server.accept({ signal: rejoin.signal }).then((keys) => {
      delivered.push(keys);
      keys.settle(options.rebind?.(keys) ?? { clusterId: CLUSTER_ID });
    }, () => {});
  }
  const recover = (master = MASTER) =>
    recoverNode(request(master), {
      transport,
      validator: new DummyValidator(silentLogger),
      controlPlanes: { kind: "any" },
    });
  return { server, transport, rejoin, delivered, tested, logLines, clock, recover };
}

async function refusal(work: Promise<unknown>): Promise<NodeExchangeError> {
  return await work.then(() => assert.fail("recovered"), (error) => error as NodeExchangeError);
}

Deno.test("recovery server", async (t) => {
  const rows: { name: string; run: () => Promise<void> }[] = [
    {
      name:
        "the cluster's master secret: the rejoin gets the node's keys, the operator the disk and cluster ID",
      run: async () => {
        const w = world();
        assert.deepEqual(await w.recover(), { diskUuid: DISK_UUID, clusterId: CLUSTER_ID, warnings: [] });
        assert.equal(w.delivered.length, 1);
        const [keys] = w.delivered;
        assert.deepEqual(
          [keys.stateDiskKey, keys.measurementSecret, keys.measurementSalt],
          [DISK_KEY, MEASUREMENT_SECRET, SALT],
        );
        const secrets = [MASTER.key, DISK_KEY, MEASUREMENT_SECRET].flatMap((b) => [b.toHex(), b.toBase64()]);
        assert.ok(!w.logLines.some((line) => secrets.some((s) => line.includes(s))), "no secret logged");
      },
    },
    {
      name: "another cluster's master secret: refused, nothing delivered, the node still waits",
      run: async () => {
        const w = world();
        const error = await refusal(w.recover(OTHER_MASTER));
        assert.equal(error.reason, "refused");
        assert.match(error.message, new RegExp(`does not open this node's state disk ${DISK_UUID}`));
        assert.deepEqual(w.delivered, []);
        assert.deepEqual(
          await w.recover(),
          { diskUuid: DISK_UUID, clusterId: CLUSTER_ID, warnings: [] },
          "then the right one",
        );
      },
    },
    {
      name: "a disk that records no salt: refused, pointing at the offline recovery",
      run: async () => {
        const w = world({ salt: null });
        const error = await refusal(w.recover());
        assert.match(error.message, /records no measurement salt .*cli recover --disk-uuid/);
        assert.deepEqual(w.delivered, []);
      },
    },
    {
      name:
        "a salt changed in the disk's (unencrypted) header: its tag does not match, refused, nothing delivered",
      run: async () => {
        const w = world({ salt: { ...RECORDED, salt: new Uint8Array(32).fill(0x77) } });
        const error = await refusal(w.recover());
        assert.match(error.message, /measurement salt recorded on the state disk .* is not this cluster's/);
        assert.deepEqual(w.delivered, []);
      },
    },
    {
      name:
        "a recorded salt of the wrong length, tagged right: refused as recording no salt, nothing delivered",
      run: async () => {
        const short = new Uint8Array(16).fill(0x5a);
        const w = world({ salt: { salt: short, tag: await measurementSaltTag(MEASUREMENT_SECRET, short) } });
        const error = await refusal(w.recover());
        assert.equal(error.code, Code.FailedPrecondition);
        assert.match(error.message, /records no measurement salt/);
        assert.deepEqual(w.delivered, []);
      },
    },
    {
      name:
        "a second recovery while the first still tests the disk key: refused as running, the disk asked once",
      run: async () => {
        const held = Promise.withResolvers<boolean>();
        const w = world({
          testPassphrase: (key, call) =>
            call === 0 ? held.promise : Promise.resolve(key.toHex() === DISK_KEY.toHex()),
        });
        const first = w.recover();
        await until(() => w.tested.length === 1);
        const error = await refusal(w.recover());
        assert.equal(error.code, Code.FailedPrecondition);
        assert.match(error.message, /another recovery is under way on this node/);
        assert.equal(w.tested.length, 1, "the second recovery does not touch the disk");
        assert.deepEqual(w.delivered, []);
        held.resolve(true);
        assert.deepEqual(await first, { diskUuid: DISK_UUID, clusterId: CLUSTER_ID, warnings: [] });
        assert.equal(w.delivered.length, 1);
      },
    },
    {
      name: "no rejoin waits (it rebound already, or ended): refused as not waiting",
      run: async () => {
        const w = world({ waiting: false });
        const error = await refusal(w.recover());
        assert.match(error.message, /not waiting for a recovery/);
        assert.deepEqual(w.tested, [], "the disk is not touched");
      },
    },
    {
      name: "the rejoin could not rebind: the operator reads why",
      run: async () => {
        const w = world({ rebind: () => ({ error: "binding PCR 15: tpm unavailable" }) });
        const error = await refusal(w.recover());
        assert.match(
          error.message,
          /opens this node's disk, but the node could not rebind itself: binding PCR 15/,
        );
      },
    },
    {
      name: "malformed parameters: named, never echoed",
      run: async () => {
        const w = world();
        const error = await refusal(
          recoverNode({ kmsUri: "kms://aws?key=c2VjcmV0&salt=c2FsdA==", storageUri: "" }, {
            transport: w.transport,
            validator: new DummyValidator(silentLogger),
            controlPlanes: { kind: "any" },
          }),
        );
        assert.match(error.message, /kms_uri: KMS type aws is not supported/);
        assert.ok(!error.message.includes("c2VjcmV0"));
        assert.deepEqual(w.delivered, []);
      },
    },
    {
      name: "the exchange: an unsealed request, an unknown and an expired nonce are refused",
      run: async () => {
        const w = world();
        const client = createClient(API, w.transport);
        const nonce = new Uint8Array(32).fill(7);
        const sealed = { ciphertext: new Uint8Array(16), encapsulatedKey: new Uint8Array(32) };
        await assert.rejects(client.recover({ kmsUri: request().kmsUri }), /must be sealed/);
        await assert.rejects(
          client.recover({ sealed, attestationNonce: nonce }),
          /no attestation key for this nonce/,
        );
        await client.getAttestation({ nonce });
        w.clock.advance(DEFAULT_ATTESTATION_KEY_LIFETIME_MS);
        await assert.rejects(client.recover({ sealed, attestationNonce: nonce }), /expired/);
        await client.getAttestation({ nonce });
        await assert.rejects(
          client.recover({ sealed, attestationNonce: nonce }),
          /does not open with the attested key/,
        );
        assert.deepEqual(w.delivered, []);
      },
    },
  ];
  for (const row of rows) await t.step(row.name, row.run);
});
