/**
 * The cluster's key IDs and the derivations built on them: the measurement
 * secret, the cluster ID and the state disk key.
 *
 * ```text
 * measurementSecret = HKDF(master secret, salt, "key-measurementSecret", 32)
 * clusterId         = HKDF(measurementSecret, measurementSalt, "key-clusterID", 32)
 * state disk key    = HKDF(master secret, salt, "key-" + lower-case disk UUID, 32)
 * ```
 *
 * @module
 */
import { deriveKey } from "./hkdf.ts";
import { primitives } from "../crypto/primitives.ts";

/** Prefix of every data key's HKDF info; the key service adds it to the IDs it is asked for. */
export const DEK_PREFIX = "key-";

/** Key ID of the measurement secret (what the join service asks the key service for). */
export const MEASUREMENT_SECRET_KEY_ID = "measurementSecret";

/** HKDF info of the cluster ID. */
export const CLUSTER_ID_INFO = `${DEK_PREFIX}clusterID`;

/** Length of derived keys: measurement secret, cluster ID, state disk key. */
export const DERIVED_KEY_LENGTH = 32;

/** Shortest accepted master secret in bytes. */
export const MASTER_SECRET_MIN_LENGTH = 16;

/** Shortest accepted master salt in bytes. */
export const MASTER_SALT_MIN_LENGTH = 32;

/** Derives a data key from its full HKDF info (e.g. the cluster KMS). */
export interface DataKeyDeriver {
  /** Returns the key for `dekId` (the full HKDF info, prefix included). */
  getDek(dekId: string, length: number): Promise<Uint8Array>;
}

/** The HKDF info of the data key with ID `keyId`: `"key-" + keyId`. */
export function dataKeyInfo(keyId: string): string {
  return DEK_PREFIX + keyId;
}

/**
 * The key ID of a state disk: its UUID, lower-cased. HKDF info is
 * case-sensitive, so a device reporting its UUID in upper case must still
 * get the same key.
 */
export function stateDiskKeyId(diskUuid: string): string {
  return diskUuid.toLowerCase();
}

/** Derives the cluster's measurement secret (info "key-measurementSecret", 32 bytes). */
export function deriveMeasurementSecret(kms: DataKeyDeriver): Promise<Uint8Array> {
  return kms.getDek(dataKeyInfo(MEASUREMENT_SECRET_KEY_ID), DERIVED_KEY_LENGTH);
}

/** Derives the key of the state disk with UUID `diskUuid` (lower-cased first; 32 bytes). */
export function deriveStateDiskKey(kms: DataKeyDeriver, diskUuid: string): Promise<Uint8Array> {
  return kms.getDek(dataKeyInfo(stateDiskKeyId(diskUuid)), DERIVED_KEY_LENGTH);
}

/**
 * Derives the cluster ID, the value a node extends into PCR 15 when it locks
 * itself to the cluster: HKDF(measurementSecret, measurementSalt, "key-clusterID", 32).
 */
export function deriveClusterId(
  measurementSecret: Uint8Array,
  measurementSalt: Uint8Array,
): Promise<Uint8Array> {
  return deriveKey(measurementSecret, measurementSalt, CLUSTER_ID_INFO, DERIVED_KEY_LENGTH);
}

/** What {@linkcode measurementSaltTag} authenticates the salt under. */
const SALT_TAG_LABEL = new TextEncoder().encode("constellation-ts measurement salt tag\n");

/**
 * The tag a state disk records beside the cluster's measurement salt:
 * HMAC-SHA256(measurementSecret, "constellation-ts measurement salt tag\n" ‖ salt).
 * Whoever can write the disk's (unencrypted) header cannot make a recovery
 * bind the node to another salt without the measurement secret.
 */
export function measurementSaltTag(
  measurementSecret: Uint8Array,
  measurementSalt: Uint8Array,
): Promise<Uint8Array> {
  const message = new Uint8Array(SALT_TAG_LABEL.length + measurementSalt.length);
  message.set(SALT_TAG_LABEL);
  message.set(measurementSalt, SALT_TAG_LABEL.length);
  return primitives.hmacSha256(measurementSecret, message);
}
