/**
 * Runs one OS tool (cryptsetup, systemctl, journalctl, kubeadm) the way every
 * adapter of the bootstrapper must: a configurable binary, a cleared
 * environment plus exactly the variables the caller names, stdin only when
 * given, output captured with a size bound (the last `maxOutputBytes` of
 * each stream, 16 MiB by default; `truncated` says when more was cut), and an
 * `AbortSignal` that kills the tool.
 *
 * A non-zero exit is not an error here: each adapter knows what its tool's
 * exit codes mean. Not being able to run the tool at all, or an abort, is a
 * {@linkcode ToolError}. Secrets travel only through `stdin` and never reach
 * argv; `redact` removes known secret values from the captured output before
 * anyone sees it.
 *
 * @module
 */
import { errorFirstLine } from "../error_message.ts";
import { concatBytes } from "../bytes/concat.ts";
import { ReasonError } from "../reason_error.ts";

/** Why a tool could not be run to completion. */
export type ToolFailure = "not-found" | "not-permitted" | "start-failed" | "aborted";

/** A tool could not be started, or was aborted. The message names the binary, never a secret. */
export class ToolError extends ReasonError<ToolFailure> {
  /** The binary as configured. */
  readonly binary: string;

  /** `binary` could not run for `reason`; `message` says how. */
  constructor(reason: ToolFailure, binary: string, message: string, options?: ErrorOptions) {
    super(reason, message, options);
    this.binary = binary;
  }
}

/** Options of {@linkcode runTool}. */
export interface RunToolOptions {
  /** The complete environment of the tool (nothing is inherited). */
  env?: Record<string, string>;
  /** Bytes written to the tool's stdin; stdin is empty otherwise. */
  stdin?: Uint8Array;
  /** Aborting kills the tool; the call then rejects with a `ToolError` of reason "aborted". */
  signal?: AbortSignal;
  /** Values (tokens, passphrases as text) replaced by `[REDACTED]` in stdout and stderr. */
  redact?: readonly string[];
  /**
   * Of each of stdout and stderr only the last this many bytes are kept (a tool's end says how it ended);
   * default {@linkcode DEFAULT_MAX_OUTPUT_BYTES}.
   */
  maxOutputBytes?: number;
}

/** Default bound of each captured stream: 16 MiB. */
export const DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 ** 2;

/** What a tool did. */
export interface ToolOutput {
  /** Exit code (null when killed by a signal). */
  code: number | null;
  /** The signal that killed it, if one did. */
  signal: Deno.Signal | null;
  /** Whether it exited 0. */
  success: boolean;
  /** stdout, redacted. */
  stdout: string;
  /** stderr, redacted. */
  stderr: string;
  /** stdout as raw bytes (not redacted: only for tools whose output holds no secret). */
  stdoutBytes: Uint8Array;
  /**
   * Whether stdout or stderr was longer than `maxOutputBytes`, so that only its end was kept (and, in
   * `stdout` and `stderr`, only from its first whole line on).
   */
  truncated: boolean;
}

/** Placeholder for a redacted value. */
export const REDACTED = "[REDACTED]";

const MAX_EXCERPT_CHARS = 500;

/**
 * Runs `binary args…` to completion.
 *
 * @throws {ToolError} when the binary is missing, not allowed, cannot start, or the signal aborts it
 */
export async function runTool(binary: string, args: readonly string[], options: RunToolOptions = {}): Promise<
  ToolOutput
> {
  const { signal, stdin } = options;
  if (signal?.aborted) throw abortedError(binary, signal);
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(binary, {
      args: [...args],
      clearEnv: true,
      env: options.env ?? {},
      stdin: stdin ? "piped" : "null",
      stdout: "piped",
      stderr: "piped",
      signal,
    }).spawn();
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      throw new ToolError("not-found", binary, `${binary} not found`, { cause: error });
    }
    if (error instanceof Deno.errors.NotCapable || error instanceof Deno.errors.PermissionDenied) {
      throw new ToolError(
        "not-permitted",
        binary,
        `not allowed to run ${binary} (grant --allow-run=${binary})`,
        {
          cause: error,
        },
      );
    }
    throw new ToolError("start-failed", binary, `${binary} could not start: ${errorFirstLine(error)}`, {
      cause: error,
    });
  }
  const maxBytes = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  const pending = Promise.all([
    readTail(child.stdout, maxBytes),
    readTail(child.stderr, maxBytes),
    child.status,
  ]);
  // A tool that exits before reading its input says why through its exit code and stderr.
  if (stdin) await writeAndClose(child.stdin, stdin).catch(() => {});
  const [stdout, stderr, status] = await pending;
  if (signal?.aborted) throw abortedError(binary, signal);
  const redact = options.redact ?? [];
  const text = (tail: { bytes: Uint8Array; cut: boolean }) => {
    const decoded = new TextDecoder().decode(tail.bytes);
    // A cut can split a secret, whose remaining end no longer matches `redact`: start at a whole line.
    return redactValues(tail.cut ? decoded.slice(decoded.indexOf("\n") + 1) : decoded, redact);
  };
  return {
    code: status.signal ? null : status.code,
    signal: status.signal,
    success: status.success,
    stdout: text(stdout),
    stderr: text(stderr),
    stdoutBytes: stdout.bytes,
    truncated: stdout.cut || stderr.cut,
  };
}

/** The last `maxBytes` of `stream`, read to its end with at most `maxBytes` plus one chunk held. */
async function readTail(
  stream: ReadableStream<Uint8Array>,
  maxBytes: number,
): Promise<{ bytes: Uint8Array; cut: boolean }> {
  const kept: Uint8Array[] = [];
  let length = 0;
  let cut = false;
  for await (const chunk of stream) {
    kept.push(chunk);
    length += chunk.length;
    while (length - kept[0].length >= maxBytes) {
      length -= kept.shift()!.length;
      cut = true;
    }
  }
  const bytes = concatBytes(...kept);
  if (bytes.length <= maxBytes) return { bytes, cut };
  return { bytes: bytes.subarray(bytes.length - maxBytes), cut: true };
}

/** `text` with every occurrence of each non-empty value in `values` replaced by {@linkcode REDACTED}. */
export function redactValues(text: string, values: readonly string[]): string {
  let redacted = text;
  for (const value of values) if (value !== "") redacted = redacted.replaceAll(value, REDACTED);
  return redacted;
}

/**
 * A one-line, bounded excerpt of a tool's stderr for error messages:
 * trimmed lines joined with " | ", at most `maxChars` (default 500) characters.
 */
export function stderrExcerpt(stderr: string, maxChars: number = MAX_EXCERPT_CHARS): string {
  const text = stderr.split("\n").map((line) => line.trim()).filter(Boolean).join(" | ");
  if (text === "") return "no error output";
  return text.length > maxChars ? `${text.slice(0, maxChars)}…` : text;
}

/** How a finished tool ended, for messages: "exit code 2" or "killed by SIGKILL". */
export function exitStatus(output: ToolOutput): string {
  return output.code === null ? `killed by ${output.signal ?? "a signal"}` : `exit code ${output.code}`;
}

function abortedError(binary: string, signal: AbortSignal): ToolError {
  return new ToolError("aborted", binary, `${binary} was aborted`, { cause: signal.reason });
}

async function writeAndClose(stream: WritableStream<Uint8Array>, bytes: Uint8Array): Promise<void> {
  const writer = stream.getWriter();
  try {
    await writer.write(bytes);
  } finally {
    await writer.close();
  }
}
