import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { DataKeyBatcher, type DataKeyCalls } from "../../src/keyservice/batching.ts";
import {
  type DataKeyOutcome,
  DataKeyOutcomeSchema,
  type GetDataKeyRequest,
  GetDataKeyRequestSchema,
} from "../../src/gen/kms/kms_pb.ts";
import { expectConnectError } from "../support/connect_error.ts";

/** The key a fake key service derives for `id`: its characters' codes, `length` bytes. */
function keyFor(id: string, length = 4): Uint8Array {
  return Uint8Array.from({ length }, (_, i) => id.charCodeAt(i % id.length));
}

function request(id: string, length = 4): GetDataKeyRequest {
  return create(GetDataKeyRequestSchema, { dataKeyId: id, length });
}

function keyOutcome(id: string): DataKeyOutcome {
  return create(DataKeyOutcomeSchema, { outcome: { case: "dataKey", value: keyFor(id) } });
}

/** A call the fake received, answered when the test says so. */
interface HeldCall {
  readonly kind: "single" | "batch";
  readonly ids: string[];
  readonly signal?: AbortSignal;
  answer(result: Uint8Array | DataKeyOutcome[] | Error): void;
}

/** Fake key service calls that hold every call until the test answers it. */
function heldCalls(): DataKeyCalls & { calls: HeldCall[]; next(): Promise<HeldCall> } {
  const calls: HeldCall[] = [];
  const waiting: ((call: HeldCall) => void)[] = [];
  const hold = <T>(kind: HeldCall["kind"], ids: string[], signal?: AbortSignal) => {
    const { promise, resolve, reject } = Promise.withResolvers<T>();
    const call: HeldCall = {
      kind,
      ids,
      signal,
      answer: (result) => result instanceof Error ? reject(result) : resolve(result as T),
    };
    calls.push(call);
    waiting.shift()?.(call);
    return promise;
  };
  let taken = 0;
  return {
    calls,
    getDataKey: (req, signal) => hold<Uint8Array>("single", [req.dataKeyId], signal),
    getDataKeys: (reqs) => hold<DataKeyOutcome[]>("batch", reqs.map((r) => r.dataKeyId)),
    next: () => {
      const call = calls[taken++];
      return call ? Promise.resolve(call) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

const LIMITS = { maxKeys: 3, maxKeyBytes: 12, maxKeyIdBytes: 30, timeoutMs: 60_000 };

/** A batcher with `limits` over held fake calls, and the fake. */
function batcherOverHeldCalls(limits = LIMITS) {
  const fake = heldCalls();
  return { fake, batcher: new DataKeyBatcher(fake, limits) };
}

Deno.test("DataKeyBatcher", async (t) => {
  await t.step("a key asked for with no call in flight goes at once, alone, with its signal", async () => {
    const { fake, batcher } = batcherOverHeldCalls();
    const signal = new AbortController().signal;
    const key = batcher.get(request("a"), signal);
    const call = await fake.next();
    assert.deepEqual([call.kind, call.ids, call.signal], ["single", ["a"], signal]);
    call.answer(keyFor("a"));
    assert.deepEqual(await key, keyFor("a"));
  });

  await t.step("keys asked for while a call is in flight go together next, each gets its own", async () => {
    const { fake, batcher } = batcherOverHeldCalls();
    const first = batcher.get(request("a"));
    const rest = ["b", "c", "d"].map((id) => batcher.get(request(id)));
    (await fake.next()).answer(keyFor("a"));
    const batch = await fake.next();
    assert.deepEqual([batch.kind, batch.ids], ["batch", ["b", "c", "d"]]);
    batch.answer(["b", "c", "d"].map(keyOutcome));
    assert.deepEqual(await Promise.all([first, ...rest]), ["a", "b", "c", "d"].map((id) => keyFor(id)));
    assert.equal(fake.calls.length, 2);
  });

  await t.step(
    "a batch holds at most maxKeys keys, maxKeyIdBytes of IDs and maxKeyBytes of keys",
    async () => {
      const { fake, batcher } = batcherOverHeldCalls();
      const rows: [string, number][] = [
        ["0", 4],
        ["b", 4],
        ["c", 4],
        ["d", 4],
        ["e", 4],
        ["f".repeat(4), 4],
        ["g".repeat(4), 4],
        ["h".repeat(11), 4],
        ["i", 8],
        ["j", 8],
        ["k", 13],
      ];
      const length = (id: string) => rows.find(([rowId]) => rowId === id)![1];
      const keys = rows.map(([id, length]) => batcher.get(request(id, length)));
      const seen: string[][] = [];
      for (let i = 0; i < 7; i++) {
        const call = await fake.next();
        seen.push(call.ids);
        call.answer(
          call.kind === "single"
            ? keyFor(call.ids[0], length(call.ids[0]))
            : call.ids.map((id) =>
              create(DataKeyOutcomeSchema, { outcome: { case: "dataKey", value: keyFor(id, length(id)) } })
            ),
        );
      }
      // 3 bytes an ID character: "ffff" + "gggg" are 24, a third ID would pass 30; "h" × 11 is 33 on its
      // own. 8 + 8 bytes of keys pass 12; 13 bytes alone still go.
      assert.deepEqual(seen, [["0"], ["b", "c", "d"], ["e", "ffff", "gggg"], ["h".repeat(11)], ["i"], ["j"], [
        "k",
      ]]);
      assert.deepEqual(await Promise.all(keys), rows.map(([id, length]) => keyFor(id, length)));
    },
  );

  await t.step(
    "one key's failure is its own: code and message as sent, Unknown for no error code",
    async () => {
      const { fake, batcher } = batcherOverHeldCalls();
      const first = batcher.get(request("a"));
      const [good, bad, odd] = ["b", "", "c"].map((id) => batcher.get(request(id)));
      (await fake.next()).answer(keyFor("a"));
      await first;
      (await fake.next()).answer([
        keyOutcome("b"),
        create(DataKeyOutcomeSchema, {
          outcome: {
            case: "error",
            value: { code: Code.InvalidArgument, message: "no data key ID specified" },
          },
        }),
        create(DataKeyOutcomeSchema, { outcome: { case: "error", value: { code: 999, message: "odd" } } }),
      ]);
      assert.deepEqual(await good, keyFor("b"));
      await expectConnectError(bad, Code.InvalidArgument, "no data key ID specified");
      await expectConnectError(odd, Code.Unknown, "odd");
    },
  );

  await t.step(
    "a failed call fails every key it carried, with its error; the next call goes out",
    async () => {
      const { fake, batcher } = batcherOverHeldCalls();
      const first = batcher.get(request("a"));
      const carried = ["b", "c"].map((id) => batcher.get(request(id)));
      (await fake.next()).answer(new ConnectError("connection refused", Code.Unavailable));
      await expectConnectError(first, Code.Unavailable, "connection refused");
      const lost = new ConnectError("deadline", Code.DeadlineExceeded);
      (await fake.next()).answer(lost);
      for (const key of carried) assert.equal(await key.catch((error) => error), lost);
      const after = batcher.get(request("d"));
      (await fake.next()).answer(keyFor("d"));
      assert.deepEqual(await after, keyFor("d"));
    },
  );

  await t.step("an answer with the wrong number of outcomes, or an empty one, is Internal", async () => {
    const { fake, batcher } = batcherOverHeldCalls();
    const first = batcher.get(request("a"));
    const short = ["b", "c"].map((id) => batcher.get(request(id)));
    (await fake.next()).answer(keyFor("a"));
    await first;
    (await fake.next()).answer([keyOutcome("b")]);
    for (const key of short) {
      await expectConnectError(key, Code.Internal, "key service answered 1 of 2 data keys");
    }
    const blocker = batcher.get(request("x"));
    const empty = ["d", "e"].map((id) => batcher.get(request(id)));
    (await fake.next()).answer(keyFor("x"));
    await blocker;
    (await fake.next()).answer([keyOutcome("d"), create(DataKeyOutcomeSchema, {})]);
    assert.deepEqual(await empty[0], keyFor("d"));
    await expectConnectError(empty[1], Code.Internal, "key service answered no outcome for a data key");
  });

  await t.step(
    "a caller that gives up is rejected at once with Canceled; queued, it is not sent",
    async () => {
      const { fake, batcher } = batcherOverHeldCalls();
      const first = batcher.get(request("a"));
      const queued = new AbortController();
      const inBatch = new AbortController();
      const dropped = batcher.get(request("b"), queued.signal);
      const [c, d] = [batcher.get(request("c"), inBatch.signal), batcher.get(request("d"))];
      queued.abort();
      await expectConnectError(dropped, Code.Canceled);
      (await fake.next()).answer(keyFor("a"));
      await first;
      const batch = await fake.next();
      assert.deepEqual(batch.ids, ["c", "d"]);
      inBatch.abort();
      await expectConnectError(c, Code.Canceled);
      batch.answer(["c", "d"].map(keyOutcome));
      assert.deepEqual(await d, keyFor("d"));
      await expectConnectError(batcher.get(request("e"), AbortSignal.abort()), Code.Canceled);
      assert.equal(fake.calls.length, 2);
    },
  );

  await t.step(
    "a caller's deadline comes back as DeadlineExceeded, alone, queued or in a batch",
    async () => {
      const { fake, batcher } = batcherOverHeldCalls();
      const deadline = () => new ConnectError("the operation timed out", Code.DeadlineExceeded);
      const callers = ["a", "b", "c", "d"].map(() => new AbortController());
      const [a, b, c, d] = ["a", "b", "c", "d"].map((id, i) => batcher.get(request(id), callers[i].signal));
      const single = await fake.next();
      callers[0].abort(deadline());
      callers[1].abort(deadline());
      await expectConnectError(a, Code.DeadlineExceeded, "the operation timed out");
      await expectConnectError(b, Code.DeadlineExceeded);
      assert.ok(single.signal?.aborted, "a batch of one carries its caller's signal");
      single.answer(keyFor("a"));
      const batch = await fake.next();
      assert.deepEqual(batch.ids, ["c", "d"]);
      callers[2].abort(deadline());
      await expectConnectError(c, Code.DeadlineExceeded);
      batch.answer(["c", "d"].map(keyOutcome));
      assert.deepEqual(await d, keyFor("d"));
    },
  );

  await t.step(
    "a key unanswered within timeoutMs, queued or in flight, fails with DeadlineExceeded",
    async () => {
      const { fake, batcher } = batcherOverHeldCalls({ ...LIMITS, timeoutMs: 50 });
      const started = Date.now();
      const [a, b] = [batcher.get(request("a")), batcher.get(request("b"))];
      const hung = await fake.next();
      await expectConnectError(a, Code.DeadlineExceeded, "no data key from the key service within 50 ms");
      await expectConnectError(b, Code.DeadlineExceeded);
      assert.ok(Date.now() - started < 1000);
      hung.answer(keyFor("a"));
      const after = batcher.get(request("c"));
      const call = await fake.next();
      assert.deepEqual(call.ids, ["c"], "the key that timed out in the queue is not sent");
      call.answer(keyFor("c"));
      assert.deepEqual(await after, keyFor("c"));
    },
  );

  await t.step("a call that throws at once fails its keys; the next call goes out", async () => {
    let throws = true;
    const fake = heldCalls();
    const batcher = new DataKeyBatcher({
      getDataKey: (req, signal) => {
        if (throws) throw new Error("transport broke");
        return fake.getDataKey(req, signal);
      },
      getDataKeys: fake.getDataKeys,
    }, LIMITS);
    await assert.rejects(batcher.get(request("a")), { message: "transport broke" });
    throws = false;
    const after = batcher.get(request("b"));
    (await fake.next()).answer(keyFor("b"));
    assert.deepEqual(await after, keyFor("b"));
  });

  await t.step(
    "a key service without GetDataKeys (Unimplemented): every key a call of its own, at once",
    async () => {
      const { fake, batcher } = batcherOverHeldCalls();
      const first = batcher.get(request("a"));
      const keys = ["b", "c"].map((id) => batcher.get(request(id)));
      const single = await fake.next();
      keys.push(batcher.get(request("d")));
      single.answer(keyFor("a"));
      await first;
      const batch = await fake.next();
      assert.deepEqual(batch.ids, ["b", "c", "d"]);
      batch.answer(new ConnectError("method not found", Code.Unimplemented));
      const singles = [await fake.next(), await fake.next(), await fake.next()];
      assert.deepEqual(singles.map((call) => `${call.kind} ${call.ids}`), [
        "single b",
        "single c",
        "single d",
      ]);
      keys.push(batcher.get(request("e")));
      const later = await fake.next();
      assert.deepEqual([later.kind, later.ids], ["single", ["e"]], "sent while the others are in flight");
      for (const call of [...singles, later]) call.answer(keyFor(call.ids[0]));
      assert.deepEqual(await Promise.all(keys), ["b", "c", "d", "e"].map((id) => keyFor(id)));
    },
  );
});
