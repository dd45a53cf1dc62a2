/**
 * The build's `deno compile` path (taken with `DENORT_BIN` set), up to the
 * compiler's command line: no `denort` can be downloaded here, so a recording
 * stand-in takes `deno`'s place and writes the executable it is asked for.
 * What is checked: each bundle is compiled under exactly the flags its
 * launcher would run it with, the console's page is embedded
 * (`--include`), the executable replaces the bundle in `dist/`, and a failed
 * compile names the failure and leaves no executable or partial file.
 * `denort` itself, and so the executables, stay untested.
 */
import assert from "node:assert/strict";
import {
  artifactFlags,
  buildComponent,
  type Component,
  COMPONENTS,
  type Project,
} from "../../scripts/build.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";
import { recordingTool } from "../support/recording_tool.ts";
import { withTempDir } from "../support/temp_dir.ts";

/** Stands in for `deno compile`: writes a small executable where `-o` says. */
const FAKE_COMPILER = `#!/bin/sh
out=""; previous=""
for arg in "$@"; do
  if [ "$previous" = "-o" ]; then out="$arg"; fi
  previous="$arg"
done
printf '#!/bin/sh\\necho compiled\\n' > "$out" && chmod 755 "$out"
`;

/** The component `name`, its entry in the checkout: built into another root's dist/. */
function component(name: string): Component {
  const found = COMPONENTS.find((c) => c.name === name)!;
  return { ...found, entry: `${REPO_ROOT}${found.entry}` };
}

Deno.test("with a compiler, each artifact is one executable compiled under its launcher's flags", async (t) => {
  await withTempDir("build-compile-", async (root) => {
    const tool = await recordingTool();
    try {
      await Deno.writeTextFile(`${tool.dir}/compile.sh`, FAKE_COMPILER, { mode: 0o755 });
      const config = JSON.parse(await Deno.readTextFile(`${REPO_ROOT}deno.json`));
      const project: Project = {
        config,
        denoVersion: "2.9.6",
        compiler: { program: tool.binary, env: tool.env({ RECORDING_TOOL_EXEC: `${tool.dir}/compile.sh` }) },
      };
      const rows = [
        { name: "key-service", include: [] },
        { name: "join-service", include: [] },
        { name: "console", include: ["--include", "dist/console-web"] },
      ];
      for (const [i, row] of rows.entries()) {
        await t.step(row.name, async () => {
          const lines = await buildComponent(root, project, component(row.name));
          const flags = artifactFlags(config, component(row.name));
          const { argv } = (await tool.calls())[i];
          const output = argv[argv.indexOf("-o") + 1];
          assert.deepEqual(argv, [
            ...["compile", "--quiet", "--no-config", "--no-prompt", ...flags, ...row.include],
            ...["-o", output, `dist/${row.name}.js`],
          ]);
          assert.match(output, new RegExp(`^${root}/dist/\\.${row.name}\\..*\\.tmp$`));
          assert.equal(await Deno.readTextFile(`${root}/dist/${row.name}`), "#!/bin/sh\necho compiled\n");
          await assert.rejects(Deno.stat(`${root}/dist/${row.name}.js`), Deno.errors.NotFound);
          assert.equal(lines.at(-1)?.startsWith(`dist/${row.name} (`), true);
          assert.equal(lines.at(-1)?.endsWith(`deno compile: ${flags.join(" ")})`), true);
        });
      }
      await t.step("the console's page is built beside it, for --include", async () => {
        assert.deepEqual(
          (await Array.fromAsync(Deno.readDir(`${root}/dist/console-web`))).length > 0,
          true,
        );
      });
      await t.step("a compile that fails is named, and leaves nothing in dist/", async () => {
        const failing: Project = { ...project, compiler: { program: tool.binary, env: tool.env() } };
        await tool.printStderr("error: Failed to read denort\n");
        await tool.exitWith(1);
        await Deno.remove(`${root}/dist/key-service`);
        await assert.rejects(
          buildComponent(root, failing, component("key-service")),
          (error: Error) =>
            error.message.includes("compile failed (exit 1)") && error.message.includes("denort"),
        );
        // No executable, no partial file: only the (complete) bundle it was compiling.
        const left = (await Array.fromAsync(Deno.readDir(`${root}/dist`))).map((entry) => entry.name);
        assert.equal(left.includes("key-service"), false, `${left}`);
        assert.equal(left.some((name) => name.endsWith(".tmp")), false, `${left}`);
      });
    } finally {
      await tool.remove();
    }
  });
});
