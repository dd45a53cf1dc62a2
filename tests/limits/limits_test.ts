import assert from "node:assert/strict";
import { RateLimiter } from "../../src/limits/ratelimiter.ts";
import { PoolFullError, WorkPool } from "../../src/limits/pool.ts";
import { ByteBudget } from "../../src/limits/byte_budget.ts";

function manualClock(start = 0) {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

Deno.test("rate limiter refuses a peer over its burst and refills over time", () => {
  const clock = manualClock();
  const limiter = new RateLimiter({
    global: { perSecond: 100, burst: 100 },
    perPeer: { perSecond: 2, burst: 3 },
    clock,
  });
  assert.deepEqual([limiter.take("a"), limiter.take("a"), limiter.take("a")], [null, null, null]);
  assert.equal(limiter.take("a"), "peer");
  assert.equal(limiter.take("b"), null, "another peer is unaffected");
  clock.advance(500); // one token back at 2/s
  assert.equal(limiter.take("a"), null);
  assert.equal(limiter.take("a"), "peer");
});

Deno.test("rate limiter refuses everyone over the global limit without charging the peer", () => {
  const clock = manualClock();
  const limiter = new RateLimiter({
    global: { perSecond: 1, burst: 2 },
    perPeer: { perSecond: 10, burst: 10 },
    clock,
  });
  assert.equal(limiter.take("a"), null);
  assert.equal(limiter.take("b"), null);
  assert.equal(limiter.take("c"), "global");
  clock.advance(1000);
  assert.equal(limiter.take("c"), null);
});

Deno.test("rate limiter stays bounded in peers tracked", () => {
  const clock = manualClock();
  const limiter = new RateLimiter({
    global: { perSecond: 1e9, burst: 1e9 },
    perPeer: { perSecond: 1, burst: 1 },
    clock,
    maxPeers: 10,
  });
  for (let i = 0; i < 1000; i++) {
    assert.equal(limiter.take(`peer-${i}`), null);
    assert.equal(limiter.trackedPeers, Math.min(i + 1, 10));
  }
  assert.equal(limiter.take("peer-999"), "peer", "the most recent peer is still tracked");
  assert.equal(limiter.take("peer-0"), null, "the oldest peers were dropped, so peer-0 starts afresh");
  assert.equal(limiter.trackedPeers, 10);
  // Once every bucket has refilled it carries no state: a new peer drops them all.
  clock.advance(1000);
  assert.equal(limiter.take("peer-new"), null);
  assert.equal(limiter.trackedPeers, 1);
});

Deno.test("work pool bounds concurrency and refuses beyond its queue", async () => {
  const pool = new WorkPool({ concurrency: 2, maxQueued: 1 });
  let active = 0;
  let peak = 0;
  const gates: (() => void)[] = [];
  const task = () =>
    new Promise<void>((resolve) => {
      active++;
      peak = Math.max(peak, active);
      gates.push(() => {
        active--;
        resolve();
      });
    });
  const runs = [pool.run(task), pool.run(task), pool.run(task)];
  await assert.rejects(pool.run(task), PoolFullError);
  assert.equal(pool.running, 2);
  assert.equal(pool.queued, 1);
  while (gates.length || pool.running) {
    gates.shift()?.();
    await new Promise((r) => setTimeout(r, 0));
  }
  await Promise.all(runs);
  assert.equal(peak, 2);
});

Deno.test("work pool removes an aborted waiter from its queue", async () => {
  const pool = new WorkPool({ concurrency: 1, maxQueued: 1 });
  let release!: () => void;
  const first = pool.run(() => new Promise<void>((r) => (release = r)));
  const controller = new AbortController();
  const waiting = pool.run(() => Promise.resolve("never"), { signal: controller.signal });
  controller.abort(new Error("caller gave up"));
  await assert.rejects(waiting, /caller gave up/);
  assert.equal(pool.queued, 0);
  release();
  await first;
  assert.equal(await pool.run(() => Promise.resolve("ok")), "ok");
});

Deno.test("a byte budget refuses what would exceed it, takes nothing then, and gets bytes back", () => {
  const budget = new ByteBudget(10);
  assert.equal(budget.tryTake(6), true);
  assert.equal(budget.tryTake(5), false, "6 + 5 > 10");
  assert.equal(budget.held, 6, "a refused take takes nothing");
  assert.equal(budget.tryTake(4), true);
  budget.give(6);
  assert.equal(budget.held, 4);
  assert.equal(budget.tryTake(6), true);
  assert.throws(() => new ByteBudget(0), RangeError);
});
