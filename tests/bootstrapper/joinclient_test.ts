import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { ComponentSchema } from "../../src/gen/components/components_pb.ts";
import { ApplyError, JoinTicketApplier } from "../../src/bootstrapper/apply_ticket.ts";
import {
  controlPlaneEndpoints,
  type InstanceMetadata,
  JoinClient,
  type JoinTicketSource,
  type Metadata,
  type TicketApplier,
} from "../../src/bootstrapper/joinclient.ts";
import type { JoinTicketRequest } from "../../src/bootstrapper/join_ticket_source.ts";
import { TicketError } from "../../src/bootstrapper/join_ticket_source.ts";
import type { IssueJoinTicketResponse } from "../../src/gen/join/join_pb.ts";
import { CONTROL_PLANE_FILE_NAMES } from "../../src/joinservice/controlplanefiles.ts";
import { deriveClusterId } from "../../src/kms/keys.ts";
import { importSigningKey } from "../../src/x509/private_key.ts";
import * as x509 from "../../src/x509/x509.ts";
import {
  drive,
  type FakeOs,
  fakeOs,
  listFiles,
  ManualTimers,
  recordingLogger,
  TOKEN,
  until,
  validTicket,
} from "./support.ts";

const INTERVAL = 1000;
const DEADLINE = 30_000;
const DISK_UUID = "6f0d8e2a-3c1b-4a5e-9f7d-2b8c4e6a1d3f";

const worker: InstanceMetadata = {
  name: "Worker_1",
  providerId: "qemu:///hostname/worker-1",
  role: "Worker",
  vpcIp: "10.0.0.7",
};
const controlPlane: InstanceMetadata = {
  name: "cp-1",
  providerId: "qemu:///hostname/cp-1",
  role: "ControlPlane",
  vpcIp: "10.0.0.1",
};
const peers: InstanceMetadata[] = [
  worker,
  { name: "cp-0", providerId: "", role: "ControlPlane", vpcIp: "10.0.0.2" },
  { name: "cp-2", providerId: "", role: "ControlPlane", vpcIp: "" },
  controlPlane,
];

/** A script of answers: each call takes the next; the last repeats. */
function script<T>(...answers: (T | Error)[]): () => Promise<T> {
  let index = 0;
  return () => {
    const answer = answers[Math.min(index++, answers.length - 1)];
    return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer);
  };
}

interface TicketCall {
  endpoint: string;
  request: JoinTicketRequest;
}

interface World {
  client: JoinClient;
  timers: ManualTimers;
  os: FakeOs;
  calls: TicketCall[];
  log: ReturnType<typeof recordingLogger>;
}

interface WorldOptions {
  self?: () => Promise<InstanceMetadata>;
  peers?: () => Promise<InstanceMetadata[]>;
  /** Answers ticket requests; default a valid ticket for the node's role. */
  tickets?: (call: TicketCall, index: number) => Promise<IssueJoinTicketResponse>;
  lock?: boolean | string;
  kubeadmFailures?: number;
  kubeadmLateFailures?: number;
  /** Which control plane a round asks first; default the first listed (null: the client's own default). */
  firstEndpoint?: ((count: number) => number) | null;
  /** Stands in for the real applier over the fake OS. */
  applier?: TicketApplier;
}

/** Temporary roots of the worlds, removed after the test. */
const roots: string[] = [];

async function world(options: WorldOptions = {}): Promise<World> {
  const timers = new ManualTimers();
  const log = recordingLogger();
  const os = await fakeOs({
    logger: log.logger,
    timers,
    lock: options.lock,
    kubeadmFailures: options.kubeadmFailures,
    kubeadmLateFailures: options.kubeadmLateFailures,
  });
  roots.push(os.root);
  const calls: TicketCall[] = [];
  const self = options.self ?? script(worker);
  const metadata: Metadata = { self, peers: options.peers ?? script(peers) };
  const tickets: JoinTicketSource = {
    joinTicket: (endpoint, request) => {
      const call = { endpoint, request };
      calls.push(call);
      return options.tickets
        ? options.tickets(call, calls.length - 1)
        : Promise.resolve(validTicket({ controlPlane: request.isControlPlane }));
    },
  };
  const applier = options.applier ?? new JoinTicketApplier(os.deps, { joinRetryPauseMs: 5000 });
  const client = new JoinClient(
    {
      metadata,
      tickets,
      disk: { uuid: () => Promise.resolve(DISK_UUID) },
      applier,
      logger: log.logger,
      timers,
    },
    {
      retryIntervalMs: INTERVAL,
      callTimeoutMs: DEADLINE,
      ...options.firstEndpoint === null ? {} : { firstEndpoint: options.firstEndpoint ?? (() => 0) },
    },
  );
  return { client, timers, os, calls, log };
}

