/**
 * `cli recover`: the original's recovery, without the cluster. A node's
 * state disk key is derived from the master secret as the key service does
 * it: `HKDF-SHA256(master secret, salt, "key-" + lower-case disk UUID, 32)`.
 * The key is the LUKS2 passphrase as raw bytes, so the file it writes opens
 * the disk directly:
 *
 * ```sh
 * cli recover --master-secret constellation-mastersecret.json --disk-uuid "$(cryptsetup luksUUID /dev/sdb)" --out disk.key
 * cryptsetup open --key-file disk.key /dev/sdb state
 * ```
 *
 * The key goes to a new 0600 file (`--out`), or as hex to stdout only with
 * `--print-hex`: secrets do not go to terminals by default.
 *
 * @module
 */
import { ClusterKms } from "../kms/cluster_kms.ts";
import { deriveStateDiskKey } from "../kms/keys.ts";
import { readMasterSecretFile } from "./master_secret_file.ts";
import { createNewFile } from "./output_file.ts";

/** A disk UUID as cryptsetup and the bootstrapper report it (either case). */
export const DISK_UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** What `cli recover` is asked to do. */
export interface RecoverCommand {
  /** The master secret file. */
  masterSecret: string;
  /** The state disk's LUKS UUID. */
  diskUuid: string;
  /** Write the key (raw bytes) to this new file, or print it as hex to stdout. */
  output: { file: string } | "stdout-hex";
}

/** Derives the disk key for `diskUuid` from the master secret file at `masterSecret`. */
export async function recoverDiskKey(masterSecret: string, diskUuid: string): Promise<Uint8Array> {
  const secret = await readMasterSecretFile(masterSecret);
  return await deriveStateDiskKey(new ClusterKms(secret.key, secret.salt), diskUuid);
}

/** Runs `cli recover`; `print` receives the lines for stdout. Throws {@linkcode CliError}. */
export async function runRecover(command: RecoverCommand, print: (line: string) => void): Promise<void> {
  const key = await recoverDiskKey(command.masterSecret, command.diskUuid);
  try {
    if (command.output === "stdout-hex") {
      print(key.toHex());
      return;
    }
    await createNewFile(command.output.file, key, "disk key file");
    print(`wrote the disk key of ${command.diskUuid.toLowerCase()} to ${command.output.file} (mode 0600)`);
    print(`open the disk with: cryptsetup open --key-file ${command.output.file} <device> <name>`);
  } finally {
    key.fill(0);
  }
}
