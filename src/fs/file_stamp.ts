/**
 * A change stamp of files, so a value loaded from them (a CA, a pin) is
 * loaded again when they change, without a restart.
 *
 * @module
 */

/**
 * How often a service that serves many requests from files looks at them
 * again, at most: a change takes effect within this long, and the files are
 * not stat'ed on every request.
 */
export const FILE_CHECK_INTERVAL_MS = 1000;

/**
 * The modification time and size of each of `paths`, joined ("missing" for
 * a file that cannot be stat'ed): equal stamps mean unchanged files, as far
 * as the file system tells.
 */
export async function fileStamp(paths: readonly string[]): Promise<string> {
  const stats = await Promise.all(paths.map((path) => Deno.stat(path).catch(() => undefined)));
  return stats.map((stat) => stat ? `${stat.mtime?.getTime()}:${stat.size}` : "missing").join("|");
}