function warnings(w: World, msg: string): Record<string, unknown>[] {
  return w.log.entries().filter((entry) => entry.msg === msg);
}

async function assertNoSecretFiles(os: FakeOs): Promise<void> {
  assert.deepEqual(await listFiles(`${os.root}/etc`), []);
  assert.deepEqual(await listFiles(`${os.root}/run`), []);
}

Deno.test("join client", async (t) => {
  const rows: { name: string; run: () => Promise<void> }[] = [
    {
      name: "metadata down then up: retried every interval, then joins",
      run: async () => {
        const w = await world({
          self: script<InstanceMetadata>(new Error("metadata unreachable"), new Error("503"), worker),
        });
        const outcome = await drive(w.client.run(), w.timers, INTERVAL);
        assert.equal(outcome.status, "joined");
        assert.equal(warnings(w, "reading this node's metadata failed; retrying").length, 2);
        assert.deepEqual(w.timers.requested.filter((ms) => ms === INTERVAL), [INTERVAL, INTERVAL]);
        assert.deepEqual(w.timers.pending, []);
      },
    },
    {
      name:
        "no control-plane peers yet: retried, then joins; endpoints on 30090 without itself or address-less peers",
      run: async () => {
        const w = await world({
          self: script(controlPlane),
          peers: script<InstanceMetadata[]>([worker, controlPlane], peers),
        });
        const outcome = await drive(w.client.run(), w.timers, INTERVAL);
        assert.equal(outcome.status, "joined");
        const failed = warnings(w, "join round failed; retrying");
        assert.equal(failed.length, 1);
        assert.equal(failed[0].reason, "no-control-planes");
        assert.deepEqual(w.calls.map((c) => c.endpoint), ["10.0.0.2:30090"]);
        assert.equal(w.calls[0].request.isControlPlane, true);
      },
    },
    {
      name: "join service refusing (measurement mismatch, PCRs logged), then accepting",
      run: async () => {
        const mismatch = new TicketError(
          "10.0.0.2:30090",
          "measurement-mismatch",
          "PermissionDenied: attested exchange rejected (measurement-mismatch): measurements differ: PCR[4] expected aa, got bb (enforced)",
        );
        const w = await world({
          tickets: (call, index) =>
            index < 2
              ? Promise.reject(mismatch)
              : Promise.resolve(validTicket({ controlPlane: call.request.isControlPlane })),
        });
        const outcome = await drive(w.client.run(), w.timers, INTERVAL);
        assert.equal(outcome.status, "joined");
        const refusals = warnings(w, "join service refused or unreachable");
        assert.equal(refusals.length, 2);
        assert.equal(refusals[0].reason, "measurement-mismatch");
        assert.match(String(refusals[0].error), /PCR\[4\] expected aa, got bb/);
        assert.deepEqual(w.calls.map((c) => c.endpoint), [
          "10.0.0.2:30090",
          "10.0.0.1:30090",
          "10.0.0.2:30090",
        ]);
      },
    },
    {
      name: "each round starts at the control plane picked for it, then goes around the list",
      run: async () => {
        const refused = new TicketError("", "server-busy", "ResourceExhausted: server busy");
        const firsts: number[] = [];
        const w = await world({
          peers: script([...peers, {
            name: "cp-3",
            providerId: "",
            role: "ControlPlane",
            vpcIp: "10.0.0.3",
          }]),
          firstEndpoint: (count) => {
            firsts.push(count);
            return firsts.length === 1 ? 1 : 2;
          },
          tickets: (call, index) =>
            index < 3
              ? Promise.reject(refused)
              : Promise.resolve(validTicket({ controlPlane: call.request.isControlPlane })),
        });
        const outcome = await drive(w.client.run(), w.timers, INTERVAL);
        assert.equal(outcome.status, "joined");
        assert.deepEqual(firsts, [3, 3]);
        assert.deepEqual(w.calls.map((c) => c.endpoint), [
          ...["10.0.0.1:30090", "10.0.0.3:30090", "10.0.0.2:30090"],
          "10.0.0.3:30090",
        ]);
      },
    },
    {
      name: "by default, nodes start at control planes picked at random: a fleet spreads over all of them",
      run: async () => {
        const firstAsked = new Map<string, number>();
        for (let node = 0; node < 60; node++) {
          const w = await world({ firstEndpoint: null });
          assert.equal((await drive(w.client.run(), w.timers, INTERVAL)).status, "joined");
          firstAsked.set(w.calls[0].endpoint, (firstAsked.get(w.calls[0].endpoint) ?? 0) + 1);
        }
        // Each of the two first with probability 1/2: all 60 at one has probability 2^-59.
        assert.deepEqual([...firstAsked.keys()].sort(), ["10.0.0.1:30090", "10.0.0.2:30090"]);
      },
    },
    {
      name: "a join service that never answers: its deadline passes, the next endpoint is asked",
      run: async () => {
        const w = await world({
          tickets: (call, index) =>
            index === 0
              ? new Promise(() => {})
              : Promise.resolve(validTicket({ controlPlane: call.request.isControlPlane })),
        });
        const outcome = await drive(w.client.run(), w.timers, [INTERVAL, DEADLINE]);
        assert.equal(outcome.status, "joined");
        assert.equal(warnings(w, "join service refused or unreachable")[0].reason, "deadline");
        assert.deepEqual(w.timers.pending, []);
      },
    },
    {
      name: "abort stops retries and pending timers",
      run: async () => {
        const w = await world({ peers: script<InstanceMetadata[]>([]) });
        const controller = new AbortController();
        const running = w.client.run({ signal: controller.signal });
        await until(() => w.timers.pending.includes(INTERVAL));
        controller.abort();
        assert.deepEqual(await running, { status: "stopped" });
        assert.deepEqual(w.timers.pending, []);
        assert.equal(w.os.locks.length, 0);
      },
    },
    {
      name:
        "the applier refuses a ticket as retryable after the abort: stopped, no refusal logged, no next endpoint",
      run: async () => {
        const controller = new AbortController();
        const applied: string[] = [];
        const w = await world({
          applier: {
            apply: (_ticket, node) => {
              applied.push(node.nodeName);
              controller.abort();
              return Promise.reject(new ApplyError("aborted", "aborted before the node lock", false));
            },
          },
        });
        const outcome = await w.client.run({ signal: controller.signal });
        assert.deepEqual(outcome, { status: "stopped" });
        assert.deepEqual(applied, ["worker-1"]);
        assert.deepEqual(
          w.calls.map((c) => c.endpoint),
          ["10.0.0.2:30090"],
          "the next endpoint is not asked",
        );
        assert.deepEqual(warnings(w, "join ticket refused before the node lock"), []);
        assert.equal(w.log.entries().at(-1)?.msg, "join client stopped");
        assert.deepEqual(w.timers.pending, []);
      },
    },
    {
      name: "a worker's ticket: CSR, kubelet key, disk key, node state, kubeadm join, kubelet started",
      run: async () => {
        const w = await world();
        const outcome = await drive(w.client.run(), w.timers, INTERVAL);
        const ticket = validTicket();
        const clusterId = await deriveClusterId(ticket.measurementSecret, ticket.measurementSalt);
        assert.deepEqual(outcome, {
          status: "joined",
          endpoint: "10.0.0.2:30090",
          nodeName: "worker-1",
          role: "Worker",
          clusterId,
        });
        const csr = new x509.Pkcs10CertificateRequest(new Uint8Array(w.calls[0].request.certificateRequest));
        assert.equal(csr.subject, "O=system:nodes, CN=system:node:worker-1");
        const san = new x509.SubjectAlternativeNameExtension(csr.getExtension("2.5.29.17")!.rawData);
        assert.deepEqual(san.names.toJSON(), [{ type: "ip", value: "10.0.0.7" }]);
        assert.equal(w.calls[0].request.diskUuid, DISK_UUID);
        assert.equal(w.calls[0].request.isControlPlane, false);
        // The key file holds the CSR's key, as SEC1 PEM.
        const keyPem = await Deno.readTextFile(w.os.deps.paths.kubeletKey);
        assert.match(keyPem, /^-----BEGIN EC PRIVATE KEY-----/);
        // ECPrivateKey with its curve named (parameters [0] prime256v1), as the original wrote it.
        assert.ok(
          new Uint8Array(x509.PemConverter.decodeFirst(keyPem)).toHex().includes("a00a06082a8648ce3d030107"),
        );
        const key = await importSigningKey(keyPem, "kubelet key");
        const signature = await crypto.subtle.sign(key.signingAlgorithm, key.privateKey, new Uint8Array([1]));
        assert.ok(
          await csr.publicKey.export().then((pub) =>
            crypto.subtle.verify(key.signingAlgorithm, pub, signature, new Uint8Array([1]))
          ),
        );
        assert.equal((await Deno.stat(w.os.deps.paths.kubeletKey)).mode! & 0o777, 0o600);
        assert.deepEqual(await Deno.readFile(w.os.deps.paths.kubeletCert), ticket.kubeletCert);
        assert.deepEqual(w.os.locks, [clusterId]);
        assert.equal(w.os.onLockedCalls, 1);
        assert.deepEqual(w.os.passphrases, [ticket.stateDiskKey]);
        assert.deepEqual(w.os.recordedSalts, [ticket.measurementSalt]);
        assert.deepEqual(JSON.parse(await Deno.readTextFile(w.os.deps.paths.nodeState)), {
          Role: "Worker",
          MeasurementSalt: ticket.measurementSalt.toBase64(),
        });
        assert.deepEqual(w.os.joins, [{
          apiServerEndpoint: "10.0.0.1:6443",
          token: TOKEN,
          caCertHashes: [ticket.discoveryTokenCaCertHash],
          nodeName: "worker-1",
          nodeIp: "10.0.0.7",
          providerId: worker.providerId,
        }]);
        assert.deepEqual(w.os.started, ["kubelet.service"]);
        assert.deepEqual(w.os.nodeStateAtKubeletStart, [false], "the node state is written last");
        assert.deepEqual(await listFiles(`${w.os.root}/etc`), [], "a worker gets no control-plane files");
        assert.ok(!w.log.lines.some((line) => line.includes(TOKEN) || line.includes("BEGIN EC")));
      },
    },
    {
      name:
        "control-plane files written only for a control plane (0600, under pkiDir), with the control-plane join section",
      run: async () => {
        const w = await world({ self: script(controlPlane) });
        assert.equal((await drive(w.client.run(), w.timers, INTERVAL)).status, "joined");
        assert.deepEqual(await listFiles(w.os.deps.paths.pkiDir), [...CONTROL_PLANE_FILE_NAMES].sort());
        for (const name of CONTROL_PLANE_FILE_NAMES) {
          const path = `${w.os.deps.paths.pkiDir}/${name}`;
          assert.equal(await Deno.readTextFile(path), `content of ${name}`);
          assert.equal((await Deno.stat(path)).mode! & 0o777, 0o600);
        }
        assert.deepEqual(w.os.joins[0].controlPlane, { advertiseAddress: "10.0.0.1", bindPort: 6443 });
      },
    },
    {
      name:
        "path-traversal and unknown control-plane file names refused before the lock, then a good ticket joins",
      run: async () => {
        const bad = (name: string) => {
          const ticket = validTicket({ controlPlane: true });
          ticket.controlPlaneFiles[0].name = name;
          return ticket;
        };
        const badTickets = [
          bad("../../../etc/shadow"),
          bad("/etc/kubernetes/pki/ca.key"),
          bad("etcd/../ca.key"),
          bad("extra.key"),
        ];
        const w = await world({
          self: script(controlPlane),
          tickets: (_call, index) =>
            Promise.resolve(badTickets[index] ?? validTicket({ controlPlane: true })),
        });
        assert.equal((await drive(w.client.run(), w.timers, INTERVAL)).status, "joined");
        const refused = warnings(w, "join ticket refused before the node lock");
        assert.deepEqual(refused.map((e) => e.reason), Array(4).fill("invalid-ticket"));
        assert.match(String(refused[0].error), /leaves the PKI directory/);
        assert.match(String(refused[3].error), /not one the join service sends/);
        assert.equal(w.os.locks.length, 1, "the lock was taken only for the good ticket");
        assert.ok(!(await listFiles(w.os.root)).some((f) => f.includes("shadow")));
      },
    },
    {
      name: "a component this node cannot install refused before the lock, then a good ticket joins",
      run: async () => {
        const withComponent = (installPath: string, url = "https://example.com/kubelet") => {
          const ticket = validTicket({});
          ticket.kubernetesComponents = [
            create(ComponentSchema, { url, hash: `sha256:${"ab".repeat(32)}`, installPath, extract: false }),
          ];
          return ticket;
        };
        const badTickets = [
          withComponent("/opt/cni/\u0000x"),
          withComponent("/run/../etc/cron.d/x"),
          withComponent("/run/state/bin/kubelet", "file:///etc/shadow"),
          // Within PATH_MAX alone, not under this node's root.
          withComponent(`/${"a/".repeat(2046)}x`),
        ];
        const w = await world({
          tickets: (_call, index) => Promise.resolve(badTickets[index] ?? validTicket({})),
        });
        assert.equal((await drive(w.client.run(), w.timers, INTERVAL)).status, "joined");
        const refused = warnings(w, "join ticket refused before the node lock");
        assert.deepEqual(refused.map((e) => e.reason), Array(4).fill("invalid-ticket"));
        assert.match(
          String(refused[0].error),
          /invalid join ticket: installing kubernetes component .*control/,
        );
        assert.match(String(refused[2].error), /the URL is not https, http or data/);
        assert.match(String(refused[3].error), /longer than Linux allows/);
        assert.equal(w.os.locks.length, 1, "the lock was taken only for the good ticket");
      },
    },
    {
      name: "a worker's ticket carrying control-plane files is refused",
      run: async () => {
        const w = await world({
          tickets: (_call, index) => Promise.resolve(validTicket({ controlPlane: index === 0 })),
        });
        assert.equal((await drive(w.client.run(), w.timers, INTERVAL)).status, "joined");
        assert.match(
          String(warnings(w, "join ticket refused before the node lock")[0].error),
          /worker's ticket carries 8/,
        );
        assert.deepEqual(await listFiles(`${w.os.root}/etc`), []);
      },
    },
    {
      name: "lock lost to init: terminal 'node is already being initialized', nothing written",
      run: async () => {
        const w = await world({ lock: false });
        const error = await drive(w.client.run(), w.timers, INTERVAL).then(
          () => assert.fail("joined"),
          (e) => e,
        );
        assert.ok(error instanceof ApplyError);
        assert.equal(error.reason, "lock-held");
        assert.equal(error.message, "node is already being initialized");
        assert.equal(w.os.onLockedCalls, 0);
        assert.deepEqual(w.os.passphrases, []);
        assert.deepEqual(w.os.joins, []);
        await assertNoSecretFiles(w.os);
        assert.equal(w.calls.length, 1, "no further ticket is requested");
      },
    },
    {
      name: "marking the node fails: terminal, the init server is stopped, nothing written",
      run: async () => {
        const w = await world({ lock: "tpm2_pcrevent: exit status 1" });
        const error = await drive(w.client.run(), w.timers, INTERVAL).then(
          () => assert.fail("joined"),
          (e) => e,
        );
        assert.ok(error instanceof ApplyError);
        assert.equal(error.reason, "lock-failed");
        assert.equal(error.afterLock, true);
        assert.equal(error.message, "acquiring node lock: tpm2_pcrevent: exit status 1");
        assert.equal(w.os.onLockedCalls, 1);
        assert.deepEqual(w.os.passphrases, []);
        assert.deepEqual(w.os.joins, []);
        await assertNoSecretFiles(w.os);
        assert.equal(w.calls.length, 1, "no further ticket is requested");
      },
    },
    {
      name: "kubeadm join fails twice, then succeeds",
      run: async () => {
        const w = await world({ kubeadmFailures: 2 });
        assert.equal((await drive(w.client.run(), w.timers, [INTERVAL, 5000])).status, "joined");
        assert.equal(w.os.joins.length, 3);
        assert.deepEqual(w.timers.requested.filter((ms) => ms === 5000), [5000, 5000]);
        const retried = warnings(w, "kubeadm join failed; retrying");
        assert.equal(retried.length, 2);
        assert.ok(!w.log.lines.some((line) => line.includes(TOKEN)), "the token is redacted");
        assert.match(String(retried[0].error), /token \[redacted\] rejected/);
        assert.deepEqual(w.os.started, ["kubelet.service"]);
      },
    },
    {
      name:
        "a worker's kubeadm join fails after writing the kubelet's files: they are removed, the retry joins",
      run: async () => {
        const w = await world({ kubeadmLateFailures: 1 });
        assert.equal((await drive(w.client.run(), w.timers, [INTERVAL, 5000])).status, "joined");
        assert.equal(w.os.joins.length, 2);
        const [retried] = warnings(w, "kubeadm join failed; retrying");
        assert.deepEqual(
          retried.removedLeftovers,
          [
            "etc/kubernetes/kubelet.conf",
            "etc/kubernetes/bootstrap-kubelet.conf",
            "etc/kubernetes/pki/ca.crt",
          ]
            .map((path) => `${w.os.root}/${path}`),
        );
        assert.deepEqual(w.os.started, ["kubelet.service"]);
      },
    },
    {
      name:
        "a control plane's kubeadm join fails after writing its manifests: not retried, terminal, first failure named",
      run: async () => {
        const w = await world({ self: script(controlPlane), kubeadmFailures: 1, kubeadmLateFailures: 1 });
        const error = await drive(w.client.run(), w.timers, [INTERVAL, 5000]).then(
          () => assert.fail("joined"),
          (e) => e,
        );
        assert.ok(error instanceof ApplyError);
        assert.equal(error.reason, "kubeadm-join");
        assert.equal(w.os.joins.length, 2, "the attempt that wrote manifests is the last");
        assert.match(
          error.message,
          /kubeadm join failed 2 time\(s\) after writing the control plane's static Pod manifests \(not retried: that needs kubeadm reset\); first: .*token \[redacted\] rejected; last: .*kubelet-start: timed out$/,
        );
        assert.deepEqual(w.os.started, []);
      },
    },
    {
      name:
        "kubeadm join fails three times: terminal, reason given, no secret file left, token in no message",
      run: async () => {
        const w = await world({ self: script(controlPlane), kubeadmFailures: 3 });
        const error = await drive(w.client.run(), w.timers, [INTERVAL, 5000]).then(
          () => assert.fail("joined"),
          (e) => e,
        );
        assert.ok(error instanceof ApplyError);
        assert.equal(error.reason, "kubeadm-join");
        assert.equal(error.afterLock, true);
        assert.match(error.message, /kubeadm join failed 3 time\(s\)/);
        assert.ok(!error.message.includes(TOKEN));
        assert.equal(w.os.joins.length, 3);
        assert.deepEqual(w.os.started, []);
        await assertNoSecretFiles(w.os);
        assert.ok(!w.log.lines.some((line) => line.includes(TOKEN)));
        const last = w.log.entries().at(-1)!;
        assert.equal(last.level, "error");
        assert.equal(last.reason, "kubeadm-join");
        assert.equal(w.calls.length, 1, "no further ticket is requested after the lock");
      },
    },
  ];
  try {
    for (const row of rows) await t.step(row.name, row.run);
  } finally {
    for (const root of roots.splice(0)) await Deno.remove(root, { recursive: true });
  }
});

