import assert from "node:assert/strict";
import { SharedLoad } from "../../src/async/shared_load.ts";
import { ManualClock } from "../support/manual_clock.ts";

/** A loader whose calls the test answers one by one. */
function scriptedLoader() {
  const calls: PromiseWithResolvers<string>[] = [];
  return {
    calls,
    load: () => {
      const call = Promise.withResolvers<string>();
      calls.push(call);
      return call.promise;
    },
  };
}

Deno.test("concurrent callers share one load, and later callers get the kept value", async () => {
  const loader = scriptedLoader();
  const shared = new SharedLoad(loader.load);
  const first = shared.get();
  const second = shared.get();
  assert.equal(loader.calls.length, 1);
  loader.calls[0].resolve("value");
  assert.deepEqual(await Promise.all([first, second]), ["value", "value"]);
  assert.equal(await shared.get(), "value");
  assert.equal(loader.calls.length, 1);
});

Deno.test("a failed load is forgotten: the next caller loads again", async () => {
  const loader = scriptedLoader();
  const shared = new SharedLoad(loader.load);
  const failing = shared.get();
  loader.calls[0].reject(new Error("down"));
  await assert.rejects(failing, /down/);
  const retry = shared.get();
  assert.equal(loader.calls.length, 2);
  loader.calls[1].resolve("back");
  assert.equal(await retry, "back");
});

Deno.test("a caller that gives up stops waiting; the others still get the value", async () => {
  const loader = scriptedLoader();
  const shared = new SharedLoad(loader.load);
  const impatient = new AbortController();
  const giving = shared.get({ signal: impatient.signal });
  const patient = shared.get();
  impatient.abort(new Error("caller gave up"));
  await assert.rejects(giving, /caller gave up/);
  loader.calls[0].resolve("value");
  assert.equal(await patient, "value");
  assert.equal(loader.calls.length, 1, "the abort did not restart the load");
  await assert.rejects(shared.get({ signal: AbortSignal.abort(new Error("already")) }), /already/);
});

Deno.test("a failure is answered from memory for failureHoldMs, then loaded again", async () => {
  const loader = scriptedLoader();
  const clock = new ManualClock();
  const shared = new SharedLoad(loader.load, { failureHoldMs: 250, clock });
  const failing = shared.get();
  loader.calls[0].reject(new Error("down"));
  await assert.rejects(failing, /down/);
  clock.advance(249);
  await assert.rejects(shared.get(), /down/);
  assert.equal(loader.calls.length, 1, "held: no new load");
  clock.advance(1);
  const retry = shared.get();
  assert.equal(loader.calls.length, 2);
  loader.calls[1].resolve("back");
  assert.equal(await retry, "back");
  assert.throws(() => new SharedLoad(loader.load, { failureHoldMs: 1 }), RangeError);
});

Deno.test("a value loaded for another version is loaded again", async () => {
  const loader = scriptedLoader();
  const shared = new SharedLoad(loader.load);
  const v1 = shared.get({ version: "1" });
  loader.calls[0].resolve("first");
  assert.equal(await v1, "first");
  assert.equal(await shared.get({ version: "1" }), "first");
  const v2 = shared.get({ version: "2" });
  assert.equal(loader.calls.length, 2);
  loader.calls[1].resolve("second");
  assert.equal(await v2, "second");
});

Deno.test("an older load failing does not forget a newer version's load", async () => {
  const loader = scriptedLoader();
  const shared = new SharedLoad(loader.load);
  const old = shared.get({ version: "1" });
  const current = shared.get({ version: "2" });
  loader.calls[0].reject(new Error("old file"));
  await assert.rejects(old, /old file/);
  loader.calls[1].resolve("new");
  assert.equal(await current, "new");
  assert.equal(await shared.get({ version: "2" }), "new");
  assert.equal(loader.calls.length, 2);
});

Deno.test("with maxAgeMs a value is kept that long after it loaded, then loaded again", async () => {
  const loader = scriptedLoader();
  const clock = new ManualClock(1000);
  const shared = new SharedLoad(loader.load, { maxAgeMs: 500, clock });
  const first = shared.get();
  clock.advance(800); // in flight: its age counts from when it loads, not from when it started
  loader.calls[0].resolve("v1");
  assert.equal(await first, "v1");
  clock.advance(499);
  assert.equal(await shared.get(), "v1");
  assert.equal(loader.calls.length, 1);
  clock.advance(1);
  const second = shared.get();
  assert.equal(loader.calls.length, 2);
  loader.calls[1].resolve("v2");
  assert.equal(await second, "v2");
  assert.throws(() => new SharedLoad(loader.load, { maxAgeMs: 1 }), RangeError);
});
