/**
 * The local API's persistence (`src/localapi/state.ts`): a save appends only
 * the changed objects to the journal; the snapshot is rewritten only when
 * the journal has outgrown it; loading replays the journal of the
 * snapshot's generation, drops a last line cut short by a crash, ignores a
 * journal a crash left behind a newer snapshot, and refuses damage.
 */
import assert from "node:assert/strict";
import { type Route, SECRETS } from "../../src/localapi/resources.ts";
import {
  JOURNAL_FILE,
  loadState,
  MIN_COMPACTION_BYTES,
  STATE_FILE,
  StateWriter,
} from "../../src/localapi/state.ts";
import { ObjectStore } from "../../src/localapi/store.ts";
import { withTempDir } from "../support/temp_dir.ts";

const NOW = "2026-11-24T00:00:00Z";

function newStore(): ObjectStore {
  return new ObjectStore(["kube-system"], () => NOW);
}

function secret(name: string): Route {
  return { resource: SECRETS, namespace: "kube-system", name };
}

function create(store: ObjectStore, name: string, value = "v"): void {
  store.create(secret(name), { metadata: { name }, data: { value: btoa(value) } }, "test", "Update");
}

/** A store restored from what `loadState` finds under `dir`. */
async function reloaded(dir: string): Promise<ObjectStore> {
  const state = await loadState(dir);
  assert.ok(state, "a state was found");
  const store = newStore();
  store.restore(state.snapshot);
  return store;
}

/** Persists secrets "a" and "b" under `dir`, one save each, and closes the writer. */
async function persistTwoSaves(dir: string): Promise<void> {
  const store = newStore();
  const writer = new StateWriter({ stateDir: dir, store });
  create(store, "a");
  await writer.save();
  create(store, "b");
  await writer.save();
  await writer.close();
}

function names(store: ObjectStore): string[] {
  return store.list({ resource: SECRETS, namespace: "kube-system" }).map((s) =>
    (s.metadata as { name: string }).name
  );
}

Deno.test("state: saves append the changed objects; a restart sees every change, deletions included", async () => {
  await withTempDir("local-api-journal-", async (dir) => {
    const store = newStore();
    const writer = new StateWriter({ stateDir: dir, store });
    try {
      create(store, "a");
      await writer.save(); // the first save writes a snapshot and an empty journal
      const snapshot = await Deno.readTextFile(`${dir}/${STATE_FILE}`);
      const journal = await Deno.readTextFile(`${dir}/${JOURNAL_FILE}`);
      create(store, "b");
      store.update(secret("a"), { metadata: { name: "a" }, data: { value: btoa("changed") } }, "test");
      store.delete(secret("b"));
      create(store, "c");
      await writer.save();
      assert.equal(
        await Deno.readTextFile(`${dir}/${STATE_FILE}`),
        snapshot,
        "the snapshot is not rewritten",
      );
      const appended = (await Deno.readTextFile(`${dir}/${JOURNAL_FILE}`)).slice(journal.length);
      assert.deepEqual(
        appended.trim().split("\n").map((line) => JSON.parse(line).path).sort(),
        ["a", "b", "c"].map((name) => `/api/v1/namespaces/kube-system/secrets/${name}`),
        "one line per changed object",
      );
      for (const file of [STATE_FILE, JOURNAL_FILE]) {
        assert.equal((await Deno.stat(`${dir}/${file}`)).mode! & 0o777, 0o600, file);
      }
    } finally {
      await writer.close();
    }
    const loaded = await reloaded(dir);
    assert.deepEqual(names(loaded), ["a", "c"]);
    assert.deepEqual(loaded.get(secret("a")).data, { value: btoa("changed") });
    assert.equal(loaded.resourceVersion, store.resourceVersion);
    assert.deepEqual(loaded.get(secret("c")), store.get(secret("c")), "field owners and metadata too");
  });
});

