import assert from "node:assert/strict";
import type { InstanceMetadata } from "../../src/bootstrapper/joinclient.ts";
import { TicketError } from "../../src/bootstrapper/join_ticket_source.ts";
import {
  type Recovery,
  rejoin,
  type RejoinDependencies,
  RejoinError,
} from "../../src/bootstrapper/rejoin.ts";
import type { RebindOutcome, RecoveredKeys } from "../../src/bootstrapper/recoveryserver.ts";
import type { RecordedSalt, SaltRecord } from "../../src/bootstrapper/state_disk.ts";
import { deriveClusterId, measurementSaltTag } from "../../src/kms/keys.ts";
import { drive, ManualTimers, recordingLogger, until } from "./support.ts";

const INTERVAL = 1000;
const DISK_UUID = "6f0d8e2a-3c1b-4a5e-9f7d-2b8c4e6a1d3f";
const DISK_KEY = new Uint8Array(32).fill(0xd1);
const SECRET = new Uint8Array(32).fill(0x3e);
const SALT = new Uint8Array(32).fill(0x5a);
const self: InstanceMetadata = { name: "cp-1", providerId: "", role: "ControlPlane", vpcIp: "10.0.0.1" };
const peers: InstanceMetadata[] = [
  self,
  { name: "cp-0", providerId: "", role: "ControlPlane", vpcIp: "10.0.0.2" },
  { name: "cp-2", providerId: "", role: "ControlPlane", vpcIp: "10.0.0.3" },
];

type Ticket = { stateDiskKey: Uint8Array; measurementSecret: Uint8Array; measurementSalt: Uint8Array };
const TICKET: Ticket = { stateDiskKey: DISK_KEY, measurementSecret: SECRET, measurementSalt: SALT };
/** A fresh copy, as a decoded ticket is: the rejoin zeroes the keys it used. */
const copy = (ticket: Ticket): Ticket => structuredClone(ticket);
const RECORDED = { salt: SALT, tag: await measurementSaltTag(SECRET, SALT) };

interface Options {
  initialized?: boolean;
  /** Answers per call index; default the right keys. */
  ticket?: (index: number) => Promise<Ticket>;
  /** The key file's write fails with this message. */
  keyFileFails?: string;
  peers?: () => Promise<InstanceMetadata[]>;
  /** This node's metadata; default control plane cp-1. */
  self?: InstanceMetadata;
  /** What the disk's token records; default the cluster's salt, tagged right. */
  recorded?: RecordedSalt;
  /** The operator's recovery; none when absent. */
  recovery?: Recovery;
}

/** A recovery whose keys the test hands over (`deliver`), recording every settle. */
function fakeRecovery(options: { unavailable?: string; ignoresAbort?: boolean } = {}) {
  const settled: RebindOutcome[] = [];
  const accepts: AbortSignal[] = [];
  let pending: PromiseWithResolvers<RecoveredKeys> | undefined;
  const recovery: Recovery = {
    accept: ({ signal }) => {
      accepts.push(signal);
      if (options.unavailable) return Promise.reject(new Error(options.unavailable));
      pending = Promise.withResolvers();
      if (!options.ignoresAbort) signal.addEventListener("abort", () => pending!.reject(signal.reason));
      return pending.promise;
    },
  };
  const deliver = (keys: Ticket = TICKET) =>
    pending!.resolve({ ...copy(keys), settle: (outcome) => void settled.push(outcome) });
  return { recovery, settled, accepts, deliver };
}

function setup(options: Options = {}) {
  const timers = new ManualTimers();
  const log = recordingLogger();
  const endpoints: string[] = [];
  const locks: Uint8Array[] = [];
  const keyFile: Uint8Array[] = [];
  const tested: Uint8Array[] = [];
  const recordedSalts: SaltRecord[] = [];
  const deps: RejoinDependencies = {
    disk: {
      isInitialized: () => Promise.resolve(options.initialized ?? true),
      uuid: () => Promise.resolve(DISK_UUID),
      testPassphrase: (key) => {
        tested.push(key);
        return Promise.resolve(key.every((byte, i) => byte === DISK_KEY[i]));
      },
      measurementSalt: () => Promise.resolve("recorded" in options ? options.recorded : RECORDED),
      recordSalt: (record) => {
        recordedSalts.push(structuredClone(record));
        return Promise.resolve();
      },
    },
    metadata: {
      self: () => Promise.resolve(options.self ?? self),
      peers: options.peers ?? (() => Promise.resolve(peers)),
    },
    tickets: {
      rejoinTicket: (endpoint, diskUuid) => {
        assert.equal(diskUuid, DISK_UUID);
        endpoints.push(endpoint);
        return (options.ticket?.(endpoints.length - 1) ?? Promise.resolve(TICKET)).then(copy);
      },
    },
    diskKeyFile: {
      write: (key) => {
        if (options.keyFileFails) return Promise.reject(new Error(options.keyFileFails));
        keyFile.push(key.slice());
        return Promise.resolve();
      },
    },
    lock: {
      tryLock: (clusterId) => {
        locks.push(clusterId);
        return Promise.resolve(locks.length === 1);
      },
    },
    recovery: options.recovery,
    logger: log.logger,
    timers,
  };
  return { deps, timers, log, endpoints, locks, keyFile, tested, recordedSalts };
}

