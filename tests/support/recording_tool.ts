/**
 * A scriptable stand-in for OS tools (`recording_tool.sh`): each test gets
 * its own directory that says what the tool prints and how it exits, and
 * records every invocation's argv, environment and `--config` file.
 *
 * The adapters run tools with a cleared environment, so the test passes
 * {@linkcode RecordingTool.env} as the adapter's `env`. The script is in the
 * test permission set's run list by its repository path.
 *
 * @module
 */

/** The recording script's absolute path. */
export const RECORDING_TOOL = new URL("./recording_tool.sh", import.meta.url).pathname;

/** One invocation as the script recorded it. */
export interface RecordedCall {
  /** The arguments. */
  argv: string[];
  /** The environment it got, by name. */
  env: Record<string, string>;
  /** A copy of the file given with `--config`, if any. */
  config?: string;
  /** That file's mode, e.g. "600". */
  configMode?: string;
}

/** A recording tool's directory and how to read it back. */
export interface RecordingTool {
  /** The binary to configure the adapter with. */
  readonly binary: string;
  /** The directory the script reads and records into. */
  readonly dir: string;
  /** The environment to give the tool (adapters clear theirs). */
  env(extra?: Record<string, string>): Record<string, string>;
  /** Makes the tool print `text` on stdout. */
  printStdout(text: string): Promise<void>;
  /** Makes the tool print `text` on stderr. */
  printStderr(text: string): Promise<void>;
  /** Makes the tool exit with `code`; on call `call` only (1-based) when given. */
  exitWith(code: number, call?: number): Promise<void>;
  /** Makes the tool sleep `seconds` instead of exiting (to test aborts). */
  sleep(seconds: number): Promise<void>;
  /** The invocations so far, in order. */
  calls(): Promise<RecordedCall[]>;
  /** Removes the directory. */
  remove(): Promise<void>;
}

/** A fresh recording tool in its own temporary directory. */
export async function recordingTool(): Promise<RecordingTool> {
  const dir = await Deno.makeTempDir({ prefix: "recording-tool-" });
  return {
    binary: RECORDING_TOOL,
    dir,
    env: (extra = {}) => ({ RECORDING_TOOL_DIR: dir, ...extra }),
    printStdout: (text) => Deno.writeTextFile(`${dir}/stdout`, text),
    printStderr: (text) => Deno.writeTextFile(`${dir}/stderr`, text),
    exitWith: (code, call) =>
      Deno.writeTextFile(`${dir}/${call === undefined ? "exit" : `exit.${call}`}`, `${code}`),
    sleep: (seconds) => Deno.writeTextFile(`${dir}/sleep`, `${seconds}`),
    async calls() {
      const count = Number(await Deno.readTextFile(`${dir}/count`).catch(() => "0"));
      const calls: RecordedCall[] = [];
      for (let n = 1; n <= count; n++) {
        const argv = (await Deno.readTextFile(`${dir}/argv.${n}`)).split("\0").slice(0, -1);
        const env = Object.fromEntries(
          (await Deno.readTextFile(`${dir}/env.${n}`)).split("\n").filter(Boolean).map((line) => {
            const at = line.indexOf("=");
            return [line.slice(0, at), line.slice(at + 1)];
          }),
        );
        const config = await Deno.readTextFile(`${dir}/config.${n}`).catch(() => undefined);
        const configMode = (await Deno.readTextFile(`${dir}/config-mode.${n}`).catch(() => undefined))
          ?.trim();
        calls.push({ argv, env, config, configMode });
      }
      return calls;
    },
    remove: () => Deno.remove(dir, { recursive: true }),
  };
}