Deno.test("state: a journal larger than the snapshot is compacted into a new snapshot generation", async () => {
  await withTempDir("local-api-compact-", async (dir) => {
    const store = newStore();
    const writer = new StateWriter({ stateDir: dir, store });
    const big = "x".repeat(64 * 1024);
    try {
      create(store, "a");
      await writer.save();
      const generation = async () =>
        JSON.parse(await Deno.readTextFile(`${dir}/${STATE_FILE}`)).journalGeneration as number;
      const first = await generation();
      let saves = 0;
      while (await generation() === first) {
        store.update(
          secret("a"),
          { metadata: { name: "a" }, data: { value: btoa(`${big}${saves}`) } },
          "test",
        );
        await writer.save();
        assert.ok(++saves < 100, "compacted at last");
      }
      const recordBytes = btoa(big).length; // at least
      assert.ok(
        saves * recordBytes > MIN_COMPACTION_BYTES,
        `not compacted before ${MIN_COMPACTION_BYTES} bytes`,
      );
      assert.equal(await generation(), first + 1);
      store.update(secret("a"), { metadata: { name: "a" }, data: { value: btoa("last") } }, "test");
      await writer.save();
      assert.ok((await Deno.stat(`${dir}/${JOURNAL_FILE}`)).size < big.length, "the new journal is short");
    } finally {
      await writer.close();
    }
    assert.deepEqual((await reloaded(dir)).get(secret("a")).data, { value: btoa("last") });
  });
});

Deno.test("state: a last journal line cut short is dropped, and the next writer does not append to it", async () => {
  await withTempDir("local-api-torn-", async (dir) => {
    await persistTwoSaves(dir);
    const journal = await Deno.readTextFile(`${dir}/${JOURNAL_FILE}`);
    await Deno.writeTextFile(`${dir}/${JOURNAL_FILE}`, journal + '{"rv":9999,"path":"/api/v1/namesp');

    const state = await loadState(dir);
    const restarted = newStore();
    restarted.restore(state!.snapshot);
    assert.deepEqual(names(restarted), ["a", "b"]);
    const next = new StateWriter({ stateDir: dir, store: restarted, generation: state!.generation });
    create(restarted, "c");
    await next.save();
    await next.close();
    assert.deepEqual(names(await reloaded(dir)), ["a", "b", "c"]);
  });
});

Deno.test("state: a journal older than the snapshot (a crash while compacting) is not replayed", async () => {
  await withTempDir("local-api-stale-journal-", async (dir) => {
    const store = newStore();
    const writer = new StateWriter({ stateDir: dir, store });
    create(store, "a", "old");
    await writer.save();
    store.update(secret("a"), { metadata: { name: "a" }, data: { value: btoa("journaled") } }, "test");
    await writer.save();
    await writer.close();
    // The crash: a newer snapshot (a's latest value, one generation on) is in place, the journal is not.
    const file = JSON.parse(await Deno.readTextFile(`${dir}/${STATE_FILE}`));
    store.update(secret("a"), { metadata: { name: "a" }, data: { value: btoa("newest") } }, "test");
    await Deno.writeTextFile(
      `${dir}/${STATE_FILE}`,
      JSON.stringify({ ...store.snapshot(), journalGeneration: file.journalGeneration + 1 }),
    );
    assert.deepEqual((await reloaded(dir)).get(secret("a")).data, { value: btoa("newest") });
  });
});

Deno.test("state: a damaged journal line before the last one stops the load, naming the file and line", async () => {
  await withTempDir("local-api-damaged-", async (dir) => {
    await persistTwoSaves(dir);
    const [header, ...records] = (await Deno.readTextFile(`${dir}/${JOURNAL_FILE}`)).trim().split("\n");
    await Deno.writeTextFile(`${dir}/${JOURNAL_FILE}`, [header, "{not json", ...records, ""].join("\n"));
    await assert.rejects(loadState(dir), new RegExp(`${JOURNAL_FILE} line 2 is not valid JSON`));
  });
});

Deno.test("state: a store without a journal keeps no changes (one path per token ever written piled up)", () => {
  const untracked = new ObjectStore(["kube-system"], () => NOW, { trackChanges: false });
  const tracked = newStore();
  for (const store of [untracked, tracked]) {
    for (let i = 0; i < 100; i++) {
      create(store, `bootstrap-token-${i}`);
      store.remove(secret(`bootstrap-token-${i}`));
    }
  }
  assert.deepEqual(untracked.takeChanges(), []);
  assert.equal(tracked.takeChanges().length, 100);
});
