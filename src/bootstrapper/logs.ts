/**
 * The node's logs, sent to the operator's CLI after a failed init (reference
 * §4.6): the journal of the bootstrapper and kubelet units, or, where there
 * is no journal (a container, a local cluster), the bootstrapper's own log
 * file. Unlike the original's single-use collector, every call collects
 * afresh, so every failed attempt gets logs.
 *
 * The result is bounded (the last 1 MiB by default) so a long journal cannot
 * blow up the response.
 *
 * Needs `--allow-run=<journalctl>` and read access to the fallback file.
 *
 * @module
 */
import { concatBytes } from "../bytes/concat.ts";
import { runTool, stderrExcerpt, ToolError } from "../os/run_tool.ts";

/** Units whose journal is collected by default. */
export const DEFAULT_LOG_UNITS: readonly string[] = ["constellation-bootstrapper.service", "kubelet.service"];

/** Default bound of collected logs: the last 1 MiB. */
export const DEFAULT_MAX_LOG_BYTES = 1 << 20;

/** Default chunk size of {@linkcode chunks}: 64 KiB. */
export const DEFAULT_CHUNK_BYTES = 64 * 1024;

/** Options of {@linkcode JournalLogs}. */
export interface JournalLogsOptions {
  /** journalctl binary; default "journalctl". */
  binary?: string;
  /** Units whose entries are collected; default {@linkcode DEFAULT_LOG_UNITS}. */
  units?: string[];
  /** The bootstrapper's own log file, used when journalctl is missing, fails or has no entries. */
  fallbackFile?: string;
  /** At most this many bytes (the newest) are returned; default {@linkcode DEFAULT_MAX_LOG_BYTES}. */
  maxBytes?: number;
  /** Environment of journalctl (nothing is inherited); default empty. */
  env?: Record<string, string>;
}

/**
 * Fewest bytes assumed of a journal line when asking journalctl for the newest `maxBytes`: a short-iso line's
 * timestamp, host and unit alone take more.
 */
const MIN_LINE_BYTES = 32;

/** journalctl's line when it has nothing to show (it still exits 0). */
const NO_ENTRIES = "-- No entries --";

/** Collects the node's logs. */
export class JournalLogs {
  readonly #binary: string;
  readonly #units: readonly string[];
  readonly #fallbackFile?: string;
  readonly #maxBytes: number;
  readonly #env: Record<string, string>;

  /** A collector; see {@linkcode JournalLogsOptions} for the defaults. */
  constructor(options: JournalLogsOptions = {}) {
    this.#binary = options.binary ?? "journalctl";
    this.#units = options.units ?? DEFAULT_LOG_UNITS;
    this.#fallbackFile = options.fallbackFile;
    this.#maxBytes = options.maxBytes ?? DEFAULT_MAX_LOG_BYTES;
    this.#env = options.env ?? {};
    if (!Number.isInteger(this.#maxBytes) || this.#maxBytes <= 0) {
      throw new RangeError(`maxBytes must be a positive integer, not ${this.#maxBytes}`);
    }
  }

  /**
   * The newest logs, at most `maxBytes` of them: journalctl's output
   * (`--no-pager -o short-iso -n <lines> -u <unit>…`) when it has entries, else the
   * fallback file's tail after one line saying why, else a line saying that
   * no logs are available and why. Never rejects for a missing source; only
   * an abort rejects (with the signal's reason).
   */
  async collect(options: { signal?: AbortSignal } = {}): Promise<Uint8Array> {
    const { signal } = options;
    signal?.throwIfAborted();
    const journal = await this.#journal(signal);
    signal?.throwIfAborted();
    if (journal instanceof Uint8Array) return journal;
    if (this.#fallbackFile === undefined) return encode(`-- no logs: ${journal} --\n`);
    const tail = await readTail(this.#fallbackFile, this.#maxBytes);
    if (typeof tail === "string") return encode(`-- no logs: ${journal}; ${tail} --\n`);
    return concatBytes(encode(`-- ${journal}; showing ${this.#fallbackFile} --\n`), tail);
  }

  /** The journal's bounded output, or why there is none. */
  async #journal(signal?: AbortSignal): Promise<Uint8Array | string> {
    // journalctl reads only the newest lines, so a long journal costs neither its time nor its size; the
    // byte bound holds for lines of any length.
    const lines = Math.ceil(this.#maxBytes / MIN_LINE_BYTES);
    const args = [
      "--no-pager",
      "-o",
      "short-iso",
      "-n",
      String(lines),
      ...this.#units.flatMap((unit) => ["-u", unit]),
    ];
    try {
      const output = await runTool(this.#binary, args, {
        env: this.#env,
        signal,
        maxOutputBytes: this.#maxBytes,
      });
      if (!output.success) {
        return `journalctl failed (exit code ${output.code}): ${stderrExcerpt(output.stderr)}`;
      }
      const text = output.stdout.trim();
      if (text === "" || text === NO_ENTRIES) return "the journal has no entries";
      return output.stdoutBytes;
    } catch (error) {
      if (error instanceof ToolError && error.reason !== "aborted") return error.message;
      throw signal?.reason ?? error;
    }
  }
}

/**
 * `bytes` split into consecutive pieces of `size` bytes (the last may be
 * shorter); none for empty input. The pieces are views, not copies.
 */
export function chunks(bytes: Uint8Array, size: number = DEFAULT_CHUNK_BYTES): Uint8Array[] {
  if (!Number.isInteger(size) || size <= 0) {
    throw new RangeError(`chunk size must be a positive integer, not ${size}`);
  }
  const pieces: Uint8Array[] = [];
  for (let offset = 0; offset < bytes.length; offset += size) {
    pieces.push(bytes.subarray(offset, offset + size));
  }
  return pieces;
}

/** The last `maxBytes` of `path`, or why it cannot be read. */
async function readTail(path: string, maxBytes: number): Promise<Uint8Array | string> {
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

function encode(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}
