/**
 * Reads secret files (master secret, salts) with errors an
 * operator can act on: one line naming the file and the problem, never its
 * content.
 *
 * @module
 */
import { errorFirstLine } from "../error_message.ts";
import { ReasonError } from "../reason_error.ts";
import { readRegularFile } from "../fs/read_regular_file.ts";

/** Why a secret file could not be used. */
export type SecretFileProblem = "missing" | "not-permitted" | "unreadable" | "too-short";

/** A secret file could not be used. The message names the file, never its content. */
export class SecretFileError extends ReasonError<SecretFileProblem> {
  /** The file's path. */
  readonly path: string;

  /**
   * A problem with the secret file at `path`; `message` never holds its
   * content. `options.cause`: the file system's error, for a caller that
   * words it in its own terms (e.g. its permission set).
   */
  constructor(reason: SecretFileProblem, path: string, message: string, options?: ErrorOptions) {
    super(reason, message, options);
    this.path = path;
  }
}

/** Options for {@linkcode readSecretFile}. */
export interface ReadSecretFileOptions {
  /** What the file holds, for messages, e.g. "master secret". */
  description: string;
  /** Fewest bytes accepted. */
  minLength: number;
}

/**
 * Reads a secret file as raw bytes.
 *
 * @throws {SecretFileError} when the file is missing, lies outside the
 * process's read permissions (Deno `NotCapable`), cannot be read, or is
 * shorter than `minLength`.
 */
export async function readSecretFile(path: string, options: ReadSecretFileOptions): Promise<Uint8Array> {
  const what = `${options.description} file ${path}`;
  let bytes: Uint8Array;
  try {
    bytes = await readRegularFile(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new SecretFileError("missing", path, `${what}: does not exist`, { cause: err });
    }
    if (err instanceof Deno.errors.NotCapable) {
      throw new SecretFileError(
        "not-permitted",
        path,
        `${what}: outside this process's read permissions (grant it with --allow-read=${path})`,
        { cause: err },
      );
    }
    if (err instanceof Deno.errors.PermissionDenied) {
      throw new SecretFileError("unreadable", path, `${what}: permission denied by the operating system`, {
        cause: err,
      });
    }
    throw new SecretFileError("unreadable", path, `${what}: cannot be read: ${errorFirstLine(err)}`, {
      cause: err,
    });
  }
  if (bytes.length < options.minLength) {
    bytes.fill(0);
    throw new SecretFileError(
      "too-short",
      path,
      `${what}: too short: ${bytes.length} bytes, want at least ${options.minLength}`,
    );
  }
  return bytes;
}
