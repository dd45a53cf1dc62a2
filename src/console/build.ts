/**
 * Builds the browser console's page into a directory (`deno task build`
 * writes it beside the console's bundle, see `page.ts`): the page's
 * TypeScript (`src/console/web/app.ts` and everything it imports, among them
 * the attestation validators and the verification report the CLI uses)
 * bundled by esbuild for browsers, the page and its stylesheet copied beside
 * it.
 *
 * esbuild comes from package.json like every other dependency
 * (`node_modules/.bin/esbuild`); nothing is downloaded.
 *
 * @module
 */

/** The project's checkout, with a trailing slash (src/console/ is two levels down). */
const REPO_ROOT = decodeURIComponent(new URL("../../", import.meta.url).pathname);
/** The page's entry point. */
const ENTRY = "src/console/web/app.ts";

/**
 * The esbuild flags of the page's bundle: one ES module for current
 * browsers, with a source map; `node:` and Deno APIs are not available to
 * it (a module that needs them fails the build or the bundle test).
 */
export const CONSOLE_ESBUILD_FLAGS: readonly string[] = [
  "--bundle",
  "--format=esm",
  "--platform=browser",
  "--target=es2024",
  "--minify",
  "--sourcemap",
  "--log-level=warning",
];

/** A console build failure, with esbuild's message. */
export class ConsoleBuildError extends Error {
  /** The build failed; `message` says why. */
  constructor(message: string) {
    super(message);
    this.name = "ConsoleBuildError";
  }
}

/**
 * Builds the page (the files `page.ts` lists in `CONSOLE_FILES`) into `dir`, an
 * absolute path; creates it if needed. Throws {@linkcode ConsoleBuildError}.
 */
export async function buildConsole(dir: string): Promise<void> {
  await Deno.mkdir(dir, { recursive: true });
  let output: Deno.CommandOutput;
  try {
    output = await new Deno.Command(`${REPO_ROOT}node_modules/.bin/esbuild`, {
      args: [ENTRY, ...CONSOLE_ESBUILD_FLAGS, `--outfile=${dir}/app.js`],
      cwd: REPO_ROOT,
      stdin: "null",
      clearEnv: true,
    }).output();
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      throw new ConsoleBuildError("node_modules/.bin/esbuild is missing: run `npm ci` first");
    }
    throw error;
  }
  if (!output.success) {
    throw new ConsoleBuildError(
      `esbuild failed (exit ${output.code}):\n${new TextDecoder().decode(output.stderr).trim()}`,
    );
  }
  for (const file of ["index.html", "style.css"]) {
    await Deno.copyFile(`${REPO_ROOT}src/console/web/${file}`, `${dir}/${file}`);
  }
}
