/**
 * Cold start benchmark (part of `deno task bench`): how long each built
 * artifact takes from spawn until it is ready, against a baseline measured
 * the same way in the same run.
 *
 * - Ready: the services (key service, join service, bootstrapper, local API,
 *   console) once they log their "listening" line (the port is then checked
 *   to accept a connection, untimed); the CLI once `cli --help` has exited.
 * - Baseline: a minimal HTTP/2 server (`h2_baseline_server.ts`, `node:http2`)
 *   built by the build's own code (`buildComponent`: an esbuild bundle and
 *   the same launcher) with a permission flag of the same kind
 *   (`--allow-net=127.0.0.1`).
 * - Every start runs the launcher as its `#!/bin/sh` line does, with the
 *   pinned Deno (`DENO`), from `/`, with its inputs inside its permission set
 *   (the key and join services' under /var/config, so it must run as root).
 *
 * Two kinds of start, both measured for every artifact and the baseline:
 *
 * - **first**: the first start after a build on this machine: Deno's cache
 *   (`DENO_DIR`, where it keeps V8's code cache of each module it ran) is a
 *   new empty directory, so V8 compiles the bundle from source;
 * - **warm**: a later start: `DENO_DIR` holds the code cache of a start
 *   before.
 *
 * The OS page cache is warm in both (the Deno binary and the bundles were
 * read moments before); dropping it would disturb the machine's other users.
 * Rounds interleave the artifacts and the baseline, so load from other
 * processes falls on all of them; the load average is recorded.
 *
 * Two measures of each start:
 *
 * - **wall**: milliseconds from spawn until ready, the measure of the
 *   issue's target;
 * - **CPU**: the CPU time (user and system, every thread) the process used
 *   from spawn until it ended, right after it was ready and stopped: the
 *   benchmark's children's CPU time (`cutime + cstime` of its /proc entry,
 *   10 ms ticks) before and after. It says what a start costs whatever else
 *   runs: other sessions on the machine stretch the wall time of a start
 *   several times, its CPU time much less.
 *
 * Every figure is a median over `--rounds` (default 7) with its range; the
 * ratio is the artifact's median ÷ the baseline's, per kind and measure. The
 * figures go to `bench-results/cold_start.json` (`--out`). `--dist DIR` measures
 * the artifacts in DIR (e.g. a copy of an earlier build) instead of building
 * the checkout's.
 *
 * ```sh
 * deno run -P=tests --no-prompt tests/bench/cold_start.ts [--rounds 7] [--out FILE] [--dist DIR]
 * ```
 *
 * @module
 */
import { machineFigures, writeResults } from "./results.ts";
import { buildComponent, type Component } from "../../scripts/build.ts";
import { CONSOLE_LISTENING } from "../../src/console/main.ts";
import { parseCount, parseFlags } from "../../src/flags/flags.ts";
import { BOOTSTRAPPER_LISTENING } from "../../src/localcluster/node.ts";
import { runToExit, startService } from "../../src/os/service_process.ts";
import { buildArtifacts, DIST, PINNED_DENO } from "../build/artifacts.ts";
import {
  CONFIG_DIR,
  ensureConfigDir,
  joinServiceArgs,
  writeJoinServiceInputs,
} from "../build/service_inputs.ts";
import { KEY_SERVICE_LISTENING, REPO_ROOT, writeSecrets } from "../keyservice/key_service_process.ts";
import { JOIN_SERVICE_LISTENING } from "../support/join_cluster.ts";
import { childrenCpuSeconds } from "../support/process_stats.ts";
import { percentile } from "./stats.ts";

/** The target: every artifact's start within this many times the baseline's. */
const TARGET_RATIO = 1.3;
const BASELINE = "baseline";
/** The local API's "listening" line (logged once its port is bound). */
const LOCAL_API_LISTENING = /"msg":"listening".*"port":(\d+)/;

const flags = parseFlags(Deno.args, {
  rounds: { type: "string", default: "7" },
  out: { type: "string", default: "bench-results/cold_start.json" },
  dist: { type: "string", default: "" },
}, "cold start benchmark");
const rounds = parseCount(flags.rounds, "--rounds");
/** Where the artifacts are, with a trailing slash. */
const dist = flags.dist ? `${await Deno.realPath(flags.dist)}/` : DIST;

/** What is started: a launcher with its arguments, ready at a log line or, without one, at its exit. */
interface Target {
  name: string;
  launcher: string;
  args: string[];
  ready?: RegExp;
}

type Kind = "first" | "warm";
const KINDS: readonly Kind[] = ["first", "warm"];
type Measure = "wall" | "cpu";
const MEASURES: readonly Measure[] = ["wall", "cpu"];

/**
 * Spawns `target` with Deno's cache in `denoDir`; resolves to the
 * milliseconds until it was ready, and the CPU milliseconds it used in all.
 */
