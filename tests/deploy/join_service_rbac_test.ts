/**
 * The join service's RBAC in the manifests (deploy/kubernetes/join-service.yaml)
 * is what the real join service process needs, no more: with an API server
 * that allows only what the manifest's Role and ClusterRole grant its
 * ServiceAccount, it issues a worker ticket, a control-plane ticket, refuses
 * a second control plane while the first joins (deleting the token it had
 * made), and replaces a stale control-plane record; no call is refused, and
 * every verb the rules grant was used.
 */
import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";
import { JOIN_SERVICE_API_ACCESS } from "../../src/joinservice/api_access.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../../src/kubernetes/names.ts";
import { rfc3339 } from "../../src/rfc3339.ts";
import { expectConnectError } from "../support/connect_error.ts";
import type { AuthorizationRequest } from "../support/fake_apiserver.ts";
import { OBJECT_PATHS, startJoinCluster } from "../support/join_cluster.ts";
import { allows, grantsOf, loadManifests } from "./manifests.ts";

/** "group/resource verb" of a request or a granted verb. */
const verbOn = (group: string, resource: string, verb: string) => `${group}/${resource} ${verb}`;

Deno.test("the join service process needs exactly the RBAC its manifest grants", async (t) => {
  const objects = (await loadManifests()).map((m) => m.object);
  const grants = grantsOf(objects, KUBE_SYSTEM_NAMESPACE, "join-service");
  const decided: { request: AuthorizationRequest; allowed: boolean }[] = [];
  await using cluster = await startJoinCluster({
    controlPlaneKey: true,
    authorize: (request) => {
      const allowed = allows(grants, request);
      decided.push({ request, allowed });
      return allowed;
    },
  });
  const tokenSecrets = () =>
    decided.filter(({ request: r }) => r.resource === "secrets" && r.verb === "create").length;

  await t.step("a worker ticket", async () => {
    await cluster.requestTicket({ diskUuid: crypto.randomUUID(), nodeName: "worker-1", ips: ["10.0.0.7"] });
    assert.ok(cluster.apiServer.getObject(OBJECT_PATHS.joiningNode("worker-1")), "its JoiningNode");
  });

  await t.step("a control-plane ticket", async () => {
    await cluster.requestTicket({
      diskUuid: crypto.randomUUID(),
      nodeName: "control-plane-1",
      ips: ["10.0.0.2"],
      isControlPlane: true,
    });
    const record = cluster.apiServer.getObject(OBJECT_PATHS.joiningNode("control-plane"));
    assert.equal((record?.spec as { name?: string }).name, "control-plane-1");
  });

  await t.step("a second control plane while the first joins: refused, its token deleted", async () => {
    const created = tokenSecrets();
    await expectConnectError(
      cluster.requestTicket({
        diskUuid: crypto.randomUUID(),
        nodeName: "control-plane-2",
        ips: ["10.0.0.3"],
        isControlPlane: true,
      }),
      Code.Unavailable,
      /control-plane-1.*one at a time/,
    );
    assert.equal(tokenSecrets(), created + 1, "a token was made for it");
    const deletions = decided.filter(({ request: r }) => r.resource === "secrets" && r.verb === "delete");
    assert.equal(deletions.length, 1, "and deleted again");
    assert.equal(
      cluster.apiServer.getObject(OBJECT_PATHS.tokenSecret(deletions[0].request.name!.slice(-6))),
      undefined,
    );
  });

  await t.step("a control plane after a stale record: the record is replaced", async () => {
    const path = OBJECT_PATHS.joiningNode("control-plane");
    const stale = cluster.apiServer.getObject(path)!;
    cluster.apiServer.putObject(path, {
      ...stale,
      spec: { ...(stale.spec as object), deadline: rfc3339(Date.now() - 60_000) },
    });
    await cluster.requestTicket({
      diskUuid: crypto.randomUUID(),
      nodeName: "control-plane-2",
      ips: ["10.0.0.3"],
      isControlPlane: true,
    });
    assert.equal((cluster.apiServer.getObject(path)?.spec as { name?: string }).name, "control-plane-2");
  });

  await t.step("no call was refused, and every granted verb was used", () => {
    assert.deepEqual(decided.filter((d) => !d.allowed).map((d) => d.request), []);
    const used = new Set(decided.map(({ request: r }) => verbOn(r.group, r.resource, r.verb)));
    const granted = new Set(
      JOIN_SERVICE_API_ACCESS.flatMap((a) => a.verbs.map((verb) => verbOn(a.apiGroup, a.resource, verb))),
    );
    assert.deepEqual([...used].sort(), [...granted].sort());
  });
});
