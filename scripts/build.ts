/**
 * Builds every component into `dist/` with its permission set baked in
 * (`deno task build`, permission set `build`); `scripts/build.ts <name>…`
 * builds only the components named (`deno task console` builds the console).
 *
 * A component's permissions are its deno.json permission set, expanded into
 * explicit `--allow-*` flags, so one definition serves `deno run -P`, the
 * tests and the artifacts; its other runtime flags (the services' heap
 * settings, `src/os/service_runtime.ts`) come from that module, as they do
 * for every other way the services are started.
 *
 * Every component is first bundled into `dist/<name>.js` by esbuild, installed
 * from package.json like every other dependency (see {@linkcode ESBUILD_OPTIONS});
 * the descriptors protobuf-es embeds as base64 are decoded by the build
 * (`scripts/embedded_descriptors.ts`), and a component's `lazyBuiltins` are
 * loaded when first used, not at its start.
 *
 * - With `DENORT_BIN` set (a `denort` runtime for `deno compile`, which cannot
 *   be downloaded on our machines): the bundle is compiled (`deno compile`
 *   with the flags) into the single executable `dist/<name>`.
 * - Otherwise: the bundle stays, next to the launcher `dist/<name>` (sh)
 *   that runs it under exactly those flags
 *   (`exec "$deno" run --no-config --no-prompt <flags> <dir>/<name>.js "$@"`)
 *   with the first Deno it finds: `$DENO`; `deno` on PATH; the checkout's
 *   pinned Deno beside `dist/` (`node_modules/deno/deno`, from `npm ci`).
 *   With none, it says what to install or set and exits 127.
 *
 * Files an artifact reads beside its bundle are built with it: the console's
 * web page, into `dist/console-web/` (see `src/console/page.ts`); with
 * `DENORT_BIN` they are embedded into the executable too (`--include`).
 *
 * Every artifact is written to a temporary name and renamed into place, so
 * a build never leaves (or lets a running launcher read) a half-written
 * file, and two builds at once (e.g. two test files) do not disturb each
 * other.
 *
 * Permission paths must be absolute: an artifact runs from anywhere.
 *
 * @module
 */
import type * as esbuild from "esbuild";
import { buildConsole } from "../src/console/build.ts";
import { CONSOLE_FILES, PAGE_DIR_NAME } from "../src/console/page.ts";
import { SERVICE_DENO_FLAGS, SERVICE_ENV, SERVICE_ENV_REMOVED } from "../src/os/service_runtime.ts";
import { shellQuote } from "../src/os/shell_quote.ts";
import { embeddedDescriptorsPlugin, IDENTIFIER } from "./embedded_descriptors.ts";

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
  /** Its environment: variables its launcher sets, and those it removes (e.g. the services' root store). */
  runtimeEnv?: { set: Readonly<Record<string, string>>; removed: readonly string[] };
  /** Files the artifact reads beside its bundle, built with it (the console's page). */
  beside?: BesideFiles;
  /**
   * Node built-in modules (e.g. "http2") the bundle loads only when it first evaluates a module that
   * imports one, instead of before its first statement (see {@linkcode lazyBuiltinAliases}).
   */
  lazyBuiltins?: readonly string[];
}

/**
 * Files built into `dist/<dir>/` beside an artifact's bundle, which finds
 * them next to itself: built once, by the build, so the artifact needs no
 * bundler or source tree at run time.
 */
export interface BesideFiles {
  /** The directory's name in dist/. */
  dir: string;
  /** The files `build` writes, relative to the directory. */
  files: readonly string[];
  /** Writes the files into an (absolute) directory. */
  build(dir: string): Promise<void>;
}

