/**
 * Runs tpm2-tools programs against one TPM.
 *
 * Every tool runs with a cleared environment except `TPM2TOOLS_TCTI`, so the
 * TPM it talks to is exactly the configured one and the process needs only
 * `--allow-run=<tool>`. Failures become a {@linkcode TpmToolError} naming the
 * tool and carrying its stderr.
 *
 * Without a resource manager (swtpm, `/dev/tpm0`) objects a tool loads stay
 * in the TPM after it exits, and a TPM has only a few object slots; tools that
 * load objects therefore run through {@linkcode runLoadingTpmTool}, which
 * flushes transient objects afterwards, whatever happened.
 *
 * Tools for one TCTI run one at a time within this process: swtpm serves one
 * connection at a time, and without a resource manager one tool's flush would
 * evict the key another tool has just loaded.
 *
 * @module
 */
import { exitStatus, runTool, stderrExcerpt, ToolError, type ToolOutput } from "../../os/run_tool.ts";

/** TCTI of the kernel's resource-managed TPM device. */
export const DEFAULT_TCTI = "device:/dev/tpmrm0";

/** Which TPM to talk to. */
export interface TpmConnection {
  /** A tpm2-tools TCTI string, e.g. "device:/dev/tpmrm0" or "swtpm:host=127.0.0.1,port=2321". */
  readonly tcti: string;
  /** How long one tool may take; default {@linkcode TPM_TOOL_TIMEOUT_MS}. */
  readonly toolTimeoutMs?: number;
}

/**
 * How long one tpm2-tools run may take before it is killed: a TPM (or a TCTI
 * socket) that never answers must end in an error naming the TPM, not hold a
 * node's boot without a word. Generous: creating an RSA primary key takes a
 * slow discrete TPM tens of seconds.
 */
export const TPM_TOOL_TIMEOUT_MS = 120_000;

/** A tpm2-tools program could not run or failed. */
export class TpmToolError extends Error {
  /** The program, e.g. "tpm2_quote". */
  readonly tool: string;
  /** Its exit code, or null when it did not run to completion. */
  readonly exitCode: number | null;

  /** `tool` failed with `exitCode` (null when killed); `message` says how. */
  constructor(tool: string, exitCode: number | null, message: string) {
    super(message);
    this.name = "TpmToolError";
    this.tool = tool;
    this.exitCode = exitCode;
  }
}

/** Options of {@linkcode runTpmTool}. */
export interface RunTpmToolOptions {
  /** Aborting kills the tool and rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Bytes written to the tool's stdin (stdin is empty otherwise). */
  stdin?: Uint8Array;
}

const MAX_STDERR_CHARS = 2000;

/**
 * Runs `tool args…` and returns its stdout.
 *
 * @throws {TpmToolError} when the tool is missing, not allowed, or exits non-zero
 */
export function runTpmTool(
  tpm: TpmConnection,
  tool: string,
  args: string[],
  options: RunTpmToolOptions = {},
): Promise<Uint8Array> {
  return exclusive(tpm.tcti, () => run(tpm, tool, args, options));
}

/**
 * Runs a tool that loads objects (keys, sequences) into the TPM, then flushes
 * all transient objects, also when the tool failed or was aborted. The flush
 * ignores the abort signal so an aborted call still leaves the TPM clean.
 */
export function runLoadingTpmTool(
  tpm: TpmConnection,
  tool: string,
  args: string[],
  options: RunTpmToolOptions = {},
): Promise<Uint8Array> {
  return exclusive(tpm.tcti, async () => {
    let stdout: Uint8Array;
    try {
      stdout = await run(tpm, tool, args, options);
    } catch (error) {
      // The tool's own failure is the one worth reporting; a failing flush would only hide it.
      await run(tpm, FLUSH_TOOL, FLUSH_TRANSIENT).catch(() => {});
      throw error;
    }
    await run(tpm, FLUSH_TOOL, FLUSH_TRANSIENT);
    return stdout;
  });
}

/** Flushes every transient object (`tpm2_flushcontext -t`), e.g. left over by a crashed process. */
export function flushTransientObjects(tpm: TpmConnection): Promise<void> {
  return exclusive(tpm.tcti, async () => {
    await run(tpm, FLUSH_TOOL, FLUSH_TRANSIENT);
  });
}

const FLUSH_TOOL = "tpm2_flushcontext";
const FLUSH_TRANSIENT = ["-t"];

/** The end of each TCTI's queue of tool runs. */
const queues = new Map<string, Promise<void>>();

async function exclusive<T>(tcti: string, task: () => Promise<T>): Promise<T> {
  const previous = queues.get(tcti) ?? Promise.resolve();
  let release!: () => void;
  const done = new Promise<void>((resolve) => release = resolve);
  const tail = previous.then(() => done);
  queues.set(tcti, tail);
  await previous;
  try {
    return await task();
  } finally {
    release();
    if (queues.get(tcti) === tail) queues.delete(tcti);
  }
}

async function run(
  tpm: TpmConnection,
  tool: string,
  args: string[],
  { signal, stdin }: RunTpmToolOptions = {},
): Promise<Uint8Array> {
  const timeoutMs = tpm.toolTimeoutMs ?? TPM_TOOL_TIMEOUT_MS;
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(), timeoutMs);
  let output: ToolOutput;
  try {
    output = await runTool(tool, args, {
      env: { TPM2TOOLS_TCTI: tpm.tcti },
      stdin,
      signal: signal ? AbortSignal.any([signal, deadline.signal]) : deadline.signal,
    });
  } catch (error) {
    if (!(error instanceof ToolError)) throw error;
    switch (error.reason) {
      case "aborted":
        if (signal?.aborted) throw signal.reason;
        throw new TpmToolError(
          tool,
          null,
          `${tool}: no answer from the TPM (${tpm.tcti}) within ${timeoutMs} ms`,
        );
      case "not-found":
        throw new TpmToolError(tool, null, `${tool} not found: install tpm2-tools`);
      case "not-permitted":
        throw new TpmToolError(tool, null, `not allowed to run ${tool}: grant --allow-run=${tool}`);
      default:
        throw new TpmToolError(tool, null, error.message);
    }
  } finally {
    clearTimeout(timer);
  }
  if (!output.success) {
    throw new TpmToolError(
      tool,
      output.code,
      `${tool} ${args.join(" ")} failed (${exitStatus(output)}): ${
        stderrExcerpt(output.stderr, MAX_STDERR_CHARS)
      }`,
    );
  }
  return output.stdoutBytes;
}
