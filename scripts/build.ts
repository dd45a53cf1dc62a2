/**
 * Builds every component into `dist/` with its permission set baked in
 * (`deno task build`, permission set `build`).
 *
 * A component's permissions are its deno.json permission set, expanded into
 * explicit `--allow-*` flags, so one definition serves `deno run -P`, the
 * tests and the artifacts; its other runtime flags (the join service's heap
 * settings) come from its module, as they do for every other way it is
 * started.
 *
 * Every component is first bundled into `dist/<name>.js` by esbuild, installed
 * from package.json like every other dependency (see {@linkcode ESBUILD_FLAGS}).
 *
 * - With `DENORT_BIN` set (a `denort` runtime for `deno compile`, which cannot
 *   be downloaded on our machines): the bundle is compiled (`deno compile`
 *   with the flags) into the single executable `dist/<name>`.
 * - Otherwise: the bundle stays, next to the launcher `dist/<name>` (sh)
 *   that runs it with the pinned Deno (`$DENO`, or `deno` on PATH) under
 *   exactly those flags:
 *   `exec "${DENO:-deno}" run --no-config --no-prompt <flags> <dir>/<name>.js "$@"`.
 *
 * Permission paths must be absolute: an artifact runs from anywhere.
 *
 * @module
 */
import { JOIN_SERVICE_DENO_FLAGS } from "../src/joinservice/runtime.ts";

/** A component to build. */
export interface Component {
  /** Artifact name in dist/. */
  name: string;
  /** Entry point, relative to the repository root. */
  entry: string;
  /** Name of its permission set in deno.json. */
  permissionSet: string;
  /** Runtime flags besides its permissions (e.g. `--v8-flags=…`). */
  runtimeFlags?: readonly string[];
}

/** Every component, built in this order. */
export const COMPONENTS: readonly Component[] = [
  { name: "key-service", entry: "src/keyservice/main.ts", permissionSet: "key-service" },
  {
    name: "join-service",
    entry: "src/joinservice/main.ts",
    permissionSet: "join-service",
    runtimeFlags: JOIN_SERVICE_DENO_FLAGS,
  },
  { name: "bootstrapper", entry: "src/bootstrapper/main.ts", permissionSet: "bootstrapper" },
  { name: "local-api", entry: "src/localapi/main.ts", permissionSet: "local-api" },
  { name: "cli", entry: "src/cli/main.ts", permissionSet: "cli" },
];

/** A deno.json permission value: all, none, a list, or allow/deny/ignore lists. */
type PermissionValue = boolean | string[] | {
  allow?: boolean | string[];
  deny?: boolean | string[];
  ignore?: boolean | string[];
};

/** Permission kinds a set may grant; `all` (-A) is never accepted. */
const PERMISSION_KINDS = ["read", "write", "net", "env", "sys", "run", "ffi", "import"] as const;

/** Kinds whose entries are file paths (must be absolute in an artifact). */
const PATH_KINDS = new Set(["read", "write", "ffi"]);

/** A build failure with a message for the operator. */
export class BuildError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BuildError";
  }
}

/**
 * Expands the deno.json permission set `name` into explicit flags, e.g.
 * `--allow-read=/var/config`, `--allow-net=127.0.0.1,localhost`.
 *
 * @throws {BuildError} for a missing set, an unknown or `all` permission, a
 * relative path, or a value with a comma (Deno's list separator).
 */
export function permissionFlags(config: unknown, name: string): string[] {
  const sets = (config as { permissions?: Record<string, unknown> })?.permissions;
  const set = sets?.[name];
  if (typeof set !== "object" || set === null || Array.isArray(set)) {
    throw new BuildError(`deno.json has no permission set "${name}"`);
  }
  const flags: string[] = [];
  for (const [kind, value] of Object.entries(set as Record<string, PermissionValue>)) {
    if (!(PERMISSION_KINDS as readonly string[]).includes(kind)) {
      throw new BuildError(`permission set "${name}": "${kind}" is not allowed in an artifact`);
    }
    const rules = typeof value === "object" && !Array.isArray(value) ? value : { allow: value };
    for (const [rule, ruleValue] of Object.entries(rules)) {
      if (!["allow", "deny", "ignore"].includes(rule)) {
        throw new BuildError(`permission set "${name}": unknown rule "${kind}.${rule}"`);
      }
      flags.push(...ruleFlag(name, kind, rule, ruleValue as boolean | string[]));
    }
  }
  return flags;
}

function ruleFlag(set: string, kind: string, rule: string, value: boolean | string[] | undefined): string[] {
  if (value === true) return [`--${rule}-${kind}`];
  if (value === false || value === undefined) return [];
  if (!Array.isArray(value) || value.some((entry) => typeof entry !== "string")) {
    throw new BuildError(`permission set "${set}": ${kind} must be true, false or a list of strings`);
  }
  if (value.length === 0) return [];
  for (const entry of value) {
    if (entry.includes(",")) {
      throw new BuildError(`permission set "${set}": ${kind} entry "${entry}" has a comma`);
    }
    if (PATH_KINDS.has(kind) && !entry.startsWith("/")) {
      throw new BuildError(
        `permission set "${set}": ${kind} path "${entry}" must be absolute in an artifact`,
      );
    }
  }
  return [`--${rule}-${kind}=${value.join(",")}`];
}

