/**
 * A change stamp of files, so a value loaded from them (a CA, a pin) is
 * loaded again when they change, without a restart.
 *
 * @module
 */

/**
 * The modification time and size of each of `paths`, joined ("missing" for
 * a file that cannot be stat'ed): equal stamps mean unchanged files, as far
 * as the file system tells.
 */
export async function fileStamp(paths: readonly string[]): Promise<string> {
  const stats = await Promise.all(paths.map((path) => Deno.stat(path).catch(() => undefined)));
  return stats.map((stat) => stat ? `${stat.mtime?.getTime()}:${stat.size}` : "missing").join("|");
}
