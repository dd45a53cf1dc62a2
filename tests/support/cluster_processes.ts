/**
 * The service processes of a running local cluster (local API, key
 * service, join service), found by name in its status, with their CPU
 * time, memory and open files read from /proc (`process_stats.ts`).
 *
 * @module
 */
import type { LocalCluster } from "../../src/localcluster/cluster.ts";
import { processCpuSeconds, processMemory, processOpenFiles } from "./process_stats.ts";

/** A service of the cluster: a short name and its process ID. */
export interface ClusterProcess {
  /** "join-service", "key-service" or "local-api". */
  name: string;
  /** Its process ID. */
  pid: number;
}

/** One reading of a process. */
export interface ProcessSample {
  /** CPU seconds so far. */
  cpuSeconds: number;
  /** Resident set size, MiB. */
  rssMiB: number;
  /** Its highest resident set size so far, MiB. */
  peakRssMiB: number;
  /** Open file descriptors (sockets included). */
  openFiles: number;
}

/** The join service, key service and local API of the cluster's first control plane. */
export function clusterServices(cluster: Pick<LocalCluster, "status">): ClusterProcess[] {
  const wanted = ["join-service", "key-service", "local-api"];
  return wanted.map((name) => {
    const process = cluster.status.processes.find((p) => p.name === name || p.name.endsWith(`/${name}`));
    if (process === undefined) throw new Error(`the cluster runs no ${name}`);
    return { name, pid: process.pid };
  });
}

/** Reads each process's CPU time, memory and open files, by name. */
export async function sampleProcesses(
  processes: readonly ClusterProcess[],
): Promise<Record<string, ProcessSample>> {
  const samples = await Promise.all(processes.map(async ({ pid }) => {
    const [cpuSeconds, memory, openFiles] = await Promise.all([
      processCpuSeconds(pid),
      processMemory(pid),
      processOpenFiles(pid),
    ]);
    return {
      cpuSeconds,
      rssMiB: memory.rssBytes / 2 ** 20,
      peakRssMiB: memory.peakRssBytes / 2 ** 20,
      openFiles,
    };
  }));
  return Object.fromEntries(processes.map(({ name }, i) => [name, samples[i]]));
}
