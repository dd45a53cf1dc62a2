/**
 * The real join service process while its dependencies fail: the key
 * service stopped (before and after the nonce key was fetched) and the API
 * server down or refusing one call. Tickets fail with a code a node retries
 * on, the service keeps running, recovers by itself, and leaves no
 * half-created state behind.
 */
import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { bootstrapTokenSecretName } from "../../src/joinservice/bootstraptoken.ts";
import type { AuthorizationRequest } from "../support/fake_apiserver.ts";
import {
  type JoinCluster,
  OBJECT_PATHS,
  startJoinCluster,
  type TicketRequestOptions,
} from "../support/join_cluster.ts";
import { expectConnectError } from "../support/connect_error.ts";

/** The random part of a bootstrap token Secret's path. */
const TOKEN_ID = new RegExp(`(?<=/${bootstrapTokenSecretName("")})[a-z0-9]{6}$`);

/** The API server calls since `from` that change something (anything but GET). */
function writesSince(cluster: JoinCluster, from: number): [string, string, number][] {
  return cluster.apiServer.requests.slice(from).filter((r) => r.method !== "GET").map((r) => [
    r.method,
    r.path,
    r.status,
  ]);
}

/**
 * A TCP proxy to 127.0.0.1:`port` that holds every chunk the key service
 * sends back for `delayMs` (in order): a slow key service, for every call,
 * also on the one connection its client keeps.
 */
function startDelayingProxy(port: number, delayMs: number): { port: number } & AsyncDisposable {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const connections = new Set<Deno.Conn>();
  const closing = new AbortController();
  const later = () =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, delayMs);
      closing.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        resolve();
      }, { once: true });
    });
  const relay = async (downstream: Deno.Conn) => {
    connections.add(downstream);
    const upstream = await Deno.connect({ hostname: "127.0.0.1", port });
    connections.add(upstream);
    const delayed = new TransformStream<Uint8Array, Uint8Array>({
      async transform(chunk, controller) {
        await later();
        controller.enqueue(chunk);
      },
    });
    await Promise.all([
      downstream.readable.pipeTo(upstream.writable).catch(() => {}),
      upstream.readable.pipeThrough(delayed).pipeTo(downstream.writable).catch(() => {}),
    ]);
  };
  const accepting = (async () => {
    for await (const connection of listener) relay(connection).catch(() => {});
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    async [Symbol.asyncDispose]() {
      listener.close();
      closing.abort();
      await accepting;
      for (const connection of connections) {
        try {
          connection.close();
        } catch {
          // Already closed by its peer.
        }
      }
    },
  };
}

/** An Ed25519 SSH host public key in SSH wire format. */
async function sshHostKey(): Promise<Uint8Array> {
  const keys = await crypto.subtle.generateKey("Ed25519", true, ["sign", "verify"]) as CryptoKeyPair;
  const raw = new Uint8Array(await crypto.subtle.exportKey("raw", keys.publicKey));
  const type = new TextEncoder().encode("ssh-ed25519");
  const wire = new Uint8Array(4 + type.length + 4 + raw.length);
  const view = new DataView(wire.buffer);
  view.setUint32(0, type.length);
  wire.set(type, 4);
  view.setUint32(4 + type.length, raw.length);
  wire.set(raw, 8 + type.length);
  return wire;
}