/** Every component, built in this order. */
export const COMPONENTS: readonly Component[] = [
  {
    name: "key-service",
    entry: "src/keyservice/main.ts",
    permissionSet: "key-service",
    runtimeFlags: SERVICE_DENO_FLAGS,
    runtimeEnv: { set: SERVICE_ENV, removed: SERVICE_ENV_REMOVED },
  },
  {
    name: "join-service",
    entry: "src/joinservice/main.ts",
    permissionSet: "join-service",
    runtimeFlags: SERVICE_DENO_FLAGS,
    runtimeEnv: { set: SERVICE_ENV, removed: SERVICE_ENV_REMOVED },
  },
  { name: "bootstrapper", entry: "src/bootstrapper/main.ts", permissionSet: "bootstrapper" },
  { name: "local-api", entry: "src/localapi/main.ts", permissionSet: "local-api" },
  {
    name: "cli",
    entry: "src/cli/main.ts",
    permissionSet: "cli",
    // Each command's modules are imported when it runs; these, only the commands that call a node need.
    lazyBuiltins: ["http", "http2", "https", "net", "zlib"],
  },
  {
    name: "console",
    entry: "src/console/main.ts",
    permissionSet: "console",
    beside: { dir: PAGE_DIR_NAME, files: CONSOLE_FILES, build: buildConsole },
  },
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

/**
 * The sh launcher that runs `<name>.js` next to it under `flags`, with the
 * Deno in `$DENO`, else `deno` on PATH, else the checkout's pinned Deno
 * (`<launcher's directory>/../node_modules/deno/deno`). Without any it
 * names what to install (Deno `denoVersion`) or set, and exits 127.
 */
export function launcherScript(component: Component, flags: string[], denoVersion: string): string {
  const name = component.name;
  return `#!/bin/sh
# ${name}: runs ${name}.js (built by scripts/build.ts from ${component.entry})
# under the "${component.permissionSet}" permission set, with the first Deno found of:
# $DENO; deno on PATH; the checkout's pinned Deno beside dist/ (node_modules/deno/deno, from npm ci).
dir=$(dirname -- "$(readlink -f -- "$0")")
pinned=$(dirname -- "$dir")/node_modules/deno/deno
if [ -n "\${DENO-}" ]; then
  deno=$DENO
elif command -v deno >/dev/null 2>&1; then
  deno=deno
elif [ -x "$pinned" ]; then
  deno=$pinned
else
  echo "${name}: no Deno found: DENO is not set, no deno on PATH ($PATH), no $pinned." >&2
  echo "${name}: install Deno ${denoVersion} on PATH, run npm ci in the checkout, or set DENO=/path/to/deno." >&2
  exit 127
fi
export DENO_NO_UPDATE_CHECK=1
${environmentLines(component.runtimeEnv)}exec "$deno" run --no-config --no-prompt ${
    flags.map(shellQuote).join(" ")
  } "$dir/${name}.js" "$@"
`;
}

/** The launcher's lines that set and remove `env`'s variables (none without it). */
function environmentLines(env: Component["runtimeEnv"]): string {
  if (env === undefined) return "";
  const removed = env.removed.length > 0 ? `unset ${env.removed.join(" ")}\n` : "";
  const set = Object.entries(env.set).map(([name, value]) => `export ${name}=${shellQuote(value)}\n`);
  return removed + set.join("");
}

/**
 * esbuild options that give the bundle `deno bundle --platform=deno --minify`
 * gives (Deno 2.9.6 runs the same esbuild, 0.25.5; the bundles hold the same
 * modules). `deno bundle` would download its own esbuild with Deno's HTTP
 * client on first use, outside `npm ci`, and fail on a machine whose
 * registry access needs a CA that only npm is given.
 */
export const ESBUILD_OPTIONS: Readonly<esbuild.BuildOptions> = {
  bundle: true,
  format: "esm",
  platform: "node",
  minify: true,
  logLevel: "warning",
  // Pick the packages' entry points Deno's bundler picks: ES modules first, the deno and node conditions.
  mainFields: ["module", "main"],
  conditions: ["deno", "node"],
  // CommonJS modules in the bundle call require() (e.g. yaml): give them Deno's, as `deno bundle` does,
  // instead of esbuild's stub that throws in an ES module.
  banner: { js: `import{createRequire}from"node:module";const require=createRequire(import.meta.url);` },
};

/** The error for a program the build needs and cannot find. */
function notOnPath(program: string): BuildError {
  return new BuildError(
    `${program} is not on PATH (run \`npm ci\`, then \`deno task build\`; or add node_modules/.bin to PATH)`,
  );
}

/** Builds run one at a time: each stops esbuild's service when done, which another's must not see. */
let esbuildTurn: Promise<unknown> = Promise.resolve();

/** The esbuild on PATH: the first executable file named `esbuild` in its directories. */
function esbuildOnPath(): string {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (dir === "") continue;
    const path = `${dir}/esbuild`;
    try {
      const stat = Deno.statSync(path);
      if (stat.isFile && ((stat.mode ?? 0o111) & 0o111) !== 0) return path;
    } catch {
      // Not in this directory.
    }
  }
  throw notOnPath("esbuild");
}

