/** The node lock: exactly one winner, one marking, and no way back (reference §3.1). */
import assert from "node:assert/strict";
import { type ClusterMarker, NodeLock } from "../../src/bootstrapper/nodelock.ts";

/** A marker that records its calls and can be made to fail or to wait. */
class FakeMarker implements ClusterMarker {
  calls: Uint8Array[] = [];
  failWith?: Error;
  gate?: Promise<void>;

  async mark(clusterId: Uint8Array): Promise<void> {
    this.calls.push(clusterId);
    await this.gate;
    if (this.failWith) throw this.failWith;
  }
}

const clusterId = (byte: number) => new Uint8Array(32).fill(byte);

Deno.test("nodelock: 12 concurrent callers, exactly one wins and the marker runs once with its ID", async () => {
  const marker = new FakeMarker();
  let release!: () => void;
  marker.gate = new Promise((resolve) => release = resolve);
  const lock = new NodeLock(marker);
  assert.equal(lock.holder, "none");
  const attempts = Array.from({ length: 12 }, (_, i) => lock.tryLock(clusterId(i)));
  // Losers answer at once, while the winner is still marking.
  assert.equal(lock.holder, "taken");
  assert.equal(lock.state, "marking");
  release();
  const results = await Promise.all(attempts);
  assert.deepEqual(results.filter((won) => won).length, 1);
  assert.equal(results[0], true);
  assert.equal(marker.calls.length, 1);
  assert.deepEqual(marker.calls[0], clusterId(0));
  assert.equal(lock.state, "marked");
});

Deno.test("nodelock: after a successful lock, 10 concurrent callers all get false and never mark", async () => {
  const marker = new FakeMarker();
  const lock = new NodeLock(marker);
  assert.equal(await lock.tryLock(clusterId(1)), true);
  const results = await Promise.all(Array.from({ length: 10 }, () => lock.tryLock(clusterId(2))));
  assert.deepEqual(results, Array(10).fill(false));
  assert.equal(marker.calls.length, 1);
});

Deno.test("nodelock: a marking failure rejects and the lock stays taken (point of no return)", async () => {
  const marker = new FakeMarker();
  marker.failWith = new Error("TPM refused the extend");
  const lock = new NodeLock(marker);
  await assert.rejects(lock.tryLock(clusterId(1)), /TPM refused the extend/);
  assert.equal(lock.holder, "taken");
  assert.equal(lock.state, "mark-failed");
  marker.failWith = undefined;
  assert.equal(await lock.tryLock(clusterId(1)), false);
  assert.equal(marker.calls.length, 1);
});

Deno.test("nodelock: an already aborted signal leaves the lock free; the signal reaches the marker", async () => {
  const seen: (AbortSignal | undefined)[] = [];
  const lock = new NodeLock({
    mark(_id, options) {
      seen.push(options?.signal);
      return Promise.resolve();
    },
  });
  const aborted = new AbortController();
  aborted.abort(new Error("shutting down"));
  await assert.rejects(lock.tryLock(clusterId(1), { signal: aborted.signal }), /shutting down/);
  assert.equal(lock.holder, "none");
  const live = new AbortController();
  assert.equal(await lock.tryLock(clusterId(1), { signal: live.signal }), true);
  assert.equal(seen.length, 1);
  // The marker's signal follows the caller's (combined with the marking deadline).
  assert.equal(seen[0]?.aborted, false);
  live.abort(new Error("stop"));
  assert.equal(seen[0]?.aborted, true);
});

Deno.test("nodelock: marking that never ends fails at its deadline; the lock stays taken", async () => {
  let aborted: unknown;
  const lock = new NodeLock({
    mark: (_id, options) =>
      new Promise<void>((_resolve, reject) => {
        options?.signal?.addEventListener("abort", () => reject(aborted = options.signal!.reason));
      }),
  }, { markTimeoutMs: 20 });
  await assert.rejects(lock.tryLock(clusterId(1)), /marking the node \(PCR 15\): no answer within 20 ms/);
  assert.ok(aborted instanceof Error, "the marker was told to stop");
  assert.equal(lock.state, "mark-failed");
  assert.equal(await lock.tryLock(clusterId(2)), false);
});

Deno.test("nodelock: the winner's onTaken runs at the flip, before marking ends, also when marking fails; never for a loser", async () => {
  const marker = new FakeMarker();
  let release!: () => void;
  marker.gate = new Promise((resolve) => release = resolve);
  marker.failWith = new Error("TPM refused the extend");
  const lock = new NodeLock(marker);
  const taken: string[] = [];
  const winner = lock.tryLock(clusterId(1), { onTaken: () => taken.push(`winner, lock ${lock.state}`) });
  // Synchronous: the flip and the hook happen before tryLock returns its promise.
  assert.deepEqual(taken, ["winner, lock marking"]);
  assert.equal(await lock.tryLock(clusterId(2), { onTaken: () => taken.push("loser") }), false);
  release();
  await assert.rejects(winner, /TPM refused the extend/);
  assert.deepEqual(taken, ["winner, lock marking"]);
});
