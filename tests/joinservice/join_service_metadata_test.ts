/**
 * The join service finding the API server endpoint it hands to nodes through
 * a QEMU-style metadata API (`--metadata-url`, `GET /self` → `VPCIP`).
 */
import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";
import { startJoinCluster } from "../support/join_cluster.ts";
import { expectConnectError } from "../support/connect_error.ts";

Deno.test("the join service hands nodes <VPCIP of the metadata API's /self>:6443", async (t) => {
  let up = true;
  let selfRequests = 0;
  const metadata = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    if (new URL(request.url).pathname !== "/self") return new Response("not found", { status: 404 });
    selfRequests++;
    if (!up) return new Response("unavailable", { status: 503 });
    return Response.json({ Name: "control-plane-0", Role: "ControlPlane", VPCIP: "10.42.1.2", PublicIP: "" });
  });
  await using cluster = await startJoinCluster();
  try {
    const metadataUrl = `http://127.0.0.1:${metadata.addr.port}`;

    await t.step("metadata API down: Unavailable, the service keeps running", async () => {
      up = false;
      const service = await cluster.startJoinService({ flags: ["--metadata-url", metadataUrl] });
      await expectConnectError(
        cluster.requestTicket({ diskUuid: crypto.randomUUID(), nodeName: "worker-md", service }),
        Code.Unavailable,
        /metadata API .* answered 503/,
      );
      up = true;
      const { ticket } = await cluster.requestTicket({
        diskUuid: crypto.randomUUID(),
        nodeName: "worker-md",
        service,
      });
      assert.equal(ticket.apiServerEndpoint, "10.42.1.2:6443");
    });

    await t.step("the endpoint is asked once and kept", async () => {
      const asked = selfRequests;
      const service = await cluster.startJoinService({ flags: ["--metadata-url", metadataUrl] });
      for (const nodeName of ["worker-md-1", "worker-md-2"]) {
        const { ticket } = await cluster.requestTicket({ diskUuid: crypto.randomUUID(), nodeName, service });
        assert.equal(ticket.apiServerEndpoint, "10.42.1.2:6443");
      }
      assert.equal(selfRequests - asked, 1);
    });
  } finally {
    await metadata.shutdown();
  }
});
