/**
 * Builds the KMS an init request asks for from its storage and KMS URIs.
 *
 * @module
 */
import { ClusterKms } from "./cluster_kms.ts";
import { parseKmsUri, parseStorageUri } from "./uri.ts";

/** Options for {@linkcode setupKms}. */
export interface SetupKmsOptions {
  /** Storage URI; only `storage://no-store` is implemented. */
  storageUri: string;
  /** KMS URI; only `kms://cluster-kms?key=…&salt=…` is implemented. */
  kmsUri: string;
}

/**
 * Parses the storage URI, then the KMS URI (the original's order, so a bad
 * storage URI is reported first), and returns the cluster KMS.
 *
 * @throws {KmsError} for a malformed or unsupported URI, or an empty key or
 * salt ("missing master key", "missing salt").
 */
export function setupKms(options: SetupKmsOptions): ClusterKms {
  parseStorageUri(options.storageUri);
  const secret = parseKmsUri(options.kmsUri);
  return new ClusterKms(secret.key, secret.salt);
}
