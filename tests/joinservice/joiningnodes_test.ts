import assert from "node:assert/strict";
import { KubernetesClient } from "../../src/kubernetes/client.ts";
import { parseKubeconfig, resolveConnection } from "../../src/kubernetes/kubeconfig.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { joiningNodes } from "../../src/joinservice/joiningnodes.ts";
import { startFakeApiServer } from "../support/fake_apiserver.ts";
import { ManualClock } from "../support/manual_clock.ts";

const CONTROL_PLANE_PATH = "/apis/update.edgeless.systems/v1alpha1/joiningnodes/control-plane";
const node = (name: string, isControlPlane: boolean) => ({ name, componentsReference: "c", isControlPlane });

Deno.test("JoiningNodes.release deletes a control plane's record, only the object that attempt wrote", async (t) => {
  await using server = await startFakeApiServer();
  const connection = await resolveConnection(parseKubeconfig(server.kubeconfig()), { baseDir: "/" });
  using client = new KubernetesClient(connection, { retryDelayMs: 10 });
  const records = joiningNodes({ client, clock: new ManualClock(), logger: silentLogger });
  const holder = () => (server.getObject(CONTROL_PLANE_PATH)?.spec as { name?: string } | undefined)?.name;
  const deletes = () => server.requests.filter((r) => r.method === "DELETE").length;

  await t.step("the record of a failed attempt is deleted, so another control plane may join", async () => {
    const recorded = await records.record(node("cp-1", true), {});
    assert.ok(recorded.uid);
    await records.release(recorded, {});
    assert.equal(holder(), undefined);
    await records.record(node("cp-2", true), {});
    assert.equal(holder(), "cp-2");
  });

  await t.step("a record the same node wrote again since is left alone", async () => {
    const first = await records.record(node("cp-3", true), {}).catch(() => undefined);
    assert.equal(first, undefined, "cp-2 holds the record");
    // cp-2 asks again (its first answer was lost): its record is replaced by a new object.
    const older = {
      node: node("cp-2", true),
      uid: String((server.getObject(CONTROL_PLANE_PATH)!.metadata as { uid: string }).uid),
    };
    const newer = await records.record(node("cp-2", true), {});
    assert.notEqual(newer.uid, older.uid);
    await records.release(older, {});
    assert.equal(holder(), "cp-2", "the newer attempt's record stays");
    await records.release(newer, {});
    assert.equal(holder(), undefined);
    await records.release(newer, {}); // gone already: nothing to do, no error
  });

  await t.step("a worker's record stays, and no request is sent", async () => {
    const before = deletes();
    const recorded = await records.record(node("worker-1", false), {});
    await records.release(recorded, {});
    assert.equal(deletes(), before);
    assert.ok(server.getObject("/apis/update.edgeless.systems/v1alpha1/joiningnodes/worker-1"));
  });
});

Deno.test("JoiningNodes.record replaces a stale control-plane record only if no other replica did first", async () => {
  let beforeDelete: (() => void) | undefined;
  await using server = await startFakeApiServer({
    authorize: (request) => {
      if (request.verb === "delete" && request.name === "control-plane") beforeDelete?.();
      return true;
    },
  });
  const connection = await resolveConnection(parseKubeconfig(server.kubeconfig()), { baseDir: "/" });
  using client = new KubernetesClient(connection, { retryDelayMs: 10 });
  const clock = new ManualClock();
  const records = joiningNodes({ client, clock, logger: silentLogger });
  await records.record(node("cp-stale", true), {});
  clock.advance(11 * 60_000); // its 10-minute deadline passed

  // Another replica replaces the stale record between this one's read and its delete.
  beforeDelete = () => {
    beforeDelete = undefined;
    server.deleteObject(CONTROL_PLANE_PATH);
    server.putObject(CONTROL_PLANE_PATH, {
      apiVersion: "update.edgeless.systems/v1alpha1",
      kind: "JoiningNode",
      metadata: { name: "control-plane" },
      spec: {
        name: "cp-other",
        componentsreference: "c",
        iscontrolplane: true,
        deadline: "2099-01-01T00:00:00Z",
      },
    });
  };
  await assert.rejects(
    records.record(node("cp-new", true), {}),
    /cp-other.*control planes join one at a time/,
  );
  assert.equal(
    (server.getObject(CONTROL_PLANE_PATH)?.spec as { name: string }).name,
    "cp-other",
    "the other replica's fresh record stays",
  );
});

/** A fresh control-plane record of `holder`, as another replica would write it. */
function freshRecord(holder: string) {
  return {
    apiVersion: "update.edgeless.systems/v1alpha1",
    kind: "JoiningNode",
    metadata: { name: "control-plane" },
    spec: { name: holder, componentsreference: "c", iscontrolplane: true, deadline: "2099-01-01T00:00:00Z" },
  };
}

Deno.test("JoiningNodes.record: a record that changes between the calls of one attempt", async (t) => {
  let before: ((request: { verb: string; name?: string }) => void) | undefined;
  await using server = await startFakeApiServer({
    authorize: (request) => {
      if (request.name === "control-plane") before?.(request);
      return true;
    },
  });
  const connection = await resolveConnection(parseKubeconfig(server.kubeconfig()), { baseDir: "/" });
  using client = new KubernetesClient(connection, { retryDelayMs: 10 });
  const clock = new ManualClock();
  const records = joiningNodes({ client, clock, logger: silentLogger });
  const holder = () => (server.getObject(CONTROL_PLANE_PATH)?.spec as { name?: string } | undefined)?.name;

  await t.step(
    "gone before it is read (its node finished): the next control plane records itself",
    async () => {
      const first = await records.record(node("cp-1", true), {});
      before = ({ verb }) => {
        if (verb !== "get") return;
        before = undefined;
        server.deleteObject(CONTROL_PLANE_PATH); // cp-1 released its record between the create and the read
      };
      const second = await records.record(node("cp-2", true), {});
      assert.equal(holder(), "cp-2");
      assert.ok(second.uid);
      assert.notEqual(second.uid, first.uid);
      await records.release(second, {});
    },
  );

  await t.step(
    "stale, then replaced by another attempt of the same node: that attempt's record holds",
    async () => {
      await records.record(node("cp-stale", true), {});
      clock.advance(11 * 60_000); // its 10-minute deadline passed
      let uid: string | undefined;
      before = ({ verb }) => {
        if (verb !== "delete") return;
        before = undefined;
        // cp-3 asked another replica too, which replaced the stale record first.
        server.deleteObject(CONTROL_PLANE_PATH);
        server.putObject(CONTROL_PLANE_PATH, freshRecord("cp-3"));
        uid = (server.getObject(CONTROL_PLANE_PATH)?.metadata as { uid?: string } | undefined)?.uid;
      };
      await assert.rejects(
        records.record(node("cp-3", true), {}),
        /control-plane node "cp-3" is joining until 2099-01-01T00:00:00Z; control planes join one at a time/,
      );
      assert.equal(typeof uid, "string", "the fixture record has a uid");
      assert.equal(
        (server.getObject(CONTROL_PLANE_PATH)?.metadata as { uid?: string } | undefined)?.uid,
        uid,
        "the other attempt's record was replaced",
      );
    },
  );
});
