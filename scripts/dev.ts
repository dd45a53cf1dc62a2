/**
 * The key service alone, for trying its API: runs it on loopback with
 * a freshly generated development master secret and salt, and prints how to
 * call it once the service listens. The port in that banner is the one the
 * service's "listening" log line reports, so `--port 0` shows the port it
 * got. The secret lives in a private temp directory that is removed on exit
 * (Ctrl-C). A bad port is a usage error (status 2); a service that cannot
 * start (e.g. the port is taken) prints its own error line, no banner, and
 * its exit status is this command's.
 *
 * Usage: `deno task dev [--port 9000]`.
 *
 * @module
 */
import { SERVICE_DENO_FLAGS, SERVICE_ENV } from "../src/os/service_runtime.ts";
import { commandLine, parseFlags, parsePort } from "../src/flags/flags.ts";

/** Usage text for `--help`. */
const DEV_USAGE = `Usage: deno task dev [--port <port>]

Runs the key service on 127.0.0.1 with a development master secret generated
for this run, and prints how to call it once it listens.

Flags:
  --port <port>   port to listen on, 0 for any free port (default 9000)
  --help          show this help
`;

function parseDevFlags(args: string[]): { port: number } | "help" {
  const values = parseFlags(args, {
    port: { type: "string", default: "9000" },
    help: { type: "boolean", default: false },
  }, "main job");
  return values.help ? "help" : { port: parsePort(values.port) };
}

/** The port of the key service's JSON "listening" log line, or undefined for any other line. */
function listeningPort(line: string): number | undefined {
  let entry;
  try {
    entry = JSON.parse(line);
  } catch {
    return undefined; // not the service's JSON log (e.g. Deno's notice about config permission sets)
  }
  return entry?.msg === "listening" && typeof entry.port === "number" ? entry.port : undefined;
}

function banner(port: number): string {
  return `
Key service (development master secret, generated for this run) on 127.0.0.1:${port}.
Derive a key, e.g. a 32-byte state-disk key for a disk UUID:

  npx buf curl --schema proto --protocol grpc --http2-prior-knowledge \\
    -d '{"data_key_id":"0123abcd-0000-4000-8000-00000000cafe","length":32}' \\
    http://127.0.0.1:${port}/kms.API/GetDataKey

Press Ctrl-C to stop; the development secret is deleted on exit.
`;
}

/** Runs the main job with command-line `args`; resolves to the exit status. */
async function main(args: string[]): Promise<number> {
  const flags = commandLine(args, { component: "dev", usage: DEV_USAGE, parse: parseDevFlags });
  if (typeof flags === "number") return flags;

  const dir = await Deno.makeTempDir({ prefix: "constellation-dev-" });
  try {
    const masterSecret = `${dir}/mastersecret`;
    const salt = `${dir}/salt`;
    await Deno.writeFile(masterSecret, crypto.getRandomValues(new Uint8Array(32)), { mode: 0o600 });
    await Deno.writeFile(salt, crypto.getRandomValues(new Uint8Array(32)), { mode: 0o600 });
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-P=key-service",
        "--no-prompt",
        `--allow-read=${dir}`,
        ...SERVICE_DENO_FLAGS,
        "src/keyservice/main.ts",
        "--listen-address=127.0.0.1",
        `--port=${flags.port}`,
        `--master-secret=${masterSecret}`,
        `--salt=${salt}`,
      ],
      stdin: "null",
      stdout: "null", // the service writes only its log, to stderr
      stderr: "piped",
      env: { NO_COLOR: "1", ...SERVICE_ENV },
      clearEnv: true,
    }).spawn();
    const stop = () => child.kill("SIGTERM");
    Deno.addSignalListener("SIGINT", stop);
    Deno.addSignalListener("SIGTERM", stop);

    // The service's log goes on to stderr line by line; the banner follows its "listening" line.
    const encoder = new TextEncoder();
    let announced = false;
    let rest = "";
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      const lines = (rest + chunk).split("\n");
      rest = lines.pop()!;
      for (const line of lines) {
        Deno.stderr.writeSync(encoder.encode(`${line}\n`));
        const port = announced ? undefined : listeningPort(line);
        if (port !== undefined) {
          announced = true;
          console.log(banner(port));
        }
      }
    }
    if (rest !== "") Deno.stderr.writeSync(encoder.encode(`${rest}\n`));
    const status = await child.status;
    Deno.removeSignalListener("SIGINT", stop);
    Deno.removeSignalListener("SIGTERM", stop);
    return status.code;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
