/**
 * The TPM side of the node lock: a node is bound to a cluster once PCR 15 is
 * extended with the cluster ID (reference §3.2). PCR 15 is all zeros after a
 * TPM reset and can only be extended, never set, so a non-zero value proves
 * (to attestation, and to the bootstrapper after a restart) that this boot
 * already took the node lock.
 *
 * @module
 */
import { extendPcr15, isNodeBootstrapped, type PcrOptions } from "../attestation/tpm/pcr.ts";
import type { TpmConnection } from "../attestation/tpm/tools.ts";
import type { ClusterMarker } from "./nodelock.ts";

/** Marks the node by `TPM2_PCR_Event(15, clusterId)`: PCR 15 becomes SHA256(old ‖ SHA256(clusterId)). */
export class TpmClusterMarker implements ClusterMarker {
  readonly #tpm: TpmConnection;

  /** A marker for the TPM behind `tpm`. */
  constructor(tpm: TpmConnection) {
    this.#tpm = tpm;
  }

  /**
   * Extends PCR 15 with `clusterId`.
   *
   * @throws {RangeError} for an empty cluster ID
   * @throws {TpmToolError} when the TPM refuses
   */
  mark(clusterId: Uint8Array, options: PcrOptions = {}): Promise<void> {
    return extendPcr15(this.#tpm, clusterId, options);
  }
}

/**
 * Whether this boot already bound the node to a cluster: PCR 15 (SHA-256
 * bank) is not all zeros.
 *
 * @throws {TpmToolError} when the PCR cannot be read, or the
 * read returns no or a wrongly sized value (e.g. no SHA-256 bank)
 */
export function isNodeBound(tpm: TpmConnection, options: PcrOptions = {}): Promise<boolean> {
  return isNodeBootstrapped(tpm, options);
}