/** Quotes `value` for a POSIX shell. */
function shellQuote(value: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`;
}

/** The sh launcher that runs `<name>.js` next to it under `flags`. */
export function launcherScript(component: Component, flags: string[]): string {
  return `#!/bin/sh
# ${component.name}: runs ${component.name}.js (built by scripts/build.ts from ${component.entry})
# with the Deno in $DENO (default: deno on PATH) and the "${component.permissionSet}" permission set.
dir=$(dirname -- "$(readlink -f -- "$0")")
export DENO_NO_UPDATE_CHECK=1
exec "\${DENO:-deno}" run --no-config --no-prompt ${
    flags.map(shellQuote).join(" ")
  } "$dir/${component.name}.js" "$@"
`;
}

/**
 * esbuild flags that give the bundle `deno bundle --platform=deno --minify`
 * gives (Deno 2.9.6 runs the same esbuild, 0.25.5; the bundles hold the same
 * modules). `deno bundle` would download its own esbuild with Deno's HTTP
 * client on first use, outside `npm ci`, and fail on a machine whose
 * registry access needs a CA that only npm is given.
 */
export const ESBUILD_FLAGS: readonly string[] = [
  "--bundle",
  "--format=esm",
  "--platform=node",
  "--minify",
  "--log-level=warning",
  // Pick the packages' entry points Deno's bundler picks: ES modules first, the deno and node conditions.
  "--main-fields=module,main",
  "--conditions=deno,node",
  // CommonJS modules in the bundle call require() (e.g. yaml, reflect-metadata): give them Deno's, as
  // `deno bundle` does, instead of esbuild's stub that throws in an ES module.
  `--banner:js=import{createRequire}from"node:module";const require=createRequire(import.meta.url);`,
];

/** Runs `program args` in `cwd` (a program on PATH: node_modules/.bin under `deno task`). */
async function run(program: "deno" | "esbuild", args: string[], cwd: string): Promise<void> {
  let output: Deno.CommandOutput;
  try {
    output = await new Deno.Command(program, { args, cwd, stdin: "null" }).output();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new BuildError(
        `${program} is not on PATH (run \`npm ci\`, then \`deno task build\`; or add node_modules/.bin to PATH)`,
      );
    }
    throw err;
  }
  if (!output.success) {
    const stderr = new TextDecoder().decode(output.stderr).trim();
    throw new BuildError(`${program} ${args[0]} failed (exit ${output.code}):\n${stderr}`);
  }
}

function formatSize(bytes: number): string {
  return bytes >= 1 << 20 ? `${(bytes / (1 << 20)).toFixed(1)} MiB` : `${(bytes / 1024).toFixed(0)} KiB`;
}

/** Builds `component` into `root`/dist; returns what was built, one line per artifact. */
export async function buildComponent(root: string, config: unknown, component: Component): Promise<string[]> {
  const flags = [...permissionFlags(config, component.permissionSet), ...component.runtimeFlags ?? []];
  const out = `dist/${component.name}`;
  await Deno.mkdir(`${root}/dist`, { recursive: true });
  await run("esbuild", [component.entry, ...ESBUILD_FLAGS, `--outfile=${out}.js`], root);
  if (Deno.env.get("DENORT_BIN")) {
    // Compiling the bundle, not the entry, embeds one file instead of all of node_modules.
    await run(
      "deno",
      ["compile", "--quiet", "--no-config", "--no-prompt", ...flags, "-o", out, `${out}.js`],
      root,
    );
    await Deno.remove(`${root}/${out}.js`);
    return [
      `${out} (${formatSize((await Deno.stat(`${root}/${out}`)).size)}, deno compile: ${flags.join(" ")})`,
    ];
  }
  await Deno.writeTextFile(`${root}/${out}`, launcherScript(component, flags));
  await Deno.chmod(`${root}/${out}`, 0o755);
  return [
    `${out}.js (${formatSize((await Deno.stat(`${root}/${out}.js`)).size)}, esbuild)`,
    `${out} (launcher: ${flags.join(" ")})`,
  ];
}

async function main(args: string[]): Promise<number> {
  if (args.length > 0) {
    console.error(`build: unexpected arguments ${args.join(" ")}: the build takes none`);
    return 2;
  }
  const root = decodeURIComponent(new URL("..", import.meta.url).pathname).replace(/\/$/, "");
  try {
    let config: unknown;
    try {
      config = JSON.parse(await Deno.readTextFile(`${root}/deno.json`));
    } catch (err) {
      throw new BuildError(`cannot read deno.json: ${(err as Error).message}`);
    }
    for (const component of COMPONENTS) {
      for (const line of await buildComponent(root, config, component)) console.log(`built ${line}`);
    }
    return 0;
  } catch (err) {
    if (!(err instanceof BuildError)) throw err;
    console.error(`build: ${err.message}`);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
