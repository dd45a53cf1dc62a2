/**
 * What the built services read at start, placed inside their permission
 * sets, for the build tests and the cold start benchmark: `/var/config`
 * (the key service's and the join service's read permission, so only root
 * can place files there) and a join service's inputs under it.
 *
 * @module
 */
import { createTestCa } from "../support/pki.ts";

/** The directory the key service's and the join service's permission sets may read. */
export const CONFIG_DIR = "/var/config";

const NOT_ROOT =
  "the built services read their inputs only from inside their baked read permissions (/var/config), so this must run as root";

/**
 * Creates /var/config if needed; fails clearly when this user cannot write
 * there. Returns whether it created it (and so should remove it again).
 */
export async function ensureConfigDir(): Promise<boolean> {
  try {
    await Deno.stat(CONFIG_DIR);
    return false;
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  try {
    await Deno.mkdir(CONFIG_DIR);
    return true;
  } catch (err) {
    throw new Error(`cannot create ${CONFIG_DIR} (${(err as Error).message}): ${NOT_ROOT}`);
  }
}

/**
 * Writes what a join service reads at start into `dir`: `config/` (a dummy
 * attestation config, a measurement salt) and `kubernetes/` (admin.conf with
 * the cluster CA, and that CA in pki/).
 */
export async function writeJoinServiceInputs(dir: string): Promise<void> {
  await Deno.mkdir(`${dir}/config`);
  await Deno.mkdir(`${dir}/kubernetes/pki`, { recursive: true });
  await Deno.writeTextFile(`${dir}/config/attestationConfig`, JSON.stringify({ variant: "dummy" }));
  await Deno.writeFile(`${dir}/config/measurementSalt`, crypto.getRandomValues(new Uint8Array(32)));
  const ca = await createTestCa("CN=kubernetes");
  await Deno.writeTextFile(`${dir}/kubernetes/pki/ca.crt`, ca.certPem);
  await Deno.writeTextFile(`${dir}/kubernetes/pki/ca.key`, ca.keyPem, { mode: 0o600 });
  // JSON is YAML: a kubeconfig for an API server that need not run, carrying the cluster CA.
  await Deno.writeTextFile(
    `${dir}/kubernetes/admin.conf`,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{
        name: "local",
        cluster: {
          server: "https://127.0.0.1:6443",
          "certificate-authority-data": new TextEncoder().encode(ca.certPem).toBase64(),
        },
      }],
      contexts: [{ name: "local", context: { cluster: "local" } }],
      "current-context": "local",
    }),
  );
}

/** The join service's flags for the inputs {@linkcode writeJoinServiceInputs} wrote into `dir`, on free loopback ports. */
export function joinServiceArgs(dir: string, keyServicePort: number): string[] {
  return [
    ...["--attestation-variant", "dummy", "--key-service-endpoint", `127.0.0.1:${keyServicePort}`],
    ...["--api-server-endpoint", "10.0.0.1:6443", "--kubeconfig", `${dir}/kubernetes/admin.conf`],
    ...["--config-dir", `${dir}/config`, "--kubernetes-dir", `${dir}/kubernetes`],
    ...[
      "--port",
      "0",
      "--listen-address",
      "127.0.0.1",
      "--metrics-port",
      "0",
      "--metrics-address",
      "127.0.0.1",
    ],
  ];
}