async function startOnce(target: Target, denoDir: string): Promise<Record<Measure, number>> {
  const options = { env: { DENO: PINNED_DENO, DENO_DIR: denoDir }, cwd: "/" };
  const cpuBefore = await childrenCpuSeconds(Deno.pid);
  const started = performance.now();
  let wall: number;
  if (target.ready === undefined) {
    const result = await runToExit("sh", [target.launcher, ...target.args], options);
    wall = performance.now() - started;
    if (result.code !== 0) {
      throw new Error(`${target.name} exited ${result.code}: ${result.stderrLines.join("\n")}`);
    }
  } else {
    const service = await startService("sh", [target.launcher, ...target.args], {
      ...options,
      readyMatch: target.ready,
    });
    wall = performance.now() - started;
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port: service.port })).close();
    } finally {
      // Resolves once the process has ended and been waited for: its CPU time is in ours.
      await service.stop();
    }
  }
  return { wall, cpu: (await childrenCpuSeconds(Deno.pid) - cpuBefore) * 1000 };
}

/** Builds the baseline server into `root`/dist as the build builds a component; returns its launcher. */
async function buildBaseline(root: string): Promise<string> {
  const component: Component = {
    name: "h2-baseline",
    entry: `${REPO_ROOT}tests/bench/h2_baseline_server.ts`,
    permissionSet: BASELINE,
  };
  const denoVersion = JSON.parse(await Deno.readTextFile(`${REPO_ROOT}package.json`)).devDependencies.deno;
  const config = { permissions: { [BASELINE]: { net: ["127.0.0.1"] } } };
  await buildComponent(root, { config, denoVersion }, component);
  return `${root}/dist/${component.name}`;
}

/**
 * One target's starts of one kind, by one measure: median and range, the
 * ratio of its median to the baseline's, every sample.
 */
interface StartFigures {
  medianMs: number;
  minMs: number;
  maxMs: number;
  ratio: number;
  samplesMs: number[];
}

/** Median and range of `samples`. */
function summarize(samples: number[]): { medianMs: number; minMs: number; maxMs: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  return { medianMs: percentile(sorted, 0.5), minMs: sorted[0], maxMs: sorted.at(-1)! };
}

