/**
 * PCR helpers: reading the SHA-256 bank, and marking a node as bootstrapped
 * by measuring its cluster ID into PCR 15.
 *
 * A fresh node's PCR 15 is all zeros. {@linkcode extendPcr15} runs
 * `TPM2_PCR_Event(15, clusterId)`: the TPM hashes the data per bank and
 * extends, so the SHA-256 bank becomes `SHA256(old ‖ SHA256(clusterId))`.
 * Only a TPM reset returns it to zero, so attestation can tell a node that
 * has already joined a cluster from a fresh one.
 *
 * Needs `--allow-run=tpm2_pcrread` for reading, and tpm2_pcrevent and
 * tpm2_flushcontext for {@linkcode extendPcr15}.
 *
 * @module
 */
import { MAX_PCR_INDEX } from "./structures.ts";
import { runLoadingTpmTool, runTpmTool, type TpmConnection, TpmToolError } from "./tools.ts";

/** The PCR that holds the cluster ID once the node is bootstrapped. */
export const CLUSTER_ID_PCR = 15;

const SHA256_LENGTH = 32;

/** Options for the PCR helpers. */
export interface PcrOptions {
  /** Aborts the TPM tool runs. */
  signal?: AbortSignal;
}

/**
 * Reads PCRs of the SHA-256 bank.
 *
 * @param indices PCR indices 0..23
 * @returns the values by index, ascending
 * @throws {RangeError} for invalid indices
 * @throws {TpmToolError} when the TPM cannot be read or lacks a SHA-256 bank
 */
export async function readPcrs(
  tpm: TpmConnection,
  indices: readonly number[],
  options: PcrOptions = {},
): Promise<Map<number, Uint8Array>> {
  const sorted = [...new Set(indices)].sort((a, b) => a - b);
  if (sorted.length === 0) throw new RangeError("no PCR index given");
  for (const index of sorted) checkIndex(index);
  // -Q silences the YAML summary so stdout holds only the raw values, ascending by index.
  const raw = await runTpmTool(
    tpm,
    "tpm2_pcrread",
    ["-Q", `sha256:${sorted.join(",")}`, "-o", "/dev/stdout"],
    {
      signal: options.signal,
    },
  );
  return pcrValues("tpm2_pcrread", sorted, raw);
}

/**
 * The SHA-256 values `tool` wrote for the PCRs `sorted` (ascending, as
 * tpm2-tools orders them), one after the other: `tpm2_pcrread -o`, or
 * `tpm2_quote -o … -F values`. Throws {@linkcode TpmToolError} when the
 * length does not fit.
 */
export function pcrValues(tool: string, sorted: readonly number[], raw: Uint8Array): Map<number, Uint8Array> {
  if (raw.length !== sorted.length * SHA256_LENGTH) {
    throw new TpmToolError(
      tool,
      0,
      `${tool} returned ${raw.length} bytes for ${sorted.length} SHA-256 PCRs; is the SHA-256 bank allocated?`,
    );
  }
  return new Map(sorted.map((index, i) => [index, raw.slice(i * SHA256_LENGTH, (i + 1) * SHA256_LENGTH)]));
}

/** Reads one PCR of the SHA-256 bank (see {@linkcode readPcrs}). */
export async function readPcr(
  tpm: TpmConnection,
  index: number,
  options: PcrOptions = {},
): Promise<Uint8Array> {
  const values = await readPcrs(tpm, [index], options);
  return values.get(index)!;
}

/**
 * Measures the cluster ID into PCR 15 (`TPM2_PCR_Event`), marking the node as
 * bootstrapped.
 *
 * @throws {RangeError} for an empty cluster ID
 * @throws {TpmToolError} when the TPM refuses
 */
export async function extendPcr15(
  tpm: TpmConnection,
  clusterId: Uint8Array,
  options: PcrOptions = {},
): Promise<void> {
  if (clusterId.length === 0) throw new RangeError("cluster ID must not be empty");
  // The event data goes through stdin: no file to write, and tpm2_pcrevent then
  // hashes it in a TPM hash sequence, an object that must be flushed afterwards.
  await runLoadingTpmTool(tpm, "tpm2_pcrevent", [String(CLUSTER_ID_PCR)], {
    signal: options.signal,
    stdin: clusterId,
  });
}

/** Whether PCR 15 holds a cluster ID, i.e. is not all zeros. */
export async function isNodeBootstrapped(tpm: TpmConnection, options: PcrOptions = {}): Promise<boolean> {
  const value = await readPcr(tpm, CLUSTER_ID_PCR, options);
  return value.some((byte) => byte !== 0);
}

function checkIndex(index: number): void {
  if (!Number.isInteger(index) || index < 0 || index > MAX_PCR_INDEX) {
    throw new RangeError(`PCR index ${index} is not an integer in 0..${MAX_PCR_INDEX}`);
  }
}
