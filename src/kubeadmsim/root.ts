/**
 * The node's filesystem as the simulator sees it: every node path kubeadm
 * uses (`/etc/kubernetes/admin.conf`) is a path under the root on the host
 * (`<root>/etc/kubernetes/admin.conf`), so the simulator never touches the
 * host's own `/etc`. Node paths are normalized first, so `..` cannot leave
 * the root. The root `/` is refused: the simulator is a stand-in and must
 * never write a real node's files.
 *
 * @module
 */
import { dirname, isAbsolute, join, posix } from "node:path";
import { KubeadmSimError } from "./errors.ts";

/** Where the simulator keeps its own files (record, failure injection), as a node path. */
export const SIM_STATE_DIR = "/var/lib/kubeadm-sim";

/** One node's filesystem, under `root` on the host. */
export class SimRoot {
  /** The host directory that is the node's `/`. */
  readonly root: string;

  /** Throws a "usage" {@linkcode KubeadmSimError} unless `root` is an absolute path other than `/`. */
  constructor(root: string) {
    const trimmed = root.replace(/\/+$/, "");
    if (!isAbsolute(root) || trimmed === "") {
      throw new KubeadmSimError(
        "usage",
        `kubeadm-sim: the node root must be an absolute path other than "/" (got ${JSON.stringify(root)})`,
      );
    }
    this.root = trimmed;
  }

  /** The host path of the absolute node path `nodePath` (`..` stays inside the root). */
  path(nodePath: string): string {
    if (!nodePath.startsWith("/")) {
      throw new TypeError(`not an absolute node path: ${JSON.stringify(nodePath)}`);
    }
    return join(this.root, posix.normalize(nodePath));
  }

  /** A text file of the node, or undefined when it does not exist. */
  async readIfExists(nodePath: string): Promise<string | undefined> {
    try {
      return await Deno.readTextFile(this.path(nodePath));
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return undefined;
      throw error;
    }
  }

  /** Whether the node path exists. */
  async exists(nodePath: string): Promise<boolean> {
    try {
      await Deno.lstat(this.path(nodePath));
      return true;
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return false;
      throw error;
    }
  }

  /** Writes (replaces) a node file with exactly `mode`, creating its directory (0755). */
  async write(nodePath: string, data: string, options: { mode: number }): Promise<void> {
    const target = this.path(nodePath);
    await Deno.mkdir(dirname(target), { recursive: true, mode: 0o755 });
    await Deno.writeTextFile(target, data, { mode: options.mode });
    await Deno.chmod(target, options.mode); // an existing file keeps its mode otherwise
  }

  /** Appends a line to a node file (0600), creating it and its directory. */
  async appendLine(nodePath: string, line: string): Promise<void> {
    const target = this.path(nodePath);
    await Deno.mkdir(dirname(target), { recursive: true, mode: 0o755 });
    await Deno.writeTextFile(target, line + "\n", { append: true, mode: 0o600 });
  }
}
