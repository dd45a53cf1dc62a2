/**
 * A temporary directory for the length of one test body.
 *
 * @module
 */

/** Runs `test` with a fresh temporary directory (name starting with `prefix`), removed afterwards. */
export async function withTempDir(prefix: string, test: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix });
  try {
    await test(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
