/**
 * The built artifacts as the build tests use them: `deno task build` run
 * for real, and where each artifact lies. The build replaces every file
 * atomically, so test files that build at the same time do not disturb
 * each other or an artifact running meanwhile.
 *
 * @module
 */
import assert from "node:assert/strict";
import { COMPONENTS } from "../../scripts/build.ts";
import { runToExit } from "../../src/os/service_process.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";

/** The artifacts' directory, with a trailing slash. */
export const DIST = `${REPO_ROOT}dist/`;

/** Every artifact's name (`dist/<name>`), in build order. */
export const ARTIFACTS: readonly string[] = COMPONENTS.map((component) => component.name);

/** The pinned Deno the launchers run when `DENO` names it. */
export const PINNED_DENO = `${REPO_ROOT}node_modules/deno/deno`;

/**
 * Runs the build as `deno task build` does (only the components `names`, when
 * given); returns its stdout lines ("built …", one per file).
 */
export async function buildArtifacts(...names: string[]): Promise<string[]> {
  const build = await runToExit("deno", ["run", "-P=build", "--no-prompt", "scripts/build.ts", ...names], {
    cwd: REPO_ROOT,
    timeoutMs: 120_000,
  });
  assert.equal(build.code, 0, build.stderrLines.join("\n"));
  return build.stdoutLines;
}
