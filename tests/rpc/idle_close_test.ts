/**
 * closeWhenIdle over fakes of a `node:http2` session, its socket and its
 * streams, on real timers: GOAWAY after the idle time, the socket destroyed
 * a grace period later, and never under a stream that is still open. Timers
 * only fire late, so the checks compare when things happened (recorded by
 * the fakes) rather than what a poll sees at some moment.
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { closeWhenIdle } from "../../src/rpc/idle_close.ts";

const IDLE_MS = 20;
const GRACE_MS = 60;

class FakeSession extends EventEmitter {
  closed = false;
  destroyed = false;
  closedAt = NaN;
  /** Runs when the GOAWAY goes out, as a read processed right after it would. */
  afterClose?: () => void;
  close() {
    this.closed = true;
    this.closedAt = performance.now();
    if (this.afterClose) queueMicrotask(this.afterClose);
  }
}

class FakeSocket extends EventEmitter {
  destroyed = false;
  destroyedAt = NaN;
  destroy() {
    this.destroyed = true;
    this.destroyedAt = performance.now();
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `done()`, for up to 5 s. */
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

/** `later` happened at least `ms` after `earlier` (1 ms for the timers' rounding). */
function atLeastAfter(later: number, earlier: number, ms: number, what: string): void {
  assert.ok(later - earlier >= ms - 1, `${what}: ${(later - earlier).toFixed(1)} ms, want ≥ ${ms}`);
}

Deno.test("closeWhenIdle", async (t) => {
  await t.step("an idle session gets GOAWAY, and its socket is destroyed a grace period later", async () => {
    const { session, socket } = watched();
    await until(() => socket.destroyed, "the socket's destruction");
    assert.ok(session.closed, "destroyed without a GOAWAY");
    atLeastAfter(socket.destroyedAt, session.closedAt, GRACE_MS, "GOAWAY to destruction");
  });

  await t.step("an open stream keeps the session; the idle time counts from its close", async () => {
    const { session, socket, openStream } = watched();
    const close = openStream();
    await sleep(IDLE_MS * 5);
    assert.equal(session.closed, false, "GOAWAY with a stream open");
    const closedStreamAt = performance.now();
    close();
    await until(() => session.closed, "GOAWAY after the stream closed");
    atLeastAfter(session.closedAt, closedStreamAt, IDLE_MS, "stream close to GOAWAY");
    socket.emit("close"); // the peer goes: no timer outlives the step
  });

  await t.step(
    "a stream accepted after the GOAWAY runs to its end; the grace starts when it closes",
    async () => {
      const { session, socket, openStream } = watched();
      let close: (() => void) | undefined;
      session.afterClose = () => close = openStream(); // its headers were in the read after the GOAWAY
      await until(() => close !== undefined, "GOAWAY and the stream");
      await sleep(GRACE_MS * 4);
      assert.equal(socket.destroyed, false, "the socket was destroyed under an open stream");
      const closedStreamAt = performance.now();
      close!();
      await until(() => socket.destroyed, "the socket's destruction after the last stream");
      atLeastAfter(socket.destroyedAt, closedStreamAt, GRACE_MS, "last stream to destruction");
    },
  );

  await t.step(
    "a stream the peer resets after the GOAWAY (session destroyed): the socket still goes",
    async () => {
      const { session, socket, openStream } = watched();
      session.afterClose = () => {
        const reset = openStream();
        session.destroyed = true; // Deno's session is gone when a reset closes its last stream
        reset();
      };
      await until(() => socket.destroyed, "the socket's destruction");
    },
  );

  await t.step("no GOAWAY while any of several streams is open", async () => {
    const { session, socket, openStream } = watched();
    const closeFirst = openStream();
    const closeSecond = openStream();
    closeFirst();
    await sleep(IDLE_MS * 5);
    assert.equal(session.closed, false, "GOAWAY with a stream still open");
    assert.equal(socket.destroyed, false);
    const closedLastAt = performance.now();
    closeSecond();
    await until(() => session.closed, "GOAWAY after the last stream closed");
    atLeastAfter(session.closedAt, closedLastAt, IDLE_MS, "last stream close to GOAWAY");
    socket.emit("close");
  });

  await t.step(
    "a session destroyed under its last stream: no GOAWAY, the socket goes a grace period later",
    async () => {
      const { session, socket, openStream } = watched();
      const reset = openStream();
      session.destroyed = true; // gone without a close() of ours, e.g. a session error
      const closedStreamAt = performance.now();
      reset();
      await until(() => socket.destroyed, "the socket's destruction");
      assert.equal(session.closed, false, "close() called on a destroyed session");
      atLeastAfter(socket.destroyedAt, closedStreamAt, GRACE_MS, "last stream to destruction");
    },
  );

  await t.step("a socket the peer closed after the GOAWAY is not destroyed again", async () => {
    const { session, socket } = watched();
    await until(() => session.closed, "GOAWAY");
    socket.emit("close"); // the peer answers the GOAWAY by closing
    await sleep(GRACE_MS * 3);
    assert.equal(socket.destroyed, false, "the grace timer outlived the socket");
  });

  await t.step("a socket the peer closed stops both timers", async () => {
    const { session, socket } = watched();
    socket.emit("close");
    await sleep(IDLE_MS * 5);
    assert.equal(session.closed, false);
    assert.equal(socket.destroyed, false);
  });
});
