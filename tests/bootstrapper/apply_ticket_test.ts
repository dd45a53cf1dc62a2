/**
 * The join ticket applier's deadline, in real time over fakes of the node:
 * what a step still running when it passes leaves behind.
 */
import assert from "node:assert/strict";
import { sleep } from "../../src/async/sleep.ts";
import { ApplyError, JoinTicketApplier } from "../../src/bootstrapper/apply_ticket.ts";
import { writeNodeState } from "../../src/bootstrapper/node_state.ts";
import { systemTimers } from "../../src/bootstrapper/retry.ts";
import { fakeOs, listFiles, recordingLogger, validTicket } from "./support.ts";

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
