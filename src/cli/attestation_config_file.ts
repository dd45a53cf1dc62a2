/**
 * The operator's attestation config file: the same JSON the join service
 * reads (`src/attestation/config.ts`: variant, measurements, AK trust with
 * the control-plane keys), parsed by the project's one parser. The variant
 * is the one the file names; the init sends the file's text to the node,
 * which parses it the same way.
 *
 * @module
 */
import type { Validator } from "../attestation/attestation.ts";
import {
  type AttestationConfig,
  AttestationConfigError,
  parseOperatorAttestationConfig,
  readConfigText,
} from "../attestation/config.ts";
import { createValidator } from "../attestation/registry.ts";
import type { AttestNodeOptions } from "../init/node_exchange.ts";
import type { Logger } from "../log/logger.ts";
import { CliError } from "./errors.ts";
import { describeFsError } from "./output_file.ts";

/** A read and validated attestation config. */
export interface LoadedAttestationConfig {
  /** The file it came from. */
  path: string;
  /** The file's text, as sent in the init request. */
  text: string;
  /** The parsed config. */
  config: AttestationConfig;
}

/**
 * Parses config `text` from `path`, taking the variant from the text itself.
 * Throws {@linkcode CliError} "config" whose message names the file and the field.
 */
export function parseAttestationConfigFile(text: string, path: string): LoadedAttestationConfig {
  try {
    const config = parseOperatorAttestationConfig(text, { source: `attestation config ${path}` });
    return { path, text, config };
  } catch (error) {
    if (!(error instanceof AttestationConfigError)) throw error;
    throw new CliError("config", error.message, { cause: error });
  }
}

/** Reads and validates the attestation config file at `path`. Throws {@linkcode CliError} "config". */
export async function readAttestationConfigFile(path: string): Promise<LoadedAttestationConfig> {
  let text: string;
  try {
    text = await readConfigText(path);
  } catch (error) {
    if (error instanceof AttestationConfigError && error.reason === "unreadable") {
      const cause = error.cause;
      throw new CliError(
        "config",
        `cannot read attestation config ${path}: ${describeFsError(cause, path, "read")}`,
        { cause: error },
      );
    }
    if (error instanceof AttestationConfigError) {
      throw new CliError("config", error.message, { cause: error });
    }
    throw error;
  }
  return parseAttestationConfigFile(text, path);
}

/** The validator for a loaded config (its warnings, e.g. an insecure AK trust, go to `logger`). */
export function configValidator(loaded: LoadedAttestationConfig, logger: Logger): Validator {
  return createValidator(loaded.config, { logger });
}

/**
 * What `cli init` and `cli recover --node` check a node against before they
 * send it the master secret: the config's validator, and its control-plane
 * keys (`akTrust.controlPlaneKeyDigests`, or `controlPlaneAnyKey`), since both
 * send it to a control plane only. Warnings go to `logger`.
 */
export function nodeAttestation(
  loaded: LoadedAttestationConfig,
  logger: Logger,
): Pick<AttestNodeOptions, "validator" | "controlPlanes" | "logger"> {
  return { validator: configValidator(loaded, logger), controlPlanes: loaded.config.controlPlanes, logger };
}