/**
 * Bundles `entry` (relative to `options.absWorkingDir`) into `outfile` with
 * esbuild's JS API (for the plugin, which its command line cannot load),
 * running the esbuild on PATH (node_modules/.bin under `deno task`), the one
 * the permission sets allow.
 */
async function bundle(entry: string, outfile: string, options: esbuild.BuildOptions): Promise<void> {
  const binary = esbuildOnPath();
  if (binary === "/usr/bin/esbuild") {
    // esbuild's JS API ignores this path (it is where Debian puts its own esbuild, of another version).
    throw new BuildError(
      "the esbuild on PATH is /usr/bin/esbuild, not the project's: put node_modules/.bin first",
    );
  }
  // The JS API reads it when its module is evaluated (so it is imported only now, and the first
  // build's esbuild serves the process's later builds).
  Deno.env.set("ESBUILD_BINARY_PATH", binary);
  let esbuild: typeof import("esbuild");
  try {
    esbuild = await import("esbuild");
  } catch (err) {
    throw new BuildError(`cannot load esbuild's JS API (run \`npm ci\`): ${(err as Error).message}`);
  }
  const turn = esbuildTurn.then(async () => {
    try {
      await esbuild.build({ ...options, entryPoints: [entry], outfile });
    } catch (err) {
      // esbuild has written its messages (logLevel); the error sums them up.
      throw new BuildError(`esbuild ${entry} failed: ${(err as Error).message}`);
    } finally {
      await esbuild.stop();
    }
  });
  esbuildTurn = turn.catch(() => {});
  await turn;
}

/**
 * esbuild aliases that make `builtins` lazy in a bundle: every import of
 * `node:<name>` or `<name>` goes to a module written into `dir` that looks the
 * built-in up with `process.getBuiltinModule` when it is evaluated, and
 * re-exports what it exports (the names read from this process's Deno, the
 * pinned one the artifacts run on).
 *
 * Why: esbuild hoists every import of a built-in to the top of a single-file
 * bundle, and Deno loads it before the bundle's first statement, even one
 * that only lazily imported code uses; a module of the bundle, though, is
 * evaluated where the bundle first needs it. Loading `node:http2` and what it
 * pulls in takes about 30 ms, most of a short process's start (`cli --help`).
 */
async function lazyBuiltinAliases(
  builtins: readonly string[],
  dir: string,
): Promise<Record<string, string>> {
  await Deno.mkdir(dir, { recursive: true });
  const aliases: Record<string, string> = {};
  for (const name of builtins) {
    let builtin: Record<string, unknown>;
    try {
      builtin = await import(`node:${name}`);
    } catch {
      throw new BuildError(
        `lazyBuiltins: "${name}" is not a Node built-in module of Deno ${Deno.version.deno}`,
      );
    }
    const names = Object.keys(builtin).filter((key) => key !== "default" && IDENTIFIER.test(key));
    const file = `${dir}/${name}.js`;
    await Deno.writeTextFile(
      file,
      `// node:${name}, looked up when the bundle first evaluates a module that imports it (scripts/build.ts).
const builtin = process.getBuiltinModule("node:${name}");
export default builtin;
export const { ${names.join(", ")} } = builtin;
`,
    );
    aliases[`node:${name}`] = file;
    aliases[name] = file;
  }
  return aliases;
}

/**
 * Runs `program args` in `cwd` (a program on PATH: node_modules/.bin under `deno task`), with `env`
 * added to the environment it inherits.
 */
