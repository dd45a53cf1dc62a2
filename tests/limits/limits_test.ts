import assert from "node:assert/strict";
import { PeerRateLimiter, TokenBucket } from "../../src/limits/ratelimiter.ts";
import { PoolFullError, WorkPool } from "../../src/limits/pool.ts";
import { ByteBudget } from "../../src/limits/byte_budget.ts";
import { PeerSlots } from "../../src/limits/peer_slots.ts";
import { ManualClock } from "../support/manual_clock.ts";

Deno.test("a token bucket refuses over its burst and refills over time", () => {
  const clock = new ManualClock();
  const bucket = new TokenBucket({ rate: { perSecond: 2, burst: 3 }, clock });
  assert.deepEqual([bucket.take(), bucket.take(), bucket.take(), bucket.take()], [true, true, true, false]);
  clock.advance(500); // one token back at 2/s
  assert.equal(bucket.take(), true);
  assert.equal(bucket.take(), false);
  assert.equal(bucket.full, false);
  clock.advance(1500);
  assert.equal(bucket.full, true);
});

Deno.test("the peer limiter gives every peer group its own bucket", () => {
  const clock = new ManualClock();
  const limiter = new PeerRateLimiter({ perPeer: { perSecond: 2, burst: 3 }, clock });
  assert.deepEqual([limiter.take("10.0.0.1"), limiter.take("10.0.0.1"), limiter.take("10.0.0.1")], [
    true,
    true,
    true,
  ]);
  assert.equal(limiter.take("10.0.0.1"), false);
  assert.equal(limiter.take("::ffff:10.0.0.1"), false, "an IPv4-mapped address is its IPv4 address");
  assert.equal(limiter.take("10.0.0.2"), true, "another peer is unaffected");
  clock.advance(500);
  assert.equal(limiter.take("10.0.0.1"), true);
});

Deno.test("the peer limiter groups IPv6 peers by /64", () => {
  const clock = new ManualClock();
  const limiter = new PeerRateLimiter({ perPeer: { perSecond: 1, burst: 2 }, clock });
  assert.equal(limiter.take("2001:db8:1:2::1"), true);
  assert.equal(limiter.take("2001:db8:1:2:ffff:ffff:ffff:ffff"), true);
  assert.equal(
    limiter.take("2001:0db8:0001:0002:abcd::9"),
    false,
    "every address of the /64 shares one budget",
  );
  assert.equal(limiter.take("2001:db8:1:3::1"), true, "the next /64 has its own");
  assert.equal(limiter.trackedPeers, 2);
});

