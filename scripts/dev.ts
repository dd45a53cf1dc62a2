/**
 * The main job on an embedded default: runs the key service on loopback with
 * a freshly generated development master secret and salt, and prints how to
 * call it. The secret lives in a private temp directory that is removed on
 * exit (Ctrl-C).
 *
 * Usage: `npm start` (or `deno task dev [--port 9000]`).
 *
 * @module
 */
import { parseArgs } from "node:util";

const { values } = parseArgs({ options: { port: { type: "string", default: "9000" } } });

const dir = await Deno.makeTempDir({ prefix: "constellation-dev-" });
const masterSecret = `${dir}/mastersecret`;
const salt = `${dir}/salt`;
await Deno.writeFile(masterSecret, crypto.getRandomValues(new Uint8Array(32)), { mode: 0o600 });
await Deno.writeFile(salt, crypto.getRandomValues(new Uint8Array(32)), { mode: 0o600 });

try {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-P=key-service",
      "--no-prompt",
      `--allow-read=${dir}`,
      "src/keyservice/main.ts",
      "--listen-address=127.0.0.1",
      `--port=${values.port}`,
      `--master-secret=${masterSecret}`,
      `--salt=${salt}`,
    ],
    stdout: "inherit",
    stderr: "inherit",
    env: { NO_COLOR: "1" },
    clearEnv: true,
  }).spawn();

  console.log(`
Key service (development master secret, generated for this run) on 127.0.0.1:${values.port}.
Derive a key, e.g. a 32-byte state-disk key for a disk UUID:

  npx buf curl --schema proto --protocol grpc --http2-prior-knowledge \\
    -d '{"data_key_id":"0123abcd-0000-4000-8000-00000000cafe","length":32}' \\
    http://127.0.0.1:${values.port}/kms.API/GetDataKey

Press Ctrl-C to stop; the development secret is deleted on exit.
`);

  const stop = () => child.kill("SIGTERM");
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  const status = await child.status;
  Deno.exitCode = status.code;
} finally {
  await Deno.remove(dir, { recursive: true });
}
