/**
 * The limits of `kms.API/GetDataKeys`, which the key service enforces and
 * its client keeps to.
 *
 * @module
 */
import { MAX_DERIVED_KEY_LENGTH } from "../kms/hkdf.ts";

/** The most keys one `GetDataKeys` call may ask for. */
export const MAX_DATA_KEYS_PER_CALL = 64;
/**
 * The most bytes of keys (their lengths summed) one `GetDataKeys` call may
 * ask for: twice the longest single key, so a call costs the service about
 * what two `GetDataKey` calls can (64 keys of 32 bytes are 2,048).
 */
export const MAX_DATA_KEY_BYTES_PER_CALL = 2 * MAX_DERIVED_KEY_LENGTH;