Deno.test("the peer limiter stays bounded in peer groups tracked", () => {
  const clock = new ManualClock();
  const limiter = new PeerRateLimiter({ perPeer: { perSecond: 1, burst: 1 }, clock, maxPeers: 10 });
  for (let i = 0; i < 1000; i++) {
    assert.equal(limiter.take(`peer-${i}`), true);
    assert.equal(limiter.trackedPeers, Math.min(i + 1, 10));
  }
  assert.equal(limiter.take("peer-999"), false, "the most recent peer is still tracked");
  assert.equal(limiter.take("peer-0"), true, "the oldest peers were dropped, so peer-0 starts afresh");
  assert.equal(limiter.trackedPeers, 10);
  // Once every bucket has refilled it carries no state: a new peer drops them all.
  clock.advance(1000);
  assert.equal(limiter.take("peer-new"), true);
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
  const runs = [pool.run(task), pool.run(task)];
  assert.equal(pool.full, false, "slots taken, the queue still has room");
  runs.push(pool.run(task));
  assert.equal(pool.full, true);
  await assert.rejects(pool.run(task), PoolFullError);
  assert.equal(pool.running, 2);
  assert.equal(pool.queued, 1);
  while (gates.length || pool.running) {
    gates.shift()?.();
    await new Promise((r) => setTimeout(r, 0));
  }
  await Promise.all(runs);
  assert.equal(peak, 2);
  assert.equal(pool.full, false);
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

Deno.test("per-peer slots count an IPv4 address or an IPv6 /64, and come back once given back", () => {
  const slots = new PeerSlots(2);
  const first = slots.tryTake("2001:db8:1:2::10");
  assert.ok(first);
  assert.ok(slots.tryTake("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "same /64: the second slot");
  assert.equal(slots.tryTake("2001:db8:1:2::99"), undefined, "a third address in the /64 is refused");
  assert.ok(slots.tryTake("2001:db8:1:3::10"), "the next /64 has its own slots");
  assert.ok(slots.tryTake("10.0.0.7"));
  assert.ok(slots.tryTake("::ffff:10.0.0.7"), "an IPv4-mapped address is its IPv4 address");
  assert.equal(slots.tryTake("10.0.0.7"), undefined);
  first();
  first();
  assert.ok(slots.tryTake("2001:db8:1:2::99"), "a given-back slot is free again, once");
  assert.equal(slots.tryTake("2001:db8:1:2::98"), undefined);
  assert.equal(slots.groups, 3);
  assert.throws(() => new PeerSlots(0), RangeError);
});

Deno.test("a token bucket never holds more than its burst", async (t) => {
  const cases = [
    { name: "after a long idle time", idleMs: 3_600_000 },
    { name: "after exactly one refill", idleMs: 1_500 },
  ];
  for (const { name, idleMs } of cases) {
    await t.step(name, () => {
      const clock = new ManualClock();
      const bucket = new TokenBucket({ rate: { perSecond: 2, burst: 3 }, clock });
      clock.advance(idleMs);
      const taken = Array.from({ length: 6 }, () => bucket.take());
      assert.deepEqual(
        taken,
        [true, true, true, false, false, false],
        "an idle peer still gets only its burst",
      );
    });
  }
});

Deno.test("a token bucket gains nothing when the clock goes back", () => {
  const clock = new ManualClock();
  const bucket = new TokenBucket({ rate: { perSecond: 1, burst: 2 }, clock });
  assert.deepEqual([bucket.take(), bucket.take(), bucket.take()], [true, true, false]);
  clock.time -= 10_000; // a wall clock stepped back
  assert.equal(bucket.take(), false, "going back is no time passing");
  clock.advance(1_000);
  assert.equal(bucket.take(), true, "one second after the step back: one token");
  assert.equal(bucket.take(), false);
});

Deno.test("per-peer slots forget a peer group once it gave every slot back", () => {
  const slots = new PeerSlots(3);
  for (let i = 0; i < 100; i++) {
    const giveBack = [slots.tryTake(`10.0.${i}.1`), slots.tryTake(`10.0.${i}.1`)];
    assert.equal(slots.groups, 1);
    for (const give of giveBack) give!();
    assert.equal(slots.groups, 0, `peer ${i} is still counted after giving its slots back`);
  }
});

Deno.test("a byte budget gets back at most what it holds", () => {
  const budget = new ByteBudget(10);
  assert.equal(budget.tryTake(4), true);
  budget.give(100); // more than held: a double give, say
  assert.equal(budget.held, 0);
  assert.equal(budget.tryTake(10), true);
  assert.equal(budget.tryTake(1), false, "the budget did not grow");
});

Deno.test("a work pool refuses bad concurrencies and callers already gone", async (t) => {
  for (const concurrency of [0, -1]) {
    await t.step(`concurrency ${concurrency}`, () => {
      assert.throws(() => new WorkPool({ concurrency, maxQueued: 1 }), /pool concurrency must be at least 1/);
    });
  }
  await t.step("a signal aborted before the call: the task never runs, with a free slot", async () => {
    const pool = new WorkPool({ concurrency: 1, maxQueued: 1 });
    let ran = false;
    await assert.rejects(
      pool.run(() => Promise.resolve(ran = true), { signal: AbortSignal.abort(new Error("caller gone")) }),
      /caller gone/,
    );
    assert.equal(ran, false);
    assert.deepEqual([pool.running, pool.queued], [0, 0]);
  });
});

Deno.test("a work pool leaves no abort listener on a signal its queued tasks shared", async () => {
  const pool = new WorkPool({ concurrency: 1, maxQueued: 10 });
  const shared = new AbortController().signal; // e.g. the server's shutdown signal, given to every call
  const listening = new Set<unknown>();
  type Listen = (
    type: string,
    listener: EventListenerOrEventListenerObject,
    options?: AddEventListenerOptions,
  ) => void;
  const add = shared.addEventListener.bind(shared) as Listen;
  const remove = shared.removeEventListener.bind(shared) as Listen;
  shared.addEventListener = ((type, listener, options) => {
    listening.add(listener);
    add(type, listener, options);
  }) as Listen as typeof shared.addEventListener;
  shared.removeEventListener = ((type, listener, options) => {
    listening.delete(listener);
    remove(type, listener, options);
  }) as Listen as typeof shared.removeEventListener;
  const results = await Promise.all(
    Array.from({ length: 5 }, (_, i) => pool.run(() => Promise.resolve(i), { signal: shared })),
  );
  assert.deepEqual(results, [0, 1, 2, 3, 4]);
  assert.equal(listening.size, 0, "listeners of tasks that started stay on the signal");
});
