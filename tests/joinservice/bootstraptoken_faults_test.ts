/**
 * The join service's bootstrap tokens when the API server fails them: the
 * real Kubernetes client against the local API behind the fault proxy
 * (`tests/support/api_fault_proxy.ts`). A create whose answer is lost, or
 * whose caller gives up mid-request, or that the server failed, is undone
 * (deleted by name: the join service may not read kube-system's Secrets); a
 * cleanup delete rides out server errors.
 */
import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";
import { JoinService } from "../../src/joinservice/service.ts";
import { bootstrapTokens, bootstrapTokenSecretName } from "../../src/joinservice/bootstraptoken.ts";
import { KubernetesClient } from "../../src/kubernetes/client.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../../src/kubernetes/names.ts";
import { Rejection } from "../../src/rpc/rejection.ts";
import { systemClock } from "../../src/clock.ts";
import { type ApiFaultProxy, startApiFaultProxy } from "../support/api_fault_proxy.ts";
import { type FakeApiServer, startFakeApiServer } from "../support/fake_apiserver.ts";
import { issueLoopbackServerCert } from "../support/pki.ts";
import { expectConnectError } from "../support/connect_error.ts";
import { fakeContext, fakeDependencies, fakeJoinRequest } from "../support/join_fakes.ts";

const secretPath = (name: string) => `/api/v1/namespaces/${KUBE_SYSTEM_NAMESPACE}/secrets/${name}`;
/** The Secret a token error names ("… secret kube-system/bootstrap-token-<id>: …"). */
const NAMED_SECRET = /kube-system\/(bootstrap-token-[a-z0-9]{6})/;

async function withProxiedApi(
  fn: (setup: { api: FakeApiServer; proxy: ApiFaultProxy; client: KubernetesClient }) => Promise<void>,
) {
  await using api = await startFakeApiServer();
  await using proxy = startApiFaultProxy({
    upstream: api.url,
    upstreamCaPem: api.caPem,
    clientCert: { certPem: api.clientCertPem, keyPem: api.clientKeyPem },
    serverCert: await issueLoopbackServerCert(api.ca, "CN=fault-proxy"),
  });
  using client = new KubernetesClient(
    { server: proxy.url, caPem: api.caPem, namespace: "default" },
    { timeoutMs: 1_000 },
  );
  await fn({ api, proxy, client });
}

/** The names of the Secrets in kube-system, listed straight from the API. */
async function secretNames(api: FakeApiServer): Promise<string[]> {
  using http = Deno.createHttpClient({
    caCerts: [api.caPem],
    cert: api.clientCertPem,
    key: api.clientKeyPem,
  });
  const response = await fetch(`${api.url}/api/v1/namespaces/${KUBE_SYSTEM_NAMESPACE}/secrets`, {
    client: http,
  });
  const list = await response.json() as { items: { metadata: { name: string } }[] };
  return list.items.map((secret) => secret.metadata.name);
}

async function rejection(call: Promise<unknown>): Promise<unknown> {
  return await call.then(() => assert.fail("want a rejection"), (error: unknown) => error);
}

Deno.test("a token create whose answer is lost is deleted again: no token waits for its TTL", async () => {
  await withProxiedApi(async ({ api, proxy, client }) => {
    proxy.inject({ fault: "hang-after-write", methods: ["POST"], times: 1 });
    const error = await rejection(bootstrapTokens({ client, clock: systemClock }).create({}));
    assert.ok(error instanceof Rejection, String(error));
    assert.equal(error.reason, "api-server-unavailable");
    const name = NAMED_SECRET.exec(error.message)?.[1];
    assert.ok(name, error.message);
    assert.equal(proxy.counts["hang-after-write"], 1, "the create reached the API server");
    assert.equal(api.getObject(secretPath(name)), undefined, `${name} is left in the API`);
  });
});

