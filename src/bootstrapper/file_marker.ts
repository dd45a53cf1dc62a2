/**
 * PCR 15 as a file, for the dummy variant on a machine without a TPM
 * (`--tpm none`): the same value a TPM's SHA-256 bank would hold, so tools
 * that read it see the same cluster binding, but nothing measures it. A
 * development aid only; it binds nothing.
 *
 * The file lives under the node's root in `/run/state`: on a real node that
 * is the state disk, so unlike a PCR it survives a reboot there. It is
 * replaced atomically, so a crash never leaves a short value that every
 * later start would refuse.
 *
 * @module
 */
import { writeFileAtomic } from "../fs/atomic_write.ts";

const SHA256_LENGTH = 32;

/** Where the file-backed PCR 15 lives under a node root. */
export function filePcr15Path(root: string): string {
  return `${root === "/" ? "" : root}/run/state/constellation/pcr15`;
}

/** A ClusterMarker that keeps PCR 15 in a file. */
export class FileClusterMarker {
  readonly #path: string;

  /** Keeps the value at `path` (see {@linkcode filePcr15Path}). */
  constructor(path: string) {
    this.#path = path;
  }

  /** The value now: 32 zero bytes until marked. */
  async read(): Promise<Uint8Array> {
    try {
      const value = await Deno.readFile(this.#path);
      if (value.length !== SHA256_LENGTH) {
        throw new Error(`${this.#path} holds ${value.length} bytes, not a SHA-256 PCR value`);
      }
      return value;
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return new Uint8Array(SHA256_LENGTH);
      throw err;
    }
  }

  /** Whether the node is bound to a cluster: the value is not all zeros. */
  async isBound(): Promise<boolean> {
    return (await this.read()).some((byte) => byte !== 0);
  }

  /** Extends the value with `clusterId` as TPM2_PCR_Event would: SHA256(old ‖ SHA256(clusterId)). */
  async mark(clusterId: Uint8Array, _options: { signal?: AbortSignal } = {}): Promise<void> {
    const old = await this.read();
    const event = new Uint8Array(await crypto.subtle.digest("SHA-256", clusterId as Uint8Array<ArrayBuffer>));
    const value = new Uint8Array(await crypto.subtle.digest("SHA-256", new Uint8Array([...old, ...event])));
    await writeFileAtomic(this.#path, value, { mode: 0o600 });
  }
}
