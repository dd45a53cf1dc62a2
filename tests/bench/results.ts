/**
 * Where the benchmarks put their figures: one JSON file each (under the
 * git-ignored `bench-results/` by default).
 *
 * @module
 */
import { dirname } from "node:path";

/** Writes `figures` as indented JSON to `path`, creating its directory. */
export async function writeResults(path: string, figures: unknown): Promise<void> {
  await Deno.mkdir(dirname(path), { recursive: true });
  await Deno.writeTextFile(path, JSON.stringify(figures, null, 2) + "\n");
  console.log(`figures written to ${path}`);
}

/** The machine a benchmark ran on, for its results file; `extra` adds e.g. load averages. */
export function machineFigures(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { os: Deno.build.os, cores: navigator.hardwareConcurrency, deno: Deno.version.deno, ...extra };
}
