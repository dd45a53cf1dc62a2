/**
 * The runtime settings the join service runs with, wherever it is started
 * (`deno task join-service`, the artifacts of `scripts/build.ts`, the local
 * cluster, the tests).
 *
 * Its JavaScript heap is kept close to what is live. With V8's defaults, a
 * burst of joiners grows it to about three times that: the young generation
 * to 2 × 16 MiB, and the old generation, where the state of every call still
 * waiting ends up, to several times its live size before a full collection.
 * At 512 concurrent joiners that was ~320 MiB of RSS for ~50 MiB live. A
 * 4 MiB young generation and an old generation grown by 20 % keep it near
 * 160 MiB, for somewhat more collection work during such a burst (the load
 * benchmark, `tests/bench/join_load.ts`, measures both).
 *
 * @module
 */

/** V8 flags of the join service (see the module documentation). */
export const JOIN_SERVICE_V8_FLAGS: readonly string[] = [
  "--max-semi-space-size=4",
  "--heap-growing-percent=20",
];

/** The flags of `deno run` and `deno compile` that apply {@linkcode JOIN_SERVICE_V8_FLAGS}. */
export const JOIN_SERVICE_DENO_FLAGS: readonly string[] = [`--v8-flags=${JOIN_SERVICE_V8_FLAGS.join(",")}`];
