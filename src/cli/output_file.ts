/**
 * Files the CLI writes: secrets and the admin kubeconfig are created with
 * mode 0600 and never replace an existing file. The content goes to a
 * temporary file in the same directory first (written, fsynced), which is
 * then hard-linked to its name: the link fails when the name exists, so the
 * file appears complete or not at all and nothing is overwritten.
 *
 * @module
 */
import { basename, dirname } from "node:path";
import { AtomicWriteError, syncDirectory, writeFileAtomic } from "../fs/atomic_write.ts";
import { CliError, errorLine } from "./errors.ts";

/** Mode of every file the CLI writes: only the owner reads it. */
export const PRIVATE_FILE_MODE = 0o600;

/**
 * Creates `path` holding `data` (mode 0600); refuses when it exists.
 * `what` names the file in errors, e.g. "master secret file".
 *
 * @throws {CliError} "output": the file exists, or cannot be written (the message says why).
 */
export async function createNewFile(path: string, data: Uint8Array, what: string): Promise<void> {
  const temp = `${dirname(path)}/.${basename(path)}.${crypto.getRandomValues(new Uint8Array(6)).toHex()}.tmp`;
  try {
    const file = await Deno.open(temp, { write: true, createNew: true, mode: PRIVATE_FILE_MODE });
    try {
      await Deno.chmod(temp, PRIVATE_FILE_MODE);
      let offset = 0;
      while (offset < data.length) offset += await file.write(data.subarray(offset));
      await file.sync();
    } finally {
      file.close();
    }
    await Deno.link(temp, path);
  } catch (error) {
    if (error instanceof Deno.errors.AlreadyExists && (await exists(path))) {
      throw new CliError("output", `${what} ${path} already exists; it is never overwritten`);
    }
    throw new CliError("output", `cannot write ${what} ${path}: ${describeFsError(error, path, "write")}`, {
      cause: error,
    });
  } finally {
    await Deno.remove(temp).catch(() => {});
  }
  // The name should survive a power loss too (the cluster may be initialized with this secret right
  // after), but the file is written: a directory that cannot be synced does not undo that.
  await syncDirectory(dirname(path)).catch(() => {});
}

/**
 * Refuses early when `path` exists or its directory is missing, so a file
 * the CLI will create after a long operation (the kubeconfig after the init)
 * can be created then.
 *
 * @throws {CliError} "output" naming the file.
 */
export async function checkCreatable(path: string, what: string): Promise<void> {
  if (await exists(path)) {
    throw new CliError("output", `${what} ${path} already exists; move it away or choose another path`);
  }
  try {
    const info = await Deno.stat(dirname(path));
    if (!info.isDirectory) throw new Deno.errors.NotADirectory(`${dirname(path)} is not a directory`);
  } catch (error) {
    throw new CliError(
      "output",
      `cannot write ${what} ${path}: ${describeFsError(error, dirname(path), "write")}`,
      { cause: error },
    );
  }
}

/**
 * Writes `path` (mode 0600), replacing an existing file: for files that hold
 * no secret the operator needs to keep, e.g. the node's logs after a failure.
 *
 * @throws {CliError} "output" naming the file.
 */
export async function writePrivateFile(path: string, data: Uint8Array, what: string): Promise<void> {
  try {
    // Replaced through a temporary file: a symlink at `path` is replaced, never followed to its target.
    await writeFileAtomic(path, data, { mode: PRIVATE_FILE_MODE, createParents: false });
  } catch (error) {
    const cause = error instanceof AtomicWriteError ? error.cause : error;
    throw new CliError("output", `cannot write ${what} ${path}: ${describeFsError(cause, path, "write")}`, {
      cause: error,
    });
  }
}

/** Whether `path` exists (a dangling link counts: it would be followed). */
async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** A file system error in words, with the flag that widens Deno's permissions when they refused it. */
export function describeFsError(error: unknown, path: string, access: "read" | "write"): string {
  if (error instanceof Deno.errors.NotFound) return "no such file or directory";
  if (error instanceof Deno.errors.NotCapable) {
    return `outside the CLI's ${access} permissions (deno.json permission set "cli")`;
  }
  if (error instanceof Deno.errors.PermissionDenied) return "permission denied by the operating system";
  if (error instanceof Deno.errors.IsADirectory) return `${path} is a directory`;
  return errorLine(error);
}