/** The load average (1, 5, 15 minutes), rounded: other sessions share the machine. */
const loadAverage = () => Deno.loadavg().map((load) => Number(load.toFixed(2)));
const loadAverageAtStart = loadAverage();
if (!flags.dist) await buildArtifacts();
const work = await Deno.makeTempDir({ prefix: "cold-start-" });
const createdConfigDir = await ensureConfigDir();
const inputs = await Deno.makeTempDir({ dir: CONFIG_DIR, prefix: "cold-start-" });
const stack = new AsyncDisposableStack();
try {
  stack.defer(async () => {
    await Deno.remove(inputs, { recursive: true });
    if (createdConfigDir) await Deno.remove(CONFIG_DIR).catch(() => {});
    await Deno.remove(work, { recursive: true });
  });
  const baseline = await buildBaseline(work);

  const secrets = await writeSecrets(
    {
      masterSecret: crypto.getRandomValues(new Uint8Array(32)),
      salt: crypto.getRandomValues(new Uint8Array(32)),
    },
    inputs,
  );
  const keyServiceArgs = [
    ...["--port", "0", "--listen-address", "127.0.0.1"],
    ...["--master-secret", secrets.masterSecretPath, "--salt", secrets.saltPath],
  ];
  // The join service's key service, running throughout (not measured).
  const keyService = await startService("sh", [`${dist}key-service`, ...keyServiceArgs], {
    readyMatch: KEY_SERVICE_LISTENING,
    env: { DENO: PINNED_DENO },
    cwd: "/",
  });
  stack.defer(() => keyService.stop().then(() => {}));
  await writeJoinServiceInputs(inputs);

  // A node's root with its first-boot key, and a blank state disk (read only after the init server listens).
  const node = `${work}/node`;
  await Deno.mkdir(`${node}/root/run/cryptsetup-keys.d`, { recursive: true });
  await Deno.writeFile(
    `${node}/root/run/cryptsetup-keys.d/state.key`,
    crypto.getRandomValues(new Uint8Array(32)),
  );
  await Deno.writeFile(`${node}/disk.img`, new Uint8Array(4096));

  const targets: Target[] = [
    { name: BASELINE, launcher: baseline, args: [], ready: /"msg":"listening".*"port":(\d+)/ },
    {
      name: "key-service",
      launcher: `${dist}key-service`,
      args: keyServiceArgs,
      ready: KEY_SERVICE_LISTENING,
    },
    {
      name: "join-service",
      launcher: `${dist}join-service`,
      args: joinServiceArgs(inputs, keyService.port),
      ready: JOIN_SERVICE_LISTENING,
    },
    {
      name: "bootstrapper",
      launcher: `${dist}bootstrapper`,
      args: [
        ...["--attestation-variant", "dummy", "--tpm", "none", "--root", `${node}/root`],
        ...["--state-disk", `${node}/disk.img`, "--metadata-url", "http://127.0.0.1:9"],
        ...["--systemctl", "none", "--journalctl", "none", "--port", "0", "--listen-address", "127.0.0.1"],
      ],
      ready: BOOTSTRAPPER_LISTENING,
    },
    {
      name: "local-api",
      launcher: `${dist}local-api`,
      args: ["--pki-dir", `${work}/pki`, "--in-memory", "--port", "0"],
      ready: LOCAL_API_LISTENING,
    },
    { name: "console", launcher: `${dist}console`, args: ["--port", "0"], ready: CONSOLE_LISTENING },
    { name: "cli --help", launcher: `${dist}cli`, args: ["--help"] },
  ];

  // A Deno cache of its own for each target's warm starts, primed by a start, as deployed (deploy/ gives the
  // bootstrapper's units one CacheDirectory= and each container its own emptyDir). With one cache for all,
  // the services' cached code did not survive the starts of targets without their V8 flags in between (the
  // key service's warm start took 122-188 ms with a `cli --help` before each, 67-75 ms without its flags).
  const warmDirs = new Map(
    targets.map(({ name }) => [name, `${work}/deno-dir-warm-${name.replace(/\W+/g, "-")}`]),
  );
  for (const target of targets) await startOnce(target, warmDirs.get(target.name)!);

  const samples: Record<Kind, Record<Measure, Record<string, number[]>>> = {
    first: { wall: {}, cpu: {} },
    warm: { wall: {}, cpu: {} },
  };
  for (let round = 0; round < rounds; round++) {
    // A different order each round: no target always starts right after the same one.
    const order = targets.map((_, i) => targets[(i + round) % targets.length]);
    for (const target of order) {
      const firstDir = await Deno.makeTempDir({ dir: work, prefix: "deno-dir-first-" });
      const measured = {
        first: await startOnce(target, firstDir),
        warm: await startOnce(target, warmDirs.get(target.name)!),
      };
      await Deno.remove(firstDir, { recursive: true });
      for (const kind of KINDS) {
        for (const measure of MEASURES) {
          (samples[kind][measure][target.name] ??= []).push(measured[kind][measure]);
        }
      }
    }
    console.error(`round ${round + 1}/${rounds} done (load average ${loadAverage().join(" ")})`);
  }

  const results = {} as Record<Kind, Record<Measure, Record<string, StartFigures>>>;
  for (const kind of KINDS) {
    results[kind] = { wall: {}, cpu: {} };
    for (const measure of MEASURES) {
      const base = summarize(samples[kind][measure][BASELINE]).medianMs;
      for (const { name } of targets) {
        const taken = samples[kind][measure][name];
        const summary = summarize(taken);
        results[kind][measure][name] = { ...summary, ratio: summary.medianMs / base, samplesMs: taken };
      }
    }
  }

  const loadAverageAtEnd = loadAverage();
  console.log(
    `cold start, ${rounds} rounds, median (min–max) ms and ratio to the baseline (a minimal node:http2 server ` +
      `built and started the same way); load average ${loadAverageAtStart.join(" ")} → ${
        loadAverageAtEnd.join(" ")
      }`,
  );
  const columns = KINDS.flatMap((kind) => MEASURES.map((measure) => ({ kind, measure })));
  console.log(
    `  ${"".padEnd(14)} ${columns.map(({ kind, measure }) => `${kind}, ${measure}`.padEnd(26)).join(" ")}`,
  );
  for (const { name } of targets) {
    const cells = columns.map(({ kind, measure }) => {
      const r = results[kind][measure][name];
      const ratio = name === BASELINE ? "" : ` ${r.ratio.toFixed(2)}×${r.ratio > TARGET_RATIO ? "!" : ""}`;
      return `${r.medianMs.toFixed(0)} (${r.minMs.toFixed(0)}–${r.maxMs.toFixed(0)})${ratio}`.padEnd(26);
    });
    console.log(`  ${name.padEnd(14)} ${cells.join(" ")}`);
  }
  console.log(
    "  first: Deno's cache empty (the first start after a build); warm: its code cache filled; " +
      "wall: spawn to ready; cpu: the process's CPU time in all",
  );
  console.log(`  (! over the target of ${TARGET_RATIO}×)`);

  await writeResults(flags.out, {
    date: new Date().toISOString(),
    machine: machineFigures({ loadAverageAtStart, loadAverageAtEnd }),
    rounds,
    targetRatio: TARGET_RATIO,
    ready: Object.fromEntries(targets.map((t) => [t.name, t.ready ? String(t.ready) : "exit 0"])),
    results,
  });
} finally {
  await stack.disposeAsync();
}
