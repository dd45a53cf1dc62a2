/**
 * Writes a file so that readers, and a crash, see either the old content or
 * the complete new content, never a half-written secret.
 *
 * The data goes to a fresh temporary file in the target's directory (created
 * exclusively, with the final mode from the start so it is never readable by
 * more than intended), is flushed to disk, then renamed over the target, and
 * the directory is flushed so the rename itself survives a power loss. On any
 * failure, including an abort, the temporary file is removed and the target
 * is left as it was.
 *
 * @module
 */
import { errorFirstLine } from "../error_message.ts";
import { basename, dirname } from "node:path";
import { ReasonError } from "../reason_error.ts";

/** Why an atomic write failed. */
export type AtomicWriteFailure = "aborted" | "failed";

/** A file could not be written; the target is untouched and no temporary file is left. */
export class AtomicWriteError extends ReasonError<AtomicWriteFailure> {
  /** The target path. */
  readonly path: string;

  /** Writing `path` failed for `reason`; the message names the path, never the content. */
  constructor(reason: AtomicWriteFailure, path: string, message: string, options?: ErrorOptions) {
    super(reason, message, options);
    this.path = path;
  }
}

/** Options of {@linkcode writeFileAtomic}. */
export interface WriteFileAtomicOptions {
  /** The file's permission bits; default 0o600 (secrets are the common case). */
  mode?: number;
  /** Create missing parent directories (mode 0o755); default true. */
  createParents?: boolean;
  /** Aborting before the rename leaves the target untouched. */
  signal?: AbortSignal;
}

const CHUNK_BYTES = 1 << 20;

/**
 * Atomically replaces (or creates) `path` with `data`.
 *
 * @throws {AtomicWriteError} reason "aborted" when `signal` aborted first, "failed" otherwise
 */
export async function writeFileAtomic(
  path: string,
  data: Uint8Array | string,
  options: WriteFileAtomicOptions = {},
): Promise<void> {
  const { mode = 0o600, createParents = true, signal } = options;
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
  const directory = dirname(path);
  const temp = `${directory}/.${basename(path)}.${crypto.getRandomValues(new Uint8Array(8)).toHex()}.tmp`;
  let created = false;
  try {
    signal?.throwIfAborted();
    if (createParents) await Deno.mkdir(directory, { recursive: true, mode: 0o755 });
    const file = await Deno.open(temp, { write: true, createNew: true, mode });
    created = true;
    try {
      // The umask may have narrowed the mode at creation; set it exactly (it can only widen to `mode`).
      await Deno.chmod(temp, mode);
      for (let offset = 0; offset < bytes.length; offset += CHUNK_BYTES) {
        signal?.throwIfAborted();
        await writeAll(file, bytes.subarray(offset, offset + CHUNK_BYTES));
      }
      await file.sync();
    } finally {
      file.close();
    }
    signal?.throwIfAborted();
    await Deno.rename(temp, path);
    created = false;
    await syncDirectory(directory);
  } catch (error) {
    if (created) await removeIfExists(temp).catch(() => {});
    if (error instanceof AtomicWriteError) throw error;
    if (signal?.aborted) {
      throw new AtomicWriteError("aborted", path, `writing ${path} was aborted`, { cause: signal.reason });
    }
    throw new AtomicWriteError("failed", path, `writing ${path}: ${errorFirstLine(error)}`, { cause: error });
  }
}

/** Removes `path` if it exists; returns whether it did. Other failures are thrown as they are. */
export async function removeIfExists(path: string): Promise<boolean> {
  try {
    await Deno.remove(path);
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

async function writeAll(file: Deno.FsFile, bytes: Uint8Array): Promise<void> {
  for (let written = 0; written < bytes.length;) written += await file.write(bytes.subarray(written));
}

/** Makes a directory's entries durable (a new name in it survives a power loss once this resolves). */
export async function syncDirectory(directory: string): Promise<void> {
  const handle = await Deno.open(directory, { read: true });
  try {
    await handle.sync();
  } finally {
    handle.close();
  }
}
