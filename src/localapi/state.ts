/**
 * Persistence of the local Kubernetes API, so a restarted local API keeps
 * the cluster's Secrets, ConfigMaps, NodeVersions, JoiningNodes and
 * bootstrap tokens: a snapshot of the whole store plus a journal of the
 * changes since, in the state directory.
 *
 * - `objects.json`: the object store's state ({@linkcode StoreSnapshot}) and
 *   the generation of the journal that continues it. Replaced atomically
 *   (temporary file, fsync, rename).
 * - `journal.jsonl`: a header line `{"generation": g}`, then one line per
 *   changed object, `{"rv": <resourceVersion>, "path": …, "entry": {…}}`
 *   (`"entry": null` for a deletion). Each save appends the objects changed
 *   since the last one, all in one write followed by an fdatasync, so a
 *   change costs its own size, not the store's: rewriting the whole store
 *   on every change made writes O(objects) each and a burst of joins
 *   O(objects²).
 *
 * Saves are serialized and coalesced: a save asked for while one is
 * queued shares it. When the journal has grown past the snapshot's size
 * (at least {@linkcode MIN_COMPACTION_BYTES}) the next save compacts: a new
 * snapshot with the next generation, then a new, empty journal of that
 * generation (each written atomically). Loading replays the journal only
 * when its generation is the snapshot's, so a crash between the two steps
 * loses nothing (the snapshot has every change; the old journal is
 * ignored) and replays nothing twice. A line cut short by a crash can only
 * be the last one (appends are sequential); it is dropped, and the writer
 * compacts when it starts, so nothing is ever appended after such a line.
 * A save resolves once its changes are on disk: the API answers a write
 * only after that.
 *
 * @module
 */
import { writeFileAtomic } from "../fs/atomic_write.ts";
import { jsonSyntaxError } from "../json/syntax_error.ts";
import type { StoreChange, StoredEntry, StoreSnapshot } from "./store.ts";

/** The snapshot's file name under the state directory. */
export const STATE_FILE = "objects.json";
/** The journal's file name under the state directory. */
export const JOURNAL_FILE = "journal.jsonl";
/** The journal may grow to this size even when the snapshot is smaller. */
export const MIN_COMPACTION_BYTES = 1024 * 1024;

/** The snapshot file: the store's snapshot and the generation of its journal. */
interface SnapshotFile extends StoreSnapshot {
  /** The generation of the journal that continues this snapshot; absent in files from before journals (0). */
  journalGeneration?: number;
}

/** One journal line after the header. */
interface JournalRecord {
  /** The store's last resourceVersion when the change was written. */
  rv: number;
  /** The object's URL path. */
  path: string;
  /** The object's state; null when deleted. */
  entry: StoredEntry | null;
}

/** What {@linkcode loadState} found. */
export interface LoadedState {
  /** The store's state: the snapshot with the journal replayed. */
  snapshot: StoreSnapshot;
  /** The generation of the snapshot on disk. */
  generation: number;
}

/**
 * Reads the snapshot and replays the journal under `stateDir`; undefined
 * when there is no snapshot yet.
 *
 * @throws {Error} when the snapshot is not valid JSON, or a journal line
 *   other than the last one is not a record
 */
export async function loadState(stateDir: string): Promise<LoadedState | undefined> {
  const text = await readIfExists(`${stateDir}/${STATE_FILE}`);
  if (text === undefined) return undefined;
  let file: SnapshotFile;
  try {
    file = JSON.parse(text) as SnapshotFile;
  } catch (error) {
    throw new Error(`${stateDir}/${STATE_FILE} is not valid JSON: ${jsonSyntaxError(error)}`);
  }
  const { journalGeneration, ...snapshot } = file;
  const generation = journalGeneration ?? 0;
  const journal = await readIfExists(`${stateDir}/${JOURNAL_FILE}`);
  const records = journal === undefined ? [] : journalRecords(journal, generation, stateDir);
  if (records.length === 0) return { snapshot, generation };
  const objects = new Map((snapshot.objects ?? []).map(({ path, ...entry }) => [path, entry]));
  let resourceVersion = Number(snapshot.resourceVersion) || 0;
  for (const record of records) {
    if (record.entry === null) objects.delete(record.path);
    else objects.set(record.path, record.entry);
    resourceVersion = Math.max(resourceVersion, record.rv);
  }
  return {
    snapshot: {
      version: snapshot.version,
      resourceVersion,
      objects: [...objects].map(([path, entry]) => ({ path, ...entry })),
    },
    generation,
  };
}

