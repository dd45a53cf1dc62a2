/**
 * The runtime settings the two long-running services, the join service and
 * the key service, run with wherever they are started (`deno task
 * join-service` / `key-service`, the artifacts of `scripts/build.ts`, the
 * Kubernetes manifests, the local cluster, the tests).
 *
 * They trust no root certificate store ({@linkcode SERVICE_ENV}).
 *
 * Their JavaScript heap is kept close to what is live. With V8's defaults:
 *
 * - a burst of joiners grows the join service's heap to about three times
 *   that: the young generation to 2 × 16 MiB, and the old generation, where
 *   the state of every call still waiting ends up, to several times its
 *   live size before a full collection. At 512 concurrent joiners that was
 *   ~320 MiB of RSS for ~50 MiB live;
 * - a steady stream of `GetDataKey` calls (250/s) kept the key service at
 *   167–177 MiB of RSS, of which a few MiB are live; it fell back only when
 *   a full collection came (a 10-minute soak at 10 joins/s saw 64 → 134 →
 *   87 MiB).
 *
 * A 4 MiB young generation and an old generation grown by 20 % keep the join
 * service near 130 MiB at 512 joiners and the key service near 100 MiB
 * under that stream, for somewhat more collection work (the load benchmark,
 * `tests/bench/join_load.ts`, measures both).
 *
 * @module
 */

/** V8 flags of the services (see the module documentation). */
export const SERVICE_V8_FLAGS: readonly string[] = [
  "--max-semi-space-size=4",
  "--heap-growing-percent=20",
];

/** The flags of `deno run` and `deno compile` that apply {@linkcode SERVICE_V8_FLAGS}. */
export const SERVICE_DENO_FLAGS: readonly string[] = [`--v8-flags=${SERVICE_V8_FLAGS.join(",")}`];

/**
 * The environment of the services: Deno's root certificate store left empty
 * (`DENO_TLS_CA_STORE` set to nothing), so the join service trusts exactly
 * the CAs it is given: the API server's, from the kubeconfig or the service
 * account. `Deno.createHttpClient({ caCerts })` adds them to that store
 * instead of replacing it, so with Deno's default (Mozilla's roots) an API
 * server address that a public CA certifies could be impersonated, and would
 * receive the service's credentials and the bootstrap tokens it writes. The
 * key service opens no TLS connection; it runs the same way. Whoever starts
 * a service with an inherited environment also removes
 * {@linkcode SERVICE_ENV_REMOVED}.
 */
export const SERVICE_ENV: Readonly<Record<string, string>> = { DENO_TLS_CA_STORE: "" };

/** Variables removed from a service's environment: `DENO_CERT` names a CA file Deno adds to the store. */
export const SERVICE_ENV_REMOVED: readonly string[] = ["DENO_CERT"];
