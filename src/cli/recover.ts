/**
 * `cli recover`, two ways:
 *
 * - **`--node HOST:PORT`**: the original's recovery of a control-plane node
 *   that cannot rejoin because no join service runs (the cluster's only
 *   control plane rebooted, or all of them did). The node's rejoin serves
 *   `recoverproto.API` on port 9999; this verifies its attestation against
 *   the config (its attestation key must be a control plane's) and sends the
 *   master secret sealed to the attested key (docs/attested-exchange.md
 *   §7.7). The node derives its disk key and cluster ID itself, rebinds,
 *   and boots on.
 * - **`--disk-uuid UUID`**: without the cluster or the node. A node's
 *   state disk key is derived from the master secret as the key service
 *   does it: `HKDF-SHA256(master secret, salt, "key-" + lower-case disk
 *   UUID, 32)`. The key is the LUKS2 passphrase as raw bytes, so the file it
 *   writes opens the disk directly:
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
import { NodeExchangeError } from "../init/node_exchange.ts";
import { recoverNode } from "../init/recover_client.ts";
import { ClusterKms } from "../kms/cluster_kms.ts";
import { deriveStateDiskKey } from "../kms/keys.ts";
import { encodeMasterSecretUri, NO_STORE_URI } from "../kms/uri.ts";
import { escapeControlCharacters } from "../json/escape_control.ts";
import type { Logger } from "../log/logger.ts";
import { nodeAttestation, readAttestationConfigFile } from "./attestation_config_file.ts";
import { CliError } from "./errors.ts";
import { readMasterSecretFile } from "./master_secret_file.ts";
import { connectNode } from "./node_connection.ts";
import {
  attestationRejectedHint,
  describeNodeCallError,
  type NodeServer,
  wrongServerHint,
} from "./node_errors.ts";
import { createNewFile } from "./output_file.ts";
import { warnAcceptedMismatches } from "./warning_logger.ts";

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

/** What `cli recover --node` is asked to do. */
export interface RecoverNodeCommand {
  /** The nodes' recovery servers, "host:port" each, recovered in this order. */
  nodes: string[];
  /** The master secret file (read, never created). */
  masterSecret: string;
  /** The attestation config file the node's evidence must satisfy. */
  attestationConfig: string;
  /** How long to wait for each node, in ms. */
  timeoutMs: number;
}

/** The recovery server (`recoverproto.API`) of a rebooting control plane. */
export const RECOVERY_SERVER: NodeServer = {
  name: "recovery server",
  defaultPort: 9999,
  runs: "the node is a control plane waiting in its rejoin (bootstrapper rejoin)",
};

/**
 * Runs `cli recover --node`: the node's attestation verified, then the
 * master secret sent sealed. `print` receives the lines for stdout. Throws
 * {@linkcode CliError}.
 */
export async function runRecoverNode(
  command: RecoverNodeCommand,
  env: { logger: Logger; print(line: string): void; signal?: AbortSignal },
): Promise<void> {
  const attestation = nodeAttestation(await readAttestationConfigFile(command.attestationConfig), env.logger);
  const secret = await readMasterSecretFile(command.masterSecret);
  const kmsUri = encodeMasterSecretUri(secret);
  // Every node is tried, in order, whatever the others did: one node down must not keep the rest locked.
  const failures: { node: string; error: CliError }[] = [];
  for (const node of command.nodes) {
    const timeout = AbortSignal.timeout(command.timeoutMs);
    const signal = env.signal ? AbortSignal.any([env.signal, timeout]) : timeout;
    using connection = connectNode(node);
    let result;
    try {
      result = await recoverNode(
        { kmsUri, storageUri: NO_STORE_URI },
        { transport: connection.transport, ...attestation, signal },
      );
    } catch (error) {
      if (!(error instanceof NodeExchangeError)) throw error;
      const failure = describeRecoverFailure(error, node, command.attestationConfig, signal);
      if (env.signal?.aborted) throw failure;
      failures.push({ node, error: failure });
      continue;
    }
    warnAcceptedMismatches(env.logger, node, result.warnings);
    // The disk UUID is the node's text: sealed by an attested node, still not the CLI's to print raw.
    env.print(
      `recovered node ${node}: its state disk ${
        escapeControlCharacters(result.diskUuid)
      } opens with the cluster's key`,
    );
    env.print(`cluster ID: ${result.clusterId.toHex()}`);
    env.print("the node boots on: its state disk is mapped, and the kubelet starts with its credentials");
  }
  if (failures.length === 0) return;
  if (command.nodes.length === 1) throw failures[0].error;
  throw new CliError(
    failures[0].error.reason,
    `recovered ${command.nodes.length - failures.length} of ${command.nodes.length} nodes; ${
      failures.map((failure) => failure.error.message).join("; ")
    }`,
  );
}

/** A failed recovery in the operator's words. */
function describeRecoverFailure(
  error: NodeExchangeError,
  node: string,
  attestationConfig: string,
  signal: AbortSignal,
): CliError {
  switch (error.reason) {
    case "attestation-rejected":
      return new CliError(
        "attestation",
        `node ${node}: ${error.message}${attestationRejectedHint(error, attestationConfig)}`,
        { cause: error },
      );
    case "refused":
      // serverMessage is the node's text, escaped by NodeExchangeError.
      return new CliError(
        "refused",
        `node ${node} refused the recovery: ${error.serverMessage}${
          wrongServerHint(error.code, RECOVERY_SERVER)
        }`,
        { cause: error },
      );
    case "unavailable":
    case "canceled":
      return describeNodeCallError(error.cause ?? error, node, signal, RECOVERY_SERVER);
    default:
      return new CliError("protocol", error.message, { cause: error });
  }
}