/** The records of a journal of `generation`; none when it belongs to another snapshot. */
function journalRecords(text: string, generation: number, stateDir: string): JournalRecord[] {
  const lines = text.split("\n");
  const parsed: JournalRecord[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i] === "") continue;
    let value: unknown;
    try {
      value = JSON.parse(lines[i]);
    } catch (error) {
      // Only the last line can be cut short by a crash; anything else is damage.
      if (lines.slice(i + 1).every((line) => line === "")) break;
      throw new Error(
        `${stateDir}/${JOURNAL_FILE} line ${i + 1} is not valid JSON: ${jsonSyntaxError(error)}`,
      );
    }
    if (i === 0) {
      if ((value as { generation?: unknown }).generation !== generation) return [];
      continue;
    }
    parsed.push(value as JournalRecord);
  }
  return parsed;
}

async function readIfExists(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
}

/** What the writer persists: the store's whole state, and what changed since it last asked. */
export interface PersistedStore {
  /** The last resourceVersion handed out. */
  readonly resourceVersion: string;
  /** The whole state. */
  snapshot(): StoreSnapshot;
  /** The objects changed since the last call. */
  takeChanges(): StoreChange[];
}

/** Options of {@linkcode StateWriter}. */
export interface StateWriterOptions {
  /** The directory (created if missing, mode 0700). */
  stateDir: string;
  /** The store. */
  store: PersistedStore;
  /** The generation on disk ({@linkcode LoadedState.generation}); default 0. */
  generation?: number;
}

/**
 * Persists a store under a state directory: the first save compacts (a
 * fresh snapshot and journal), later ones append to the journal. One write
 * at a time; saves asked for while one is queued share it. Close it when
 * done (it holds the journal open).
 */
export class StateWriter {
  readonly #dir: string;
  readonly #store: PersistedStore;
  #generation: number;
  #journal: Deno.FsFile | undefined;
  #journalBytes = 0;
  #snapshotBytes = 0;
  #queued: Promise<void> | undefined;
  #last: Promise<void> = Promise.resolve();
  #closed = false;

  /** A writer for `options.store` under `options.stateDir`. */
  constructor(options: StateWriterOptions) {
    this.#dir = options.stateDir;
    this.#store = options.store;
    this.#generation = options.generation ?? 0;
  }

  /** Resolves once every change made before this call is on disk. */
  save(): Promise<void> {
    if (this.#closed) return Promise.reject(new Error("the state writer is closed"));
    if (this.#queued) return this.#queued;
    const queued = this.#last.then(async () => {
      this.#queued = undefined;
      await this.#write();
    });
    this.#queued = queued;
    this.#last = queued.catch(() => {});
    return queued;
  }

  /** Resolves once every write asked for so far has ended (failures included). */
  flush(): Promise<void> {
    return this.#last;
  }

  /** Waits for the writes asked for so far, then closes the journal; later saves reject. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#last;
    this.#journal?.close();
    this.#journal = undefined;
  }

  async #write(): Promise<void> {
    if (
      this.#journal === undefined || this.#journalBytes > Math.max(MIN_COMPACTION_BYTES, this.#snapshotBytes)
    ) {
      return await this.#compact();
    }
    const changes = this.#store.takeChanges();
    if (changes.length === 0) return;
    const rv = Number(this.#store.resourceVersion);
    const bytes = new TextEncoder().encode(
      changes.map((change) => JSON.stringify({ rv, ...change }) + "\n").join(""),
    );
    try {
      for (let written = 0; written < bytes.length;) {
        written += await this.#journal.write(bytes.subarray(written));
      }
      await this.#journal.syncData();
    } catch (error) {
      // A partial append would sit before the next one: start over from a snapshot.
      this.#journal.close();
      this.#journal = undefined;
      throw error;
    }
    this.#journalBytes += bytes.length;
  }

  /** A new snapshot of the next generation, then a new journal of that generation. */
  async #compact(): Promise<void> {
    this.#store.takeChanges(); // the snapshot holds them
    const next = this.#generation + 1;
    const snapshot = new TextEncoder().encode(
      JSON.stringify({ ...this.#store.snapshot(), journalGeneration: next } satisfies SnapshotFile),
    );
    this.#journal?.close();
    this.#journal = undefined;
    await writeFileAtomic(`${this.#dir}/${STATE_FILE}`, snapshot, { mode: 0o600 });
    this.#generation = next;
    this.#snapshotBytes = snapshot.length;
    const header = JSON.stringify({ generation: next }) + "\n";
    await writeFileAtomic(`${this.#dir}/${JOURNAL_FILE}`, header, { mode: 0o600 });
    this.#journal = await Deno.open(`${this.#dir}/${JOURNAL_FILE}`, { append: true });
    this.#journalBytes = header.length;
  }
}
