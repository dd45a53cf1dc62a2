/**
 * Where `cli init` puts the admin kubeconfig once the cluster exists. The
 * node sends it once, sealed to this run's key: a kubeconfig that cannot
 * be written where asked must still land somewhere, or the cluster's only
 * admin credentials are gone.
 *
 * @module
 */
import { CliError, errorLine } from "./errors.ts";
import { createNewFile } from "./output_file.ts";

/** Options of {@linkcode saveKubeconfig}. */
export interface SaveKubeconfigOptions {
  /** Makes a new private directory for the last resort; default `Deno.makeTempDir` (mode 0700). */
  makeTempDir?: () => Promise<string>;
}

/** Where the kubeconfig went, and why not where asked. */
export interface SavedKubeconfig {
  /** The file it is in. */
  path: string;
  /** One line per place tried before that failed, in order; empty when it went where asked. */
  failures: string[];
}

/**
 * Writes `kubeconfig` as a new 0600 file: at `path`; else beside it, named
 * with the cluster ID's first 8 hex digits; else in a new private
 * directory of the system's temp directory.
 *
 * @throws {CliError} "output" when no place took it: the message says the
 * cluster exists, names it, and why each place failed.
 */
export async function saveKubeconfig(
  path: string,
  kubeconfig: Uint8Array,
  clusterId: Uint8Array,
  options: SaveKubeconfigOptions = {},
): Promise<SavedKubeconfig> {
  const makeTempDir = options.makeTempDir ?? (() => Deno.makeTempDir({ prefix: "cli-kubeconfig-" }));
  const id = clusterId.toHex();
  const places: (() => Promise<string>)[] = [
    () => Promise.resolve(path),
    () => Promise.resolve(`${path}.${id.slice(0, 8)}`),
    async () => `${await makeTempDir()}/admin.conf`,
  ];
  const failures: string[] = [];
  for (const place of places) {
    try {
      const target = await place();
      await createNewFile(target, kubeconfig, "kubeconfig");
      return { path: target, failures };
    } catch (error) {
      failures.push(errorLine(error));
    }
  }
  throw new CliError(
    "output",
    `the cluster was initialized (cluster ID ${id}), but its admin kubeconfig could not be written ` +
      `anywhere (${failures.join("; ")}); the node does not send it again`,
  );
}
