/**
 * Persistence of the local Kubernetes API: the object store's whole state
 * as one JSON snapshot, `<stateDir>/objects.json`, replaced atomically after
 * every change (writes are serialized and coalesced) and loaded at start, so
 * a restarted local API keeps the cluster's Secrets, ConfigMaps,
 * NodeVersions, JoiningNodes and bootstrap tokens.
 *
 * @module
 */
import { writeFileAtomic } from "../fs/atomic_write.ts";
import type { StoreSnapshot } from "./store.ts";

/** The snapshot's file name under the state directory. */
export const STATE_FILE = "objects.json";

/**
 * Reads the snapshot under `stateDir`; undefined when there is none yet.
 *
 * @throws {Error} when the file exists but is not valid JSON
 */
export async function loadState(stateDir: string): Promise<StoreSnapshot | undefined> {
  let text: string;
  try {
    text = await Deno.readTextFile(`${stateDir}/${STATE_FILE}`);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
  try {
    return JSON.parse(text) as StoreSnapshot;
  } catch (error) {
    throw new Error(`${stateDir}/${STATE_FILE} is not valid JSON: ${(error as Error).message}`);
  }
}

/** Writes snapshots under a state directory, one at a time; saves asked for while one is queued share it. */
export class StateWriter {
  #path: string;
  #snapshot: () => StoreSnapshot;
  #queued: Promise<void> | undefined;
  #last: Promise<void> = Promise.resolve();

  /**
   * A writer for the snapshot file under `stateDir`.
   *
   * @param stateDir the directory (created if missing, mode 0700)
   * @param snapshot the current state, taken when a write starts
   */
  constructor(stateDir: string, snapshot: () => StoreSnapshot) {
    this.#path = `${stateDir}/${STATE_FILE}`;
    this.#snapshot = snapshot;
  }

  /** Resolves once a snapshot taken after this call is on disk. */
  save(): Promise<void> {
    if (this.#queued) return this.#queued;
    const queued = this.#last.then(async () => {
      this.#queued = undefined;
      await writeFileAtomic(this.#path, JSON.stringify(this.#snapshot()), { mode: 0o600 });
    });
    this.#queued = queued;
    this.#last = queued.catch(() => {});
    return queued;
  }

  /** Resolves once every write asked for so far has ended (failures included). */
  flush(): Promise<void> {
    return this.#last;
  }
}