async function run(
  program: string,
  args: string[],
  cwd: string,
  env?: Record<string, string>,
): Promise<void> {
  let output: Deno.CommandOutput;
  try {
    output = await new Deno.Command(program, { args, cwd, env, stdin: "null" }).output();
  } catch (err) {
    throw err instanceof Deno.errors.NotFound ? notOnPath(program) : err;
  }
  if (!output.success) {
    const stderr = new TextDecoder().decode(output.stderr).trim();
    throw new BuildError(`${program} ${args[0]} failed (exit ${output.code}):\n${stderr}`);
  }
}

function formatSize(bytes: number): string {
  return bytes >= 1 << 20 ? `${(bytes / (1 << 20)).toFixed(1)} MiB` : `${(bytes / 1024).toFixed(0)} KiB`;
}

/** What the build reads from the project: deno.json (the permission sets) and the pinned Deno version. */
export interface Project {
  /** deno.json, parsed. */
  config: unknown;
  /** The Deno version package.json pins (devDependencies.deno), named by a launcher that finds none. */
  denoVersion: string;
  /**
   * What runs `deno compile` when artifacts are compiled into single executables (with `DENORT_BIN`
   * set); without it, each artifact is a bundle and its launcher.
   */
  compiler?: Compiler;
}

/** The program that runs `<program> compile …`, and what to add to its environment. */
export interface Compiler {
  /** `deno` on PATH, or a stand-in in tests. */
  program: string;
  /** Added to the environment it inherits (`DENORT_BIN` it inherits already). */
  env?: Record<string, string>;
}

/** Renames `temporary` over `final`, or removes it when anything before failed. */
async function moveIntoPlace(temporary: string, final: string, make: () => Promise<void>): Promise<void> {
  try {
    await make();
    await Deno.rename(temporary, final);
  } catch (err) {
    await Deno.remove(temporary).catch(() => {});
    throw err;
  }
}

/** The flags `component`'s artifact runs under: its permission set's, then its other runtime flags. */
export function artifactFlags(config: unknown, component: Component): string[] {
  return [...permissionFlags(config, component.permissionSet), ...component.runtimeFlags ?? []];
}

/**
 * Builds `beside` into a directory of this build's own (`staging`), then
 * renames each file into `root`/dist/<dir>/: one rename per file, as a
 * directory cannot be renamed over a full one; each file is replaced whole.
 */
async function buildBeside(root: string, beside: BesideFiles, staging: string): Promise<string> {
  const dir = `${root}/dist/${beside.dir}`;
  let size = 0;
  try {
    try {
      await beside.build(staging);
    } catch (err) {
      throw new BuildError(`dist/${beside.dir}/: ${(err as Error).message}`);
    }
    await Deno.mkdir(dir, { recursive: true });
    for (const file of beside.files) {
      size += (await Deno.stat(`${staging}/${file}`)).size;
      await Deno.rename(`${staging}/${file}`, `${dir}/${file}`);
    }
  } finally {
    await Deno.remove(staging, { recursive: true }).catch(() => {});
  }
  return `dist/${beside.dir}/ (${formatSize(size)}: ${beside.files.join(", ")})`;
}

/**
 * Removes a directory where an artifact's file goes: an older layout's (the
 * console's page was built into dist/console/, now the launcher's name),
 * which would keep the artifact from being renamed into place.
 */
