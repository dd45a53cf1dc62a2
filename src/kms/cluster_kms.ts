/**
 * The cluster KMS: every data encryption key (DEK) is derived from the
 * cluster's master secret and salt, so whoever holds them (key service,
 * first bootstrapper, the CLI's recovery) derives the same keys.
 *
 * @module
 */
import { KmsError } from "./errors.ts";
import { deriveKey } from "./hkdf.ts";

/** Derives data keys from a master secret and salt with HKDF-SHA256. */
export class ClusterKms {
  readonly #masterKey: Uint8Array<ArrayBuffer>;
  readonly #salt: Uint8Array<ArrayBuffer>;

  /**
   * Keeps copies of `masterKey` and `salt` (private, never printed).
   *
   * @throws {KmsError} `missing-master-key` ("missing master key") for an
   * empty master key, `missing-salt` ("missing salt") for an empty salt.
   */
  constructor(masterKey: Uint8Array, salt: Uint8Array) {
    if (masterKey.length === 0) throw new KmsError("missing-master-key", "missing master key");
    if (salt.length === 0) throw new KmsError("missing-salt", "missing salt");
    this.#masterKey = new Uint8Array(masterKey);
    this.#salt = new Uint8Array(salt);
  }

  /**
   * Returns HKDF-SHA256(master key, salt, info = `dekId` as UTF-8, `length`).
   * `dekId` is used verbatim (case-sensitive, prefix included, e.g.
   * "key-measurementSecret"; see `dataKeyInfo` in keys.ts).
   *
   * @throws {KmsError} `invalid-length` for a length outside 1..8160.
   */
  getDek(dekId: string, length: number): Promise<Uint8Array<ArrayBuffer>> {
    return deriveKey(this.#masterKey, this.#salt, dekId, length);
  }
}
