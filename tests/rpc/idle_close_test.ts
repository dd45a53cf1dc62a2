/**
 * closeWhenIdle over fakes of a `node:http2` session, its socket and its
 * streams, on real timers: GOAWAY after the idle time, the socket destroyed
 * a grace period later, and never under a stream that is still open.
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { closeWhenIdle } from "../../src/rpc/idle_close.ts";

const IDLE_MS = 20;
const GRACE_MS = 60;

class FakeSession extends EventEmitter {
  closed = false;
  destroyed = false;
  close() {
    this.closed = true;
  }
}

class FakeSocket extends EventEmitter {
  destroyed = false;
  destroy() {
    this.destroyed = true;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `done()` (a positive outcome: timers only ever fire late), for up to 5 s. */
async function until(done: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!done()) {
    if (Date.now() > deadline) assert.fail(`${what} did not happen`);
    await sleep(5);
  }
}

function watched() {
  const session = new FakeSession();
  const socket = new FakeSocket();
  closeWhenIdle(session, socket, { idleMs: IDLE_MS, graceMs: GRACE_MS });
  const openStream = () => {
    const stream = new EventEmitter();
    session.emit("stream", stream);
    return () => stream.emit("close");
  };
  return { session, socket, openStream };
}

Deno.test("closeWhenIdle", async (t) => {
  await t.step("an idle session gets GOAWAY, and its socket is destroyed a grace period later", async () => {
    const { session, socket } = watched();
    await until(() => session.closed, "GOAWAY");
    assert.equal(socket.destroyed, false, "destroyed together with the GOAWAY");
    await until(() => socket.destroyed, "the socket's destruction");
  });

  await t.step("an open stream keeps the session; the idle time counts from its close", async () => {
    const { session, socket, openStream } = watched();
    const close = openStream();
    await sleep(IDLE_MS * 5);
    assert.equal(session.closed, false, "GOAWAY with a stream open");
    close();
    await until(() => session.closed, "GOAWAY after the stream closed");
    socket.emit("close"); // the peer goes: no timer outlives the step
  });

  await t.step(
    "a stream accepted after the GOAWAY runs to its end; the grace starts when it closes",
    async () => {
      const { session, socket, openStream } = watched();
      await until(() => session.closed, "GOAWAY");
      const close = openStream(); // its headers arrived in the read the GOAWAY was sent in
      await sleep(GRACE_MS * 4);
      assert.equal(socket.destroyed, false, "the socket was destroyed under an open stream");
      close();
      await until(() => socket.destroyed, "the socket's destruction after the last stream");
    },
  );

  await t.step(
    "a stream the peer resets after the GOAWAY (session destroyed): the socket still goes",
    async () => {
      const { session, socket, openStream } = watched();
      await until(() => session.closed, "GOAWAY");
      const reset = openStream();
      session.destroyed = true; // Deno's session is gone when a reset closes its last stream
      reset();
      await until(() => socket.destroyed, "the socket's destruction");
    },
  );

  await t.step("a socket the peer closed stops both timers", async () => {
    const { session, socket } = watched();
    socket.emit("close");
    await sleep(IDLE_MS * 5);
    assert.equal(session.closed, false);
    assert.equal(socket.destroyed, false);
  });
});
