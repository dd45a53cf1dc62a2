/**
 * Init and join racing for the node lock while the winner's PCR 15 marking
 * runs: the real NodeLock, InitServer, JoinClient, JoinTicketApplier and
 * runBootstrapper, with only the OS effects (TPM, disk, kubeadm) faked. The
 * loser hears "taken" at once, before the winner's marking ends; the
 * bootstrapper must already know who won by then, or it takes the loser's end
 * for a bug and stops the winner.
 */
import assert from "node:assert/strict";
import { createRouterTransport } from "@connectrpc/connect";
import { API } from "../../src/gen/init/init_pb.ts";
import { initCluster } from "../../src/init/client.ts";
import { InitServer } from "../../src/bootstrapper/initserver.ts";
import { JoinClient } from "../../src/bootstrapper/joinclient.ts";
import { JoinTicketApplier } from "../../src/bootstrapper/apply_ticket.ts";
import { NodeLock } from "../../src/bootstrapper/nodelock.ts";
import { systemTimers } from "../../src/bootstrapper/retry.ts";
import { runBootstrapper } from "../../src/bootstrapper/run.ts";
import { fakeInitDependencies, initParameters } from "../support/init_fakes.ts";
import { fakeOs, recordingLogger, validTicket } from "./support.ts";

const MARKING_MS = 200;

/** A node whose marking takes {@linkcode MARKING_MS}, its bootstrapper running; `ticket` gates the join ticket. */
async function node(ticket: Promise<void>) {
  const log = recordingLogger();
  const marks: string[] = [];
  const marking = Promise.withResolvers<void>();
  const lock = new NodeLock({
    mark: async (clusterId) => {
      marks.push(clusterId.toHex());
      marking.resolve();
      await new Promise((resolve) => setTimeout(resolve, MARKING_MS));
    },
  });
  const os = await fakeOs({ logger: log.logger, timers: systemTimers });
  const initWorld = fakeInitDependencies();
  const server = Promise.withResolvers<InitServer>();
  const exit = runBootstrapper({
    logger: log.logger,
    binding: { isBound: () => Promise.resolve(false) },
    nodeState: { check: () => Promise.resolve() },
    kubelet: { startKubelet: () => Promise.resolve() },
    startInitServer: (hooks) => {
      const initServer = new InitServer({
        ...initWorld.deps,
        lock,
        onLocked: hooks.onLocked,
        logger: log.logger,
      });
      server.resolve(initServer);
      return Promise.resolve({
        finished: initServer.outcome.then((o) =>
          o.ok ? { ok: true } : { ok: false, error: new Error(o.error) }
        ),
        stop: () => {
          initServer.stopAccepting();
          initServer.close();
          return Promise.resolve();
        },
      });
    },
    runJoinClient: async (hooks, { signal }) => {
      const applier = new JoinTicketApplier({
        ...os.deps,
        lock,
        onLocked: hooks.onLocked,
        timers: systemTimers,
      });
      const client = new JoinClient({
        metadata: {
          self: () => Promise.resolve({ name: "node-1", providerId: "", role: "Worker", vpcIp: "10.0.0.5" }),
          peers: () =>
            Promise.resolve([{ name: "cp-0", providerId: "", role: "ControlPlane", vpcIp: "10.0.0.1" }]),
        },
        tickets: {
          joinTicket: async () => {
            await ticket;
            return validTicket();
          },
        },
        disk: { uuid: () => Promise.resolve("0123abcd-0000-4000-8000-00000000cafe") },
        applier,
        logger: log.logger,
      }, { retryIntervalMs: 50, callTimeoutMs: 5_000, firstEndpoint: () => 0 });
      const outcome = await client.run({ signal });
      if (outcome.status !== "joined") throw signal.reason ?? new Error("join client stopped");
    },
  });
  const initServer = await server.promise;
  const transport = createRouterTransport((router) => router.service(API, initServer.handlers()));
  const init = () =>
    initCluster(initParameters(), {
      transport,
      validator: initWorld.validator,
      controlPlanes: initWorld.controlPlanes,
    })
      .then(() => "initialized", (error: Error) => error.message);
  const infoLines = () =>
    log.entries().filter((entry) => entry.level !== "debug").map((entry) => `${entry.level}: ${entry.msg}`);
  return { exit, init, marks, marking: marking.promise, os, infoLines };
}

Deno.test("lock race: a join ticket that arrives while the winning Init marks PCR 15 loses; the Init completes", async () => {
  const ticket = Promise.withResolvers<void>();
  const n = await node(ticket.promise);
  try {
    const init = n.init();
    await n.marking;
    ticket.resolve(); // the join side asks for the lock now, and hears at once that it is taken
    assert.equal(await n.exit, 0, n.infoLines().join("\n"));
    assert.equal(await init, "initialized");
    assert.equal(n.marks.length, 1);
    assert.ok(n.infoLines().includes("info: init done; bootstrapper done"), n.infoLines().join("\n"));
    assert.equal(n.os.joins.length, 0, "the join side never ran kubeadm join");
  } finally {
    await Deno.remove(n.os.root, { recursive: true });
  }
});

Deno.test("lock race: an Init that arrives while the winning join marks PCR 15 is refused; the join completes", async () => {
  const n = await node(Promise.resolve());
  try {
    await n.marking;
    // The join told the bootstrapper when it took the lock, so the init server already stops; the operator
    // learns why this node cannot be initialized, not to retry it.
    assert.match(
      await n.init(),
      /the node refused to initialize: node is already being activated: it is joining/,
    );
    assert.equal(await n.exit, 0, n.infoLines().join("\n"));
    assert.equal(n.marks.length, 1);
    assert.ok(n.infoLines().includes("info: join done; bootstrapper done"), n.infoLines().join("\n"));
    assert.equal(n.os.joins.length, 1);
  } finally {
    await Deno.remove(n.os.root, { recursive: true });
  }
});
