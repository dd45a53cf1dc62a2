/**
 * The end of a file that grows (a log), read without reading the rest.
 *
 * @module
 */

/** The last `maxBytes` of `path`, or why it cannot be read. */
export async function readTail(path: string, maxBytes: number): Promise<Uint8Array | string> {
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return `${path} does not exist`;
    return `${path} cannot be read: ${(error as Error).message.split("\n")[0]}`;
  }
  try {
    const { size } = await file.stat();
    const start = Math.max(0, size - maxBytes);
    await file.seek(start, Deno.SeekMode.Start);
    const buffer = new Uint8Array(size - start);
    let filled = 0;
    while (filled < buffer.length) {
      const read = await file.read(buffer.subarray(filled));
      if (read === null) break;
      filled += read;
    }
    return buffer.subarray(0, filled);
  } catch (error) {
    return `${path} cannot be read: ${(error as Error).message.split("\n")[0]}`;
  } finally {
    file.close();
  }
}
