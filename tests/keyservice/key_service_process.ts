/**
 * Starts the real key service process for tests, with its secrets in a
 * fresh temporary directory that only it may read.
 *
 * @module
 */
import { SERVICE_DENO_FLAGS, SERVICE_ENV } from "../../src/os/service_runtime.ts";
import { type RunningService, runToExit, startService } from "../../src/os/service_process.ts";

/** The repository root (the tests' working directory for `deno run` and `buf`). */
export const REPO_ROOT = decodeURIComponent(new URL("../../", import.meta.url).pathname);

/** The key service's "listening" log line; group 1 is the port. */
export const KEY_SERVICE_LISTENING = /"msg":"listening".*"port":(\d+)/;

/** Secrets for a key service under test. */
export interface KeyServiceSecrets {
  masterSecret: Uint8Array;
  salt: Uint8Array;
}

/** A started key service; `close()` stops it (SIGTERM unless told) and removes its secrets, once. */
export interface KeyServiceUnderTest {
  service: RunningService;
  masterSecretPath: string;
  saltPath: string;
  close(signal?: Deno.Signal): Promise<Deno.CommandStatus>;
}

/** Writes the secrets to a new temporary directory; returns the directory and file paths. */
export async function writeSecrets(
  secrets: KeyServiceSecrets,
  parent?: string,
): Promise<{ dir: string; masterSecretPath: string; saltPath: string }> {
  const dir = await Deno.makeTempDir({ dir: parent, prefix: "key-service-test-" });
  const masterSecretPath = `${dir}/mastersecret`;
  const saltPath = `${dir}/salt`;
  await Deno.writeFile(masterSecretPath, secrets.masterSecret, { mode: 0o600 });
  await Deno.writeFile(saltPath, secrets.salt, { mode: 0o600 });
  return { dir, masterSecretPath, saltPath };
}

/**
 * The `deno run` arguments of the key service under the `key-service`
 * permission set, reading its secrets from `allowRead` (replacing the set's
 * read list, unless empty), on a free port on 127.0.0.1 with debug logs.
 */
export function keyServiceArgs(allowRead: string[], flags: string[]): string[] {
  return [
    "run",
    "-P=key-service",
    "--no-prompt",
    ...(allowRead.length > 0 ? [`--allow-read=${allowRead.join(",")}`] : []),
    ...SERVICE_DENO_FLAGS,
    "src/keyservice/main.ts",
    "--port",
    "0",
    "--listen-address",
    "127.0.0.1",
    "--log-level",
    "debug",
    ...flags,
  ];
}

/** Starts the key service with `secrets` (and extra `flags`); waits for its "listening" line. */
export async function startKeyService(
  secrets: KeyServiceSecrets,
  flags: string[] = [],
): Promise<KeyServiceUnderTest> {
  const { dir, masterSecretPath, saltPath } = await writeSecrets(secrets);
  try {
    const service = await startService(
      "deno",
      keyServiceArgs([masterSecretPath, saltPath], [
        "--master-secret",
        masterSecretPath,
        "--salt",
        saltPath,
        ...flags,
      ]),
      { readyMatch: KEY_SERVICE_LISTENING, cwd: REPO_ROOT, env: { ...SERVICE_ENV } },
    );
    let closing: Promise<Deno.CommandStatus> | undefined;
    return {
      service,
      masterSecretPath,
      saltPath,
      close(signal?: Deno.Signal) {
        closing ??= (async () => {
          try {
            return await service.stop(signal);
          } finally {
            await Deno.remove(dir, { recursive: true });
          }
        })();
        return closing;
      },
    };
  } catch (err) {
    await Deno.remove(dir, { recursive: true });
    throw err;
  }
}

/** Runs the key service expecting it to fail at startup; returns its exit code and output. */
export function runKeyServiceToExit(allowRead: string[], flags: string[]) {
  return runToExit("deno", keyServiceArgs(allowRead, flags), { cwd: REPO_ROOT });
}
