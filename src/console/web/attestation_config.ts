/**
 * The attestation config the console verifies against: loaded from the
 * local cluster, a file or pasted text, and parsed by the project's one
 * parser (`src/attestation/config.ts`, as the CLI and the join service do).
 * The inspector verifies against it; the dashboard compares its
 * measurements digest with the join service's.
 *
 * @module
 */
import { type AttestationConfig, parseOperatorAttestationConfig } from "../../attestation/config.ts";
import { measurementsDigest } from "../../attestation/measurements.ts";

/** A loaded config. */
export interface ConsoleConfig {
  /** The parsed config. */
  config: AttestationConfig;
  /** Where it came from, in words (e.g. "the local cluster", "file attestation.json"). */
  source: string;
  /** The digest of its measurements, as the join service reports its own. */
  digest: string;
  /** The config's text, as loaded. */
  text: string;
}

let current: ConsoleConfig | undefined;
const listeners: ((config: ConsoleConfig) => void)[] = [];

/** The config in force, if one is loaded. */
export function currentConfig(): ConsoleConfig | undefined {
  return current;
}

/** Calls `listener` whenever another config is loaded. */
export function onConfigChange(listener: (config: ConsoleConfig) => void): void {
  listeners.push(listener);
}

/**
 * Parses `text` from `source` and makes it the config in force. Throws the
 * parser's error (its message names the field) and keeps the previous one.
 */
export async function loadConfig(text: string, source: string): Promise<ConsoleConfig> {
  const config = parseOperatorAttestationConfig(text, { source });
  const loaded: ConsoleConfig = {
    config,
    source,
    digest: await measurementsDigest(config.measurements),
    text,
  };
  current = loaded;
  for (const listener of listeners) listener(loaded);
  return loaded;
}