Deno.test("rejoin", async (t) => {
  const clusterId = await deriveClusterId(SECRET, SALT);
  const rows: { name: string; run: () => Promise<void> }[] = [
    {
      name: "a fresh disk: nothing to rejoin",
      run: async () => {
        const s = setup({ initialized: false });
        assert.deepEqual(await rejoin(s.deps), { status: "not-initialized" });
        assert.deepEqual(s.endpoints, []);
        assert.deepEqual(s.locks, []);
        assert.deepEqual(s.keyFile, []);
      },
    },
    {
      name: "refused, a wrong disk key, then the right one: key file written, PCR 15 bound to the cluster ID",
      run: async () => {
        const refusal = new TicketError("10.0.0.2:30090", "unreachable", "connection refused");
        const s = setup({
          ticket: (index) =>
            index === 0
              ? Promise.reject(refusal)
              : index === 1
              ? Promise.resolve({ ...TICKET, stateDiskKey: new Uint8Array(32) })
              : Promise.resolve(TICKET),
        });
        const outcome = await drive(rejoin(s.deps, { retryIntervalMs: INTERVAL }), s.timers, INTERVAL);
        assert.deepEqual(outcome, { status: "rebound", clusterId, source: "10.0.0.2:30090" });
        assert.deepEqual(s.keyFile, [DISK_KEY], "only the key that opens the disk");
        assert.deepEqual(
          s.endpoints,
          ["10.0.0.2:30090", "10.0.0.3:30090", "10.0.0.2:30090"],
          "itself excluded",
        );
        assert.deepEqual(s.locks, [clusterId]);
        const warned = s.log.entries().filter((e) =>
          e.msg === "rejoin ticket refused, unreachable or unusable"
        );
        assert.deepEqual(warned.map((e) => e.reason), ["unreachable", "wrong-disk-key"]);
        assert.ok(
          !s.log.lines.some((line) => line.includes(DISK_KEY.toBase64()) || line.includes(DISK_KEY.toHex())),
        );
      },
    },
    {
      name: "a ticket without a salt (a join service older than the node) is not used: the next one is",
      run: async () => {
        const s = setup({
          ticket: (index) =>
            Promise.resolve(index === 0 ? { ...TICKET, measurementSalt: new Uint8Array() } : TICKET),
        });
        const outcome = await rejoin(s.deps, { retryIntervalMs: INTERVAL });
        assert.deepEqual(outcome, { status: "rebound", clusterId, source: "10.0.0.3:30090" });
        const warned = s.log.entries().filter((e) =>
          e.msg === "rejoin ticket refused, unreachable or unusable"
        );
        assert.deepEqual(warned.map((e) => [e.endpoint, e.reason]), [["10.0.0.2:30090", "malformed-ticket"]]);
        assert.match(String(warned[0].error), /measurement salt has 0 bytes, want 32/);
        assert.equal(s.tested.length, 1, "cryptsetup only for the ticket with a salt");
        assert.deepEqual(s.keyFile, [DISK_KEY]);
      },
    },
    {
      name: "the key file cannot be written: terminal, PCR 15 not bound",
      run: async () => {
        const s = setup({ keyFileFails: "read-only file system" });
        const error = await rejoin(s.deps).then(() => assert.fail("rejoined"), (e) => e);
        assert.ok(error instanceof RejoinError);
        assert.equal(error.reason, "key-file");
        assert.equal(error.message, "writing the state disk's key file: read-only file system");
        assert.deepEqual(s.locks, []);
      },
    },
    {
      name:
        "a control plane without join services: the operator's recovery rebinds it and is told the cluster ID",
      run: async () => {
        const r = fakeRecovery();
        const s = setup({ peers: () => Promise.resolve([self]), recovery: r.recovery });
        const running = rejoin(s.deps, { retryIntervalMs: INTERVAL });
        await until(() => s.timers.pending.includes(INTERVAL) && r.accepts.length === 1);
        r.deliver();
        assert.deepEqual(await running, { status: "rebound", clusterId, source: "recovery" });
        assert.deepEqual(s.keyFile, [DISK_KEY]);
        assert.deepEqual(s.locks, [clusterId]);
        assert.deepEqual(r.settled, [{ clusterId }]);
        assert.deepEqual(s.recordedSalts, [], "the recovery read the salt from the disk: nothing to record");
        assert.ok(r.accepts[0].aborted, "the recovery is no longer offered");
        assert.deepEqual(s.timers.pending, [], "the join services' loop stopped");
      },
    },
    {
      name:
        "a disk whose token records no salt, or another: the ticket's salt and tag are recorded after a rejoin",
      run: async () => {
        for (const recorded of [undefined, { ...RECORDED, salt: new Uint8Array(32).fill(1) }]) {
          const s = setup({ recorded });
          assert.deepEqual(await rejoin(s.deps), { status: "rebound", clusterId, source: "10.0.0.2:30090" });
          assert.deepEqual(s.recordedSalts, [{ measurementSalt: SALT, measurementSecret: SECRET }]);
        }
        const s = setup();
        await rejoin(s.deps);
        assert.deepEqual(s.recordedSalts, [], "a disk that records the cluster's salt is not written");
      },
    },
    {
      name: "a worker: no recovery is offered",
      run: async () => {
        const r = fakeRecovery();
        const worker = { ...self, role: "Worker" as const };
        const s = setup({ self: worker, recovery: r.recovery });
        assert.deepEqual(await rejoin(s.deps), { status: "rebound", clusterId, source: "10.0.0.2:30090" });
        assert.deepEqual(r.accepts, []);
      },
    },
    {
      name:
        "a recovery that cannot be offered (its port taken): logged, the join services still rejoin the node",
      run: async () => {
        const r = fakeRecovery({ unavailable: "address in use" });
        const s = setup({ recovery: r.recovery });
        assert.deepEqual(await rejoin(s.deps), { status: "rebound", clusterId, source: "10.0.0.2:30090" });
        const warned = s.log.entries().filter((e) =>
          String(e.msg).startsWith("the operator's recovery is unavailable")
        );
        assert.deepEqual(warned.map((e) => e.error), ["address in use"]);
      },
    },
    {
      name: "keys a recovery delivers after a join service did are turned away, not left unanswered",
      run: async () => {
        const r = fakeRecovery({ ignoresAbort: true });
        const s = setup({ recovery: r.recovery });
        assert.deepEqual(await rejoin(s.deps), { status: "rebound", clusterId, source: "10.0.0.2:30090" });
        r.deliver();
        await until(() => r.settled.length === 1);
        assert.deepEqual(r.settled, [{ rejoinedMeanwhile: true }]);
        assert.deepEqual(s.locks, [clusterId], "bound once");
      },
    },
    {
      name: "recovered keys that cannot be used (the key file): the recovery is told why, the rejoin fails",
      run: async () => {
        const r = fakeRecovery();
        const s = setup({
          peers: () => Promise.resolve([self]),
          recovery: r.recovery,
          keyFileFails: "disk full",
        });
        const running = rejoin(s.deps, { retryIntervalMs: INTERVAL });
        await until(() => r.accepts.length === 1);
        r.deliver();
        const error = await running.then(() => assert.fail("rejoined"), (e) => e);
        assert.equal(error.reason, "key-file");
        assert.deepEqual(r.settled, [{ error: "writing the state disk's key file: disk full" }]);
        assert.deepEqual(s.locks, []);
      },
    },
    {
      name: "abort while waiting: stopped, no timer left",
      run: async () => {
        const s = setup({ peers: () => Promise.resolve([self]) });
        const controller = new AbortController();
        const running = rejoin(s.deps, { retryIntervalMs: INTERVAL, signal: controller.signal });
        await until(() => s.timers.pending.includes(INTERVAL));
        controller.abort();
        assert.deepEqual(await running, { status: "stopped" });
        assert.deepEqual(s.timers.pending, []);
      },
    },
  ];
  for (const row of rows) await t.step(row.name, row.run);
});
