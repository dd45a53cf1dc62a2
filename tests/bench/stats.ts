/**
 * Small statistics for the benchmarks.
 *
 * @module
 */

/** The `p`-quantile (0–1) of ascending `sorted` values (nearest rank). */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
}