Deno.test("a token create the node gives up on mid-request is deleted again", async () => {
  await withProxiedApi(async ({ api, proxy, client }) => {
    proxy.inject({ fault: "hang-after-write", methods: ["POST"], times: 1 });
    const gone = new AbortController();
    const outcome = rejection(
      bootstrapTokens({ client, clock: systemClock }).create({ signal: gone.signal }),
    );
    // The node leaves once the create took effect and its answer hangs: on that event, not after a guess.
    let settled = false;
    outcome.finally(() => settled = true);
    while (proxy.hanging === 0 && !settled) await new Promise((resolve) => setTimeout(resolve, 5));
    gone.abort(new DOMException("the node disconnected", "AbortError"));
    const error = await outcome;
    assert.ok(error instanceof DOMException && error.name === "AbortError", String(error));
    assert.equal(proxy.counts["hang-after-write"], 1);
    assert.deepEqual(await secretNames(api), [], "a token is left in the API");
  });
});

Deno.test("a token create answered 500 is undone by name: a 500 may have stored it, a missing Secret is fine", async () => {
  await withProxiedApi(async ({ api, proxy, client }) => {
    proxy.inject({ fault: "error-500", methods: ["POST"], times: 1 });
    const error = await rejection(bootstrapTokens({ client, clock: systemClock }).create({}));
    assert.ok(error instanceof Rejection, String(error));
    assert.equal(error.reason, "api-server-unavailable");
    // Only the undo reached the API server: a DELETE, answered NotFound (nothing was stored).
    assert.deepEqual(api.requests.map((r) => [r.method, r.status]), [["DELETE", 404]]);
  });
});

Deno.test("deleting an unused token rides out API server errors", async () => {
  await withProxiedApi(async ({ api, proxy, client }) => {
    const tokens = bootstrapTokens({ client, clock: systemClock });
    const { tokenId } = await tokens.create({});
    proxy.inject({ fault: "error-500", methods: ["DELETE"], times: 2 });
    await tokens.delete(tokenId, {});
    assert.equal(proxy.counts["error-500"], 2);
    assert.equal(api.getObject(secretPath(bootstrapTokenSecretName(tokenId))), undefined);
  });
});

Deno.test("deleting a token whose Secret is gone already is done: one DELETE, answered 404, no warning", async (t) => {
  await t.step("the delete resolves, without a retry", async () => {
    await withProxiedApi(async ({ api, client }) => {
      const tokens = bootstrapTokens({ client, clock: systemClock });
      const { tokenId } = await tokens.create({});
      // The API server's token cleaner (or another replica) got there first.
      assert.ok(api.deleteObject(secretPath(bootstrapTokenSecretName(tokenId))));
      const before = api.requests.length;
      await tokens.delete(tokenId, {});
      assert.deepEqual(api.requests.slice(before).map((r) => [r.method, r.status]), [["DELETE", 404]]);
    });
  });
  await t.step("a failed ticket's cleanup of such a token logs no warning", async () => {
    await withProxiedApi(async ({ api, client }) => {
      const tokens = bootstrapTokens({ client, clock: systemClock });
      const deleted: string[] = [];
      const world = fakeDependencies({
        sealFails: true,
        tokens: {
          create: async (options) => {
            const created = await tokens.create(options);
            api.deleteObject(secretPath(bootstrapTokenSecretName(created.tokenId)));
            return created;
          },
          delete: async (tokenId, options) => {
            await tokens.delete(tokenId, options);
            deleted.push(tokenId);
          },
        },
      });
      const service = new JoinService(world.deps).handlers();
      await expectConnectError(
        Promise.resolve(service.issueJoinTicket(fakeJoinRequest(), fakeContext())),
        Code.InvalidArgument,
      );
      assert.equal(world.audit[0].reason, "seal-failed");
      assert.deepEqual(world.logs.filter((line) => line.level === "warn"), []);
      assert.equal(deleted.length, 1, "the token's delete resolved");
    });
  });
});