async function removeDirectoryInPlaceOf(path: string): Promise<void> {
  try {
    if ((await Deno.lstat(path)).isDirectory) await Deno.remove(path, { recursive: true });
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
}

/** Builds `component` into `root`/dist; returns what was built, one line per artifact. */
export async function buildComponent(
  root: string,
  project: Project,
  component: Component,
): Promise<string[]> {
  const flags = artifactFlags(project.config, component);
  const out = `dist/${component.name}`;
  /** A name of this build's own, for a file until it is complete. */
  const temporary = (path: string) =>
    `${root}/dist/.${path.slice("dist/".length)}.${crypto.randomUUID()}.tmp`;
  await Deno.mkdir(`${root}/dist`, { recursive: true });
  const bundleFile = temporary(`${out}.js`);
  await moveIntoPlace(bundleFile, `${root}/${out}.js`, async () => {
    const builtins = component.lazyBuiltins;
    const builtinsDir = temporary(`${out}-builtins`);
    try {
      const alias = builtins ? await lazyBuiltinAliases(builtins, builtinsDir) : {};
      await bundle(component.entry, bundleFile, {
        ...ESBUILD_OPTIONS,
        absWorkingDir: root,
        alias,
        plugins: [embeddedDescriptorsPlugin()],
      });
    } finally {
      if (builtins) await Deno.remove(builtinsDir, { recursive: true }).catch(() => {});
    }
  });
  const beside = component.beside;
  const built = beside ? [await buildBeside(root, beside, temporary(`dist/${beside.dir}`))] : [];
  await removeDirectoryInPlaceOf(`${root}/${out}`);
  const compiler = project.compiler;
  if (compiler) {
    // Compiling the bundle, not the entry, embeds one file instead of all of node_modules. The files
    // beside it are embedded too (--include), where the compiled bundle's import.meta.url finds them.
    const binary = temporary(out);
    const include = beside ? ["--include", `dist/${beside.dir}`] : [];
    await moveIntoPlace(
      binary,
      `${root}/${out}`,
      () =>
        run(
          compiler.program,
          [
            "compile",
            "--quiet",
            "--no-config",
            "--no-prompt",
            ...flags,
            ...include,
            "-o",
            binary,
            `${out}.js`,
          ],
          root,
          compiler.env,
        ),
    );
    await Deno.remove(`${root}/${out}.js`);
    return [
      ...built,
      `${out} (${formatSize((await Deno.stat(`${root}/${out}`)).size)}, deno compile: ${flags.join(" ")})`,
    ];
  }
  const launcher = temporary(out);
  await moveIntoPlace(launcher, `${root}/${out}`, async () => {
    await Deno.writeTextFile(launcher, launcherScript(component, flags, project.denoVersion));
    await Deno.chmod(launcher, 0o755);
  });
  return [
    `${out}.js (${formatSize((await Deno.stat(`${root}/${out}.js`)).size)}, esbuild)`,
    ...built,
    `${out} (launcher: ${flags.join(" ")})`,
  ];
}

/** Reads deno.json and the pinned Deno version from package.json in `root`. */
async function readProject(root: string): Promise<Project> {
  const read = async (file: string) => {
    try {
      return JSON.parse(await Deno.readTextFile(`${root}/${file}`));
    } catch (err) {
      throw new BuildError(`cannot read ${file}: ${(err as Error).message}`);
    }
  };
  const config = await read("deno.json");
  const denoVersion = (await read("package.json"))?.devDependencies?.deno;
  if (typeof denoVersion !== "string") throw new BuildError("package.json pins no deno in devDependencies");
  return { config, denoVersion };
}

/** The components `names` name (all without names); undefined for a name that is none. */
function selectComponents(names: string[]): readonly Component[] | undefined {
  if (names.length === 0) return COMPONENTS;
  const selected = COMPONENTS.filter((component) => names.includes(component.name));
  return selected.length === new Set(names).size ? selected : undefined;
}

async function main(args: string[]): Promise<number> {
  const components = selectComponents(args);
  if (components === undefined) {
    console.error(
      `build: unknown component in ${args.join(" ")}: want none (all) or some of ${
        COMPONENTS.map((component) => component.name).join(", ")
      }`,
    );
    return 2;
  }
  const root = decodeURIComponent(new URL("..", import.meta.url).pathname).replace(/\/$/, "");
  try {
    const project: Project = {
      ...await readProject(root),
      ...Deno.env.get("DENORT_BIN") ? { compiler: { program: "deno" } } : {},
    };
    for (const component of components) {
      for (const line of await buildComponent(root, project, component)) console.log(`built ${line}`);
    }
    return 0;
  } catch (err) {
    if (!(err instanceof BuildError)) throw err;
    console.error(`build: ${err.message}`);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
