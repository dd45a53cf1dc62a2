/**
 * The operator's master secret file, in the original CLI's format
 * (`constellation-mastersecret.json`):
 *
 * ```json
 * {"key": "<standard base64>", "salt": "<standard base64>"}
 * ```
 *
 * `key` is the cluster's master secret (32 random bytes when the CLI
 * creates it; at least 16 accepted), `salt` the HKDF salt of every key
 * derived from it (32 random bytes; at least 32 accepted). Whoever holds the
 * file can derive every node's disk key: it is created with mode 0600,
 * exclusively (an existing file is never overwritten), and its content never
 * reaches a message.
 *
 * @module
 */
import { isPlainObject } from "../attestation/measurements.ts";
import { readRegularTextFile } from "../fs/read_regular_file.ts";
import { describeRepeatedKey, findRepeatedKey } from "../json/repeated_key.ts";
import { MASTER_SALT_MIN_LENGTH, MASTER_SECRET_MIN_LENGTH } from "../kms/keys.ts";
import type { MasterSecret } from "../kms/uri.ts";
import { CliError } from "./errors.ts";
import { createNewFile, describeFsError } from "./output_file.ts";

/** Length of a master secret the CLI generates. */
export const GENERATED_MASTER_SECRET_LENGTH = 32;
/** Length of a master salt the CLI generates. */
export const GENERATED_MASTER_SALT_LENGTH = 32;

const WHAT = "master secret file";
const FIELDS = ["key", "salt"] as const;
const STANDARD_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** The master secret and whether this run created the file. */
export interface LoadedMasterSecret {
  /** The master secret and salt. */
  secret: MasterSecret;
  /** True when the file did not exist and was created now. */
  created: boolean;
}

/**
 * Parses the file's text. Throws {@linkcode CliError} "master-secret" naming
 * the file and the field, never a value, nor the name of an unknown field.
 * A key given twice is refused.
 */
export function parseMasterSecretFile(text: string, path: string): MasterSecret {
  const fail = (message: string): never => {
    throw new CliError("master-secret", `${WHAT} ${path}: ${message}`);
  };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // The parser's message may quote the content: not repeated.
    fail(`not valid JSON; want {"key": "<base64>", "salt": "<base64>"}`);
  }
  if (!isPlainObject(value)) return fail(`want a JSON object {"key": "<base64>", "salt": "<base64>"}`);
  // Counted, never named: a field's name may be the secret itself, pasted one line too high.
  const unknown = Object.keys(value).filter((field) => !(FIELDS as readonly string[]).includes(field)).length;
  if (unknown === 1) fail(`an unknown field (known: key, salt; its name is not repeated)`);
  if (unknown > 1) fail(`${unknown} unknown fields (known: key, salt; their names are not repeated)`);
  // JSON.parse keeps the last of two equal keys: which key is the cluster's must not be a guess. Named only
  // when it is "key" or "salt": a key inside a value may be secret material too.
  const repeated = findRepeatedKey(text);
  if (repeated !== undefined) {
    const named = repeated.path.length === 0 && (FIELDS as readonly string[]).includes(repeated.key);
    fail(
      `${named ? describeRepeatedKey(repeated) : "a key inside a value is given twice"}: give each key once`,
    );
  }
  const decode = (field: (typeof FIELDS)[number], minLength: number): Uint8Array => {
    const encoded = value[field];
    if (encoded === undefined) fail(`"${field}" is missing`);
    if (typeof encoded !== "string" || !STANDARD_BASE64.test(encoded)) {
      fail(`"${field}" must be standard base64 (with padding)`);
    }
    const bytes = Uint8Array.fromBase64(encoded as string);
    if (bytes.length < minLength) fail(`"${field}" is ${bytes.length} bytes, want at least ${minLength}`);
    return bytes;
  };
  return { key: decode("key", MASTER_SECRET_MIN_LENGTH), salt: decode("salt", MASTER_SALT_MIN_LENGTH) };
}

/** The file's JSON text for `secret` (standard base64, as the original wrote it). */
export function encodeMasterSecretFile(secret: MasterSecret): string {
  return `${JSON.stringify({ key: secret.key.toBase64(), salt: secret.salt.toBase64() })}\n`;
}

/**
 * Reads the master secret file at `path`. Throws {@linkcode CliError}
 * "master-secret" when it is missing, unreadable or malformed.
 */
export async function readMasterSecretFile(path: string): Promise<MasterSecret> {
  let text: string;
  try {
    text = await readRegularTextFile(path);
  } catch (error) {
    throw new CliError(
      "master-secret",
      `cannot read ${WHAT} ${path}: ${describeFsError(error, path, "read")}`,
      {
        cause: error,
      },
    );
  }
  return parseMasterSecretFile(text, path);
}

/**
 * Reads the master secret file at `path`, or, when there is none, creates
 * it with a fresh random secret and salt (mode 0600, exclusively: a file
 * appearing meanwhile is not overwritten but refused).
 */
export async function loadOrCreateMasterSecretFile(path: string): Promise<LoadedMasterSecret> {
  try {
    await Deno.lstat(path);
    return { secret: await readMasterSecretFile(path), created: false };
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) {
      if (error instanceof CliError) throw error;
      throw new CliError(
        "master-secret",
        `cannot read ${WHAT} ${path}: ${describeFsError(error, path, "read")}`,
        {
          cause: error,
        },
      );
    }
  }
  const secret: MasterSecret = {
    key: crypto.getRandomValues(new Uint8Array(GENERATED_MASTER_SECRET_LENGTH)),
    salt: crypto.getRandomValues(new Uint8Array(GENERATED_MASTER_SALT_LENGTH)),
  };
  try {
    await createNewFile(path, new TextEncoder().encode(encodeMasterSecretFile(secret)), WHAT);
  } catch (error) {
    throw new CliError("master-secret", (error as Error).message, { cause: error });
  }
  return { secret, created: true };
}
