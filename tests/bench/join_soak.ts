/**
 * A soak of the local cluster's join service (`deno task soak`, 10 minutes
 * by default): nodes join at a steady rate with connection churn while
 * the join service's, key service's and local API's memory and open files
 * and the API's token Secrets and JoiningNodes are sampled, and checked
 * against bounds (`tests/support/join_soak.ts`).
 *
 * The cluster is a fresh local cluster (one control plane) whose join
 * service issues tokens with `--token-ttl` seconds of life (default 60;
 * the product's default is 15 minutes, longer than the soak), so the local
 * API's token cleaner (every 10 s) must keep the tokens bounded; node names
 * cycle through `--name-pool` names, which bounds the JoiningNodes. Most
 * nodes open a new connection; `--reuse-share` of them go over 4
 * long-lived connections.
 *
 * Prints one line per sample and a summary; the figures go to
 * `bench-results/join_soak.json`. Exits 1 when a node failed or a bound
 * was exceeded.
 *
 * ```sh
 * deno run -P=tests --no-prompt tests/bench/join_soak.ts [--minutes 10] [--rate 10] [--token-ttl 60] \
 *   [--name-pool 200] [--reuse-share 0.2] [--sample-interval 5] [--out FILE]
 * ```
 *
 * @module
 */
import { parseCount, parseFlags, parsePositive } from "../../src/flags/flags.ts";
import { ONE_ADDRESS_JOIN_SERVICE_FLAGS } from "../support/join_burst.ts";
import { withFreshCluster } from "../support/fresh_local_cluster.ts";
import { boundViolations, runJoinSoak, soakBounds, type SoakSample } from "../support/join_soak.ts";
import { machineFigures, writeResults } from "./results.ts";

const flags = parseFlags(Deno.args, {
  minutes: { type: "string", default: "10" },
  rate: { type: "string", default: "10" },
  "token-ttl": { type: "string", default: "60" },
  "name-pool": { type: "string", default: "200" },
  "reuse-share": { type: "string", default: "0.2" },
  "sample-interval": { type: "string", default: "5" },
  out: { type: "string", default: "bench-results/join_soak.json" },
}, "join soak");
const minutes = parsePositive(flags.minutes, "--minutes");
const ratePerSecond = parsePositive(flags.rate, "--rate");
const tokenTtlSeconds = parseCount(flags["token-ttl"], "--token-ttl");
const namePool = parseCount(flags["name-pool"], "--name-pool");
const reuseShare = Math.min(1, parsePositive(flags["reuse-share"], "--reuse-share"));
const sampleIntervalMs = parsePositive(flags["sample-interval"], "--sample-interval") * 1000;
const bounds = soakBounds({ ratePerSecond, tokenTtlSeconds, namePool });

console.log(
  `join soak: ${minutes} min at ${ratePerSecond} nodes/s (${
    reuseShare * 100
  } % over 4 long-lived connections, ` +
    `the rest a new connection each), token TTL ${tokenTtlSeconds} s, ${namePool} node names; ` +
    `${Deno.build.os} ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}`,
);
console.log(
  `bounds: RSS MiB ${
    JSON.stringify(bounds.rssMiB)
  }, open files ≤ ${bounds.openFiles}, tokens ≤ ${bounds.tokens}, JoiningNodes ≤ ${bounds.joiningNodes}`,
);
console.log(
  "     t  joined failed flight | RSS MiB join  key  api | open files join key api | tokens joiningnodes | load",
);

const loads: number[][] = [];
const result = await withFreshCluster(
  [...ONE_ADDRESS_JOIN_SERVICE_FLAGS, "--bootstrap-token-ttl", String(tokenTtlSeconds)],
  (cluster) =>
    runJoinSoak({
      cluster,
      durationMs: minutes * 60_000,
      ratePerSecond,
      reuseShare,
      namePool,
      sampleIntervalMs,
      onSample(sample) {
        loads.push(Deno.loadavg());
        console.log(row(sample));
      },
    }),
);

const violations = boundViolations(result.samples, bounds);
const { samples, ...summary } = result;
const spreadOf = (values: number[]) => ({
  first: values[0],
  min: Math.min(...values),
  max: Math.max(...values),
  last: values.at(-1)!,
});
const perProcess = Object.fromEntries(
  Object.keys(samples[0].processes).map((name) => [name, {
    rssMiB: spreadOf(samples.map((s) => s.processes[name].rssMiB)),
    openFiles: spreadOf(samples.map((s) => s.processes[name].openFiles)),
    cpuMsPerNode: (samples.at(-1)!.processes[name].cpuSeconds - samples[0].processes[name].cpuSeconds) *
      1000 /
      Math.max(1, result.started),
  }]),
);
const objects = {
  tokens: spreadOf(samples.map((s) => s.tokens)),
  joiningNodes: spreadOf(samples.map((s) => s.joiningNodes)),
};
console.log(
  `\n${result.started} nodes in ${
    result.seconds.toFixed(0)
  } s: ${result.joined} joined, ${result.failed} failed, ` +
    `${result.firstAttemptFailures} with a failed first request ${JSON.stringify(result.failureReasons)}, ` +
    `${result.skipped} arrivals skipped (in flight at the limit), ${result.overReusedConnections} over reused ` +
    `connections; join p50 ${result.joinMs.p50.toFixed(0)} ms, p99 ${result.joinMs.p99.toFixed(0)} ms`,
);
for (const [name, p] of Object.entries(perProcess)) {
  console.log(
    `${name.padEnd(13)} RSS MiB first ${p.rssMiB.first.toFixed(0)}, max ${p.rssMiB.max.toFixed(0)}, last ${
      p.rssMiB.last.toFixed(0)
    }; open files first ${p.openFiles.first}, max ${p.openFiles.max}, last ${p.openFiles.last}; CPU ${
      p.cpuMsPerNode.toFixed(1)
    } ms/node`,
  );
}
console.log(
  `tokens max ${objects.tokens.max}, last ${objects.tokens.last} (${result.joined} issued); JoiningNodes max ${objects.joiningNodes.max}`,
);
for (const message of result.failureMessages) console.log(`  failure: ${message}`);
console.log(
  violations.length === 0
    ? "every sample within the bounds"
    : `BOUNDS EXCEEDED:\n  ${violations.join("\n  ")}`,
);

await writeResults(flags.out, {
  date: new Date().toISOString(),
  machine: machineFigures(),
  settings: { minutes, ratePerSecond, tokenTtlSeconds, namePool, reuseShare, sampleIntervalMs },
  bounds,
  violations,
  summary,
  perProcess,
  objects,
  samples: samples.map((s, i) => ({ ...s, loadAverage: loads[i] })),
});
if (violations.length > 0 || result.failed > 0) Deno.exit(1);

function row(s: SoakSample): string {
  const names = ["join-service", "key-service", "local-api"];
  return [
    s.t.toFixed(0).padStart(6),
    String(s.joined).padStart(7),
    String(s.failed).padStart(6),
    String(s.inFlight).padStart(6),
    "|" + " ".repeat(8),
    names.map((n) => s.processes[n].rssMiB.toFixed(0).padStart(4)).join(" "),
    "|" + " ".repeat(11),
    names.map((n) => String(s.processes[n].openFiles).padStart(3)).join(" "),
    "|",
    String(s.tokens).padStart(6),
    String(s.joiningNodes).padStart(12),
    "|",
    Deno.loadavg()[0].toFixed(1),
  ].join(" ");
}
