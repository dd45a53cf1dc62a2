/**
 * The join ticket applier's deadline, in real time over fakes of the node:
 * what a step still running when it passes leaves behind; what a kubeadm
 * error quoting the token's secret half leaves in messages; and the
 * control-plane files a ticket may not carry.
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { sleep } from "../../src/async/sleep.ts";
import { ApplyError, checkTicket, JoinTicketApplier } from "../../src/bootstrapper/apply_ticket.ts";
import { writeNodeState } from "../../src/bootstrapper/node_state.ts";
import { systemTimers } from "../../src/bootstrapper/retry.ts";
import { ControlPlaneCertOrKeySchema, type IssueJoinTicketResponse } from "../../src/gen/join/join_pb.ts";
import { CONTROL_PLANE_FILE_NAMES } from "../../src/joinservice/controlplanefiles.ts";
import { fakeOs, listFiles, recordingLogger, TOKEN, validTicket } from "./support.ts";

Deno.test("join apply: a step finishing after the deadline leaves no file behind", async () => {
  const os = await fakeOs({ logger: recordingLogger().logger, timers: systemTimers });
  try {
    // The last step, the node state, outlives the deadline and ignores its signal (as a write past its
    // abort check does): its file lands after the deadline has passed.
    os.deps.writeNodeState = async (path, state) => {
      await sleep(400);
      await writeNodeState(path, state);
    };
    const applier = new JoinTicketApplier(os.deps, { applyTimeoutMs: 200 });
    const error = await applier.apply(validTicket(), {
      metadataName: "worker-1",
      nodeName: "worker-1",
      role: "Worker",
      vpcIp: "10.0.0.7",
      providerId: "",
      kubeletKeyPem: "-----BEGIN EC PRIVATE KEY-----\nfake\n-----END EC PRIVATE KEY-----\n",
    }).then(() => assert.fail("applied"), (e) => e);
    assert.ok(error instanceof ApplyError, String(error));
    assert.equal(error.reason, "timeout");
    assert.equal(error.afterLock, true);
    await sleep(500); // past the late write, wherever the applier stopped waiting
    assert.deepEqual(await listFiles(`${os.root}/run`), [], "no kubelet key, certificate or node state left");
  } finally {
    await Deno.remove(os.root, { recursive: true });
  }
});

const WORKER = {
  metadataName: "worker-1",
  nodeName: "worker-1",
  role: "Worker" as const,
  vpcIp: "10.0.0.7",
  providerId: "",
  kubeletKeyPem: "-----BEGIN EC PRIVATE KEY-----\nfake\n-----END EC PRIVATE KEY-----\n",
};

Deno.test("join apply: a kubeadm error quoting only the token's secret half is redacted in the error and the log", async () => {
  const secretHalf = TOKEN.split(".")[1];
  const log = recordingLogger();
  const os = await fakeOs({ logger: log.logger, timers: systemTimers });
  try {
    os.deps.kubeadm = { join: () => Promise.reject(new Error(`bad ${secretHalf}`)) };
    const applier = new JoinTicketApplier(os.deps, { joinAttempts: 1 });
    const error = await applier.apply(validTicket(), WORKER).then(() => assert.fail("applied"), (e) => e);
    assert.ok(error instanceof ApplyError, String(error));
    assert.equal(error.reason, "kubeadm-join");
    assert.match(error.message, /last: bad \[redacted\]$/);
    assert.ok(!error.message.includes(secretHalf), error.message);
    assert.ok(log.lines.some((line) => line.includes("bad [redacted]")), "the failure is logged");
    assert.deepEqual(log.lines.filter((line) => line.includes(secretHalf)), [], "no line holds the secret");
  } finally {
    await Deno.remove(os.root, { recursive: true });
  }
});

Deno.test("join apply: checkTicket refuses a control plane's empty or repeated file", async (t) => {
  const rows: {
    name: string;
    change: (files: IssueJoinTicketResponse["controlPlaneFiles"]) => void;
    message: RegExp;
  }[] = [
    {
      name: "an empty file",
      change: (files) => files[1].data = new Uint8Array(0),
      message: new RegExp(`control-plane file "${CONTROL_PLANE_FILE_NAMES[1]}" is empty`),
    },
    {
      name: "a file name given twice (every name present)",
      change: (files) =>
        files.push(create(ControlPlaneCertOrKeySchema, { name: files[0].name, data: new Uint8Array([1]) })),
      message: new RegExp(`control-plane file "${CONTROL_PLANE_FILE_NAMES[0]}" appears twice`),
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      const ticket = validTicket({ controlPlane: true });
      assert.equal(
        checkTicket(ticket, "ControlPlane").length,
        CONTROL_PLANE_FILE_NAMES.length,
        "valid as made",
      );
      row.change(ticket.controlPlaneFiles);
      assert.throws(() => checkTicket(ticket, "ControlPlane"), (error) => {
        assert.ok(error instanceof ApplyError, String(error));
        assert.equal(error.reason, "invalid-ticket");
        assert.equal(error.retryable, true);
        assert.equal(error.afterLock, false);
        assert.match(error.message, row.message);
        return true;
      });
    });
  }
});
