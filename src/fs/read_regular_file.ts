/**
 * Reads an input file that must be a regular file: a named pipe given by
 * mistake (or a device) would block the read forever, or never end.
 *
 * @module
 */

/** The path names something other than a regular file (a directory, a named pipe, a socket, a device). */
export class NotARegularFileError extends Error {
  /** `path` is not a regular file; the message says what it is instead. */
  constructor(path: string, what: string) {
    super(`${path} is ${what}, not a regular file`);
    this.name = "NotARegularFileError";
  }
}

/**
 * The bytes of the regular file at `path` (following symlinks). Throws
 * {@linkcode NotARegularFileError} for anything else, and Deno's errors as
 * they are (NotFound, PermissionDenied, NotCapable).
 */
export async function readRegularFile(
  path: string,
  options: { signal?: AbortSignal } = {},
): Promise<Uint8Array> {
  const info = await Deno.stat(path);
  if (!info.isFile) {
    const what = info.isDirectory
      ? "a directory"
      : info.isFifo
      ? "a named pipe"
      : info.isSocket
      ? "a socket"
      : info.isCharDevice || info.isBlockDevice
      ? "a device"
      : "not a file";
    throw new NotARegularFileError(path, what);
  }
  return await Deno.readFile(path, options);
}

/** The UTF-8 text of the regular file at `path`, as {@linkcode readRegularFile}. */
export async function readRegularTextFile(
  path: string,
  options: { signal?: AbortSignal } = {},
): Promise<string> {
  return new TextDecoder().decode(await readRegularFile(path, options));
}
