/**
 * The CA certificates and keys a joining control-plane node receives, so
 * its kubeadm can run the control-plane join.
 *
 * @module
 */
import { ReasonError } from "../reason_error.ts";
import type { ControlPlaneFilesSource } from "./dependencies.ts";
import { reject } from "./rejections.ts";

/** Where kubeadm keeps the cluster PKI. */
export const DEFAULT_PKI_DIR = "/etc/kubernetes/pki";

/** The files a control-plane node needs, relative to the PKI directory, in the original's order. */
export const CONTROL_PLANE_FILE_NAMES: readonly string[] = [
  "ca.key",
  "sa.key",
  "front-proxy-ca.key",
  "etcd/ca.key",
  "ca.crt",
  "sa.pub",
  "front-proxy-ca.crt",
  "etcd/ca.crt",
];

/** One file for the ticket's `control_plane_files`. */
export interface ControlPlaneFile {
  /** Path relative to the PKI directory, e.g. "etcd/ca.key". */
  name: string;
  /** The raw file content. */
  data: Uint8Array;
}

/** A control-plane file could not be read. The message names the file, never its content. */
export class ControlPlaneFilesError extends ReasonError<"missing" | "unreadable"> {
  /** The file's name relative to the PKI directory. */
  readonly file: string;

  /** A failure of `file` ("missing" when it does not exist, "unreadable" otherwise); `message` names it. */
  constructor(reason: "missing" | "unreadable", file: string, message: string) {
    super(reason, message);
    this.file = file;
  }
}

/** Options for {@linkcode loadControlPlaneFiles}. */
export interface LoadControlPlaneFilesOptions {
  /** The PKI directory; default {@linkcode DEFAULT_PKI_DIR}. */
  pkiDir?: string;
  /** Aborts the reads. */
  signal?: AbortSignal;
}

/**
 * Reads the eight control-plane files ({@linkcode CONTROL_PLANE_FILE_NAMES},
 * in that order). Every file must exist; otherwise throws
 * {@linkcode ControlPlaneFilesError} naming the first one that failed.
 */
export async function loadControlPlaneFiles(
  options: LoadControlPlaneFilesOptions = {},
): Promise<ControlPlaneFile[]> {
  const pkiDir = options.pkiDir ?? DEFAULT_PKI_DIR;
  const files: ControlPlaneFile[] = [];
  for (const name of CONTROL_PLANE_FILE_NAMES) {
    const path = `${pkiDir}/${name}`;
    try {
      files.push({ name, data: await Deno.readFile(path, { signal: options.signal }) });
    } catch (error) {
      if (options.signal?.aborted) throw error;
      if (error instanceof Deno.errors.NotFound) {
        throw new ControlPlaneFilesError(
          "missing",
          name,
          `control-plane file ${name} not found in ${pkiDir}`,
        );
      }
      throw new ControlPlaneFilesError(
        "unreadable",
        name,
        `reading control-plane file ${path}: ${(error as Error).name}`,
      );
    }
  }
  return files;
}

/** The join service's control-plane files: read from `pkiDir` for every control-plane ticket. */
export function controlPlaneFilesSource(options: { pkiDir: string }): ControlPlaneFilesSource {
  return {
    async load({ signal }) {
      try {
        return await loadControlPlaneFiles({ pkiDir: options.pkiDir, signal });
      } catch (error) {
        if (!(error instanceof ControlPlaneFilesError)) throw error;
        throw reject("misconfigured", error.message);
      }
    },
  };
}
