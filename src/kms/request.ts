/**
 * The cluster KMS that an operator's request to a node names (the init's
 * and the recovery's `kms_uri` and `storage_uri`), checked the same way for
 * both.
 *
 * @module
 */
import { ClusterKms } from "./cluster_kms.ts";
import { KmsError } from "./errors.ts";
import { type MasterSecret, parseKmsUri, parseStorageUri } from "./uri.ts";

/** A request's master secret and the KMS over it. */
export interface RequestKms {
  /** The master secret and salt of `kms_uri`. */
  masterSecret: MasterSecret;
  /** Derives the cluster's keys from it. */
  kms: ClusterKms;
}

/**
 * Checks `storageUri` (empty or `storage://no-store`) and `kmsUri` (a
 * cluster KMS with a non-empty secret and salt) and returns the KMS.
 *
 * @throws {KmsError} whose message starts with the parameter's name
 * (`kms_uri: …`); it never holds the URI's values.
 */
export function requestKms(request: { kmsUri: string; storageUri: string }): RequestKms {
  const named = (parameter: string, parse: () => RequestKms | void) => {
    try {
      return parse();
    } catch (error) {
      if (!(error instanceof KmsError)) throw error;
      throw new KmsError(error.reason, `${parameter}: ${error.message}`, { cause: error });
    }
  };
  if (request.storageUri !== "") named("storage_uri", () => void parseStorageUri(request.storageUri));
  return named("kms_uri", () => {
    const masterSecret = parseKmsUri(request.kmsUri);
    return { masterSecret, kms: new ClusterKms(masterSecret.key, masterSecret.salt) };
  }) as RequestKms;
}
