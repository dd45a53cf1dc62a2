/**
 * The cluster KMS that an operator's request to a node names (the init's
 * and the recovery's `kms_uri` and `storage_uri`), checked the same way for
 * both.
 *
 * @module
 */
import { ClusterKms } from "./cluster_kms.ts";
import { KmsError } from "./errors.ts";
import { MASTER_SALT_MIN_LENGTH, MASTER_SECRET_MIN_LENGTH } from "./keys.ts";
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
 * cluster KMS whose secret and salt are as long as the key service needs:
 * a cluster initialized with shorter ones would have no key service, so no
 * node could ever join it) and returns the KMS.
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
    for (
      const [what, bytes, min] of [
        ["master secret", masterSecret.key, MASTER_SECRET_MIN_LENGTH],
        ["salt", masterSecret.salt, MASTER_SALT_MIN_LENGTH],
      ] as const
    ) {
      if (bytes.length > 0 && bytes.length < min) {
        throw new KmsError(
          "short-master-secret",
          `the ${what} is ${bytes.length} bytes, want at least ${min}`,
        );
      }
    }
    return { masterSecret, kms: new ClusterKms(masterSecret.key, masterSecret.salt) };
  }) as RequestKms;
}
