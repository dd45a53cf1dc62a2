/**
 * A fresh local cluster of one control plane in a temporary state
 * directory, for the join burst and soak: started, handed to a function,
 * then stopped and its directory removed whatever happened.
 *
 * @module
 */
import { type LocalCluster, startLocalCluster } from "../../src/localcluster/cluster.ts";

/**
 * Runs `fn` with a new one-control-plane cluster whose join services also
 * get `joinServiceFlags`; resolves to what `fn` resolves to.
 */
export async function withFreshCluster<T>(
  joinServiceFlags: readonly string[],
  fn: (cluster: LocalCluster) => Promise<T>,
): Promise<T> {
  const stateDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "local-cluster-" }));
  try {
    const cluster = await startLocalCluster({ stateDir, controlPlanes: 1, workers: 0, joinServiceFlags });
    try {
      return await fn(cluster);
    } finally {
      await cluster.close();
    }
  } catch (error) {
    // The state directory goes below, and with it the logs an error message points at.
    await printLogTails(`${stateDir}/logs`);
    throw error;
  } finally {
    await Deno.remove(stateDir, { recursive: true });
  }
}

/** Lines of each log file printed when a cluster fails. */
const LOG_TAIL_LINES = 30;

/**
 * Prints the last lines of every log in `dir` to stderr (the components' logs hold no secrets): what a
 * failed test leaves to read once its state directory is gone.
 */
export async function printLogTails(dir: string): Promise<void> {
  try {
    for await (const entry of Deno.readDir(dir)) {
      if (!entry.isFile) continue;
      const lines = (await Deno.readTextFile(`${dir}/${entry.name}`)).trimEnd().split("\n");
      console.error(
        `--- ${entry.name} (last ${LOG_TAIL_LINES} lines) ---\n${lines.slice(-LOG_TAIL_LINES).join("\n")}`,
      );
    }
  } catch (error) {
    console.error(`(no logs in ${dir}: ${(error as Error).message})`);
  }
}