Deno.test("controlPlaneEndpoints: this node is left out by its name and by its address", async (t) => {
  const self = { metadataName: "cp-1", vpcIp: "10.0.0.1" };
  const cp = (name: string, vpcIp: string): InstanceMetadata => ({
    name,
    providerId: "",
    role: "ControlPlane",
    vpcIp,
  });
  const rows: { name: string; peers: InstanceMetadata[]; want: string[] }[] = [
    { name: "itself", peers: [cp("cp-1", "10.0.0.1"), cp("cp-0", "10.0.0.2")], want: ["10.0.0.2:30090"] },
    {
      name: "its address under another name",
      peers: [cp("cp-1-renamed", "10.0.0.1"), cp("cp-0", "10.0.0.2")],
      want: ["10.0.0.2:30090"],
    },
    {
      name: "its name under another address",
      peers: [cp("cp-0", "10.0.0.2"), cp("cp-1", "10.0.0.9")],
      want: ["10.0.0.2:30090"],
    },
    {
      name: "workers and address-less peers; IPv6 bracketed",
      peers: [{ ...cp("w-0", "10.0.0.5"), role: "Worker" }, cp("cp-2", ""), cp("cp-3", "fd00::3")],
      want: ["[fd00::3]:30090"],
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => assert.deepEqual(controlPlaneEndpoints(row.peers, self), row.want));
  }
});