/** Requests a worker ticket for a fresh disk. */
/** Calls `fn` again while it fails with Unavailable, as a node does, for at most 5 s. */
async function retryWhileUnavailable<T>(fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + 5000;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (!(e instanceof ConnectError && e.code === Code.Unavailable) || Date.now() > deadline) throw e;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

function requestTicket(cluster: JoinCluster, options: Partial<TicketRequestOptions> = {}) {
  return cluster.requestTicket({ diskUuid: crypto.randomUUID(), nodeName: "worker-1", ...options });
}

Deno.test("the join service process survives outages of the key service and the API server", async (t) => {
  // Lets a test make single API calls fail; everything is allowed otherwise.
  let refuse: (request: AuthorizationRequest) => boolean = () => false;
  await using cluster = await startJoinCluster({
    authorize: (request) => !refuse(request),
    controlPlaneKey: true,
  });
  const { client } = cluster.joinService;

  await t.step(
    "key service down: tickets are Unavailable, the service keeps running and recovers",
    async () => {
      await requestTicket(cluster); // the nonce key is fetched and cached
      await cluster.keyService.stop();
      try {
        const requests = cluster.apiServer.requests.length;
        const keyServiceDown = /^getting (measurement secret|state disk key): .*ECONNREFUSED/;
        await expectConnectError(requestTicket(cluster), Code.Unavailable, keyServiceDown);
        await expectConnectError(
          cluster.requestRejoinTicket(crypto.randomUUID()),
          Code.Unavailable,
          keyServiceDown,
        );
        assert.deepEqual(writesSince(cluster, requests), [], "nothing was written to the API server");
        assert.equal((await client.getStatus({})).attestationVariant, "qemu-vtpm");
      } finally {
        await cluster.keyService.start(); // on the same port
      }
      const { ticket } = await requestTicket(cluster);
      const diskUuid = crypto.randomUUID();
      const rejoin = await cluster.requestRejoinTicket(diskUuid);
      assert.deepEqual(rejoin.stateDiskKey, (await cluster.expectedKeys(diskUuid)).stateDiskKey);
      assert.equal(ticket.measurementSecret.length, 32);
    },
  );

  await t.step("key service down from the start: challenges are Unavailable until it is up", async () => {
    await cluster.keyService.stop();
    const late = await cluster.startJoinService();
    try {
      try {
        await expectConnectError(
          late.client.getChallenge({}),
          Code.Unavailable,
          /^nonce key unavailable from the key service; retry later$/,
        );
        assert.equal((await late.client.getStatus({})).attestationVariant, "qemu-vtpm");
      } finally {
        await cluster.keyService.start();
      }
      // A node retries on Unavailable; the service answers a failed fetch from memory for a moment.
      await retryWhileUnavailable(() => late.client.getChallenge({}));
      const diskUuid = crypto.randomUUID();
      const { ticket } = await requestTicket(cluster, { diskUuid, service: late });
      assert.deepEqual(ticket.stateDiskKey, (await cluster.expectedKeys(diskUuid)).stateDiskKey);
    } finally {
      assert.equal((await late.stop()).code, 0);
    }
  });

  await t.step("API server down: Unavailable, and tickets again once it is back", async () => {
    await cluster.apiServer.setDown(true);
    try {
      await expectConnectError(
        requestTicket(cluster),
        Code.Unavailable,
        // The first call that fails: the NodeVersion read, unless one from the last second is still kept.
        /^(getting components|creating bootstrap token): API server unavailable/,
      );
      assert.equal((await client.getStatus({})).attestationVariant, "qemu-vtpm");
    } finally {
      await cluster.apiServer.setDown(false);
    }
    const { ticket } = await requestTicket(cluster, { nodeName: "worker-after-outage" });
    assert.ok(cluster.apiServer.getObject(OBJECT_PATHS.tokenSecret(ticket.token.split(".")[0])));
  });

  await t.step(
    "the JoiningNode call fails: the token Secret created before it is deleted again",
    async () => {
      refuse = (request) => request.resource === "joiningnodes";
      const requests = cluster.apiServer.requests.length;
      try {
        await expectConnectError(
          requestTicket(cluster, { nodeName: "worker-refused" }),
          Code.Internal,
          /^recording joining node: .*forbidden/,
        );
      } finally {
        refuse = () => false;
      }
      const writes = writesSince(cluster, requests);
      assert.deepEqual(
        writes.map(([method, path, status]) => [method, path.replace(TOKEN_ID, "<id>"), status]),
        [
          ["POST", OBJECT_PATHS.secrets, 201],
          ["PATCH", OBJECT_PATHS.joiningNode("worker-refused"), 403],
          ["DELETE", OBJECT_PATHS.tokenSecret("<id>"), 200],
        ],
      );
      assert.equal(cluster.apiServer.getObject(writes[2][1]), undefined, "the token Secret is gone");
      assert.equal(cluster.apiServer.getObject(OBJECT_PATHS.joiningNode("worker-refused")), undefined);

      const { ticket } = await requestTicket(cluster, { nodeName: "worker-refused" });
      assert.ok(cluster.apiServer.getObject(OBJECT_PATHS.joiningNode("worker-refused")));
      assert.match(ticket.token, /^[a-z0-9]{6}\.[a-z0-9]{16}$/);
    },
  );

  await t.step("a second control plane while one is joining: Unavailable, its token deleted", async () => {
    await requestTicket(cluster, { nodeName: "control-plane-1", isControlPlane: true });
    const requests = cluster.apiServer.requests.length;
    await expectConnectError(
      requestTicket(cluster, { nodeName: "control-plane-2", isControlPlane: true }),
      Code.Unavailable,
      /control planes join one at a time, retry later/,
    );
    const writes = writesSince(cluster, requests);
    assert.deepEqual(writes.map(([method, , status]) => [method, status]), [
      ["POST", 201],
      ["POST", 409],
      ["DELETE", 200],
    ]);
    assert.equal(cluster.apiServer.getObject(writes[2][1]), undefined, "the token Secret is gone");
    const joining = cluster.apiServer.getObject(OBJECT_PATHS.joiningNode("control-plane"));
    assert.equal((joining?.spec as { name?: string }).name, "control-plane-1");
  });

  await t.step("a node that gives up does not fail the others waiting for the same key", async () => {
    // Every key service answer takes 700 ms; the first caller's deadline runs out while it waits.
    await using proxy = startDelayingProxy(cluster.keyService.port, 700);
    const slow = await cluster.startJoinService({
      flags: ["--key-service-endpoint", `127.0.0.1:${proxy.port}`],
    });
    try {
      const later = () => new Promise((resolve) => setTimeout(resolve, 50));
      // The nonce key, fetched on the first challenge.
      const impatientChallenge = slow.client.getChallenge({}, { timeoutMs: 200 });
      await later();
      const patientChallenge = slow.client.getChallenge({});
      await expectConnectError(impatientChallenge, Code.DeadlineExceeded, /timed out/);
      assert.equal((await patientChallenge).nonce.length > 0, true);

      // The measurement secret and the SSH CA, fetched on the first ticket.
      const publicKey = await sshHostKey();
      const impatient = await cluster.prepareJoinRequest({
        diskUuid: crypto.randomUUID(),
        nodeName: "worker-impatient",
        hostKey: { publicKey, principals: ["worker-impatient"] },
        service: slow,
      });
      const patient = await cluster.prepareJoinRequest({
        diskUuid: crypto.randomUUID(),
        nodeName: "worker-patient",
        hostKey: { publicKey, principals: ["worker-patient"] },
        service: slow,
      });
      const impatientTicket = slow.client.issueJoinTicket(impatient.request, { timeoutMs: 300 });
      await later();
      const patientTicket = slow.client.issueJoinTicket(patient.request);
      await expectConnectError(impatientTicket, Code.DeadlineExceeded, /timed out/);
      const ticket = await cluster.openJoinTicket(await patientTicket, patient.bundle);
      const expected = await cluster.expectedKeys(patient.request.diskUuid);
      assert.deepEqual(ticket.measurementSecret, expected.measurementSecret);
      assert.ok(ticket.hostCertificate.length > 0);
    } finally {
      assert.equal((await slow.stop()).code, 0);
    }
  });
});
