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
  } finally {
    await Deno.remove(stateDir, { recursive: true });
  }
}
