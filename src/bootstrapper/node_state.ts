/**
 * The node state file (reference §8.4): the node's role and the cluster's
 * measurement salt, written when the node lock is taken and read on reboot
 * (rejoin), where salt and measurement secret give back the cluster ID that
 * PCR 15 is re-extended with.
 *
 * The format is the original's byte for byte: JSON with a tab indent, the
 * salt in standard base64 with padding, no trailing newline:
 *
 * ```
 * {
 * 	"Role": "ControlPlane",
 * 	"MeasurementSalt": "U2FsdA=="
 * }
 * ```
 *
 * Unlike the original (exclusive create, so a retry after a crash could never
 * complete, reference §12.13), the file is replaced atomically.
 *
 * @module
 */
import { writeFileAtomic } from "../fs/atomic_write.ts";
import { ReasonError } from "../reason_error.ts";

/** A node's role in its cluster. */
export type NodeRole = "ControlPlane" | "Worker";

/** What the node state file holds. */
export interface NodeState {
  /** The node's role. */
  role: NodeRole;
  /** The cluster's measurement salt. */
  measurementSalt: Uint8Array;
}

/** Why the node state file could not be read. */
export type NodeStateFailure = "missing" | "unreadable" | "malformed";

/** The node state file is missing or not in the expected format. Messages never hold the salt. */
export class NodeStateError extends ReasonError<NodeStateFailure> {}

/** Options of {@linkcode writeNodeState}. */
export interface WriteNodeStateOptions {
  /** Aborting before the file is in place leaves any previous file untouched. */
  signal?: AbortSignal;
}

/** The file content for `state`, exactly as reference §8.4 prints it. */
export function formatNodeState(state: NodeState): string {
  return JSON.stringify({ Role: state.role, MeasurementSalt: state.measurementSalt.toBase64() }, null, "\t");
}

/**
 * Writes the node state file atomically with mode 0600.
 *
 * @throws {RangeError} for an empty salt
 * @throws {AtomicWriteError} when the file cannot be written
 */
export async function writeNodeState(
  path: string,
  state: NodeState,
  options: WriteNodeStateOptions = {},
): Promise<void> {
  if (state.measurementSalt.length === 0) throw new RangeError("the measurement salt must not be empty");
  await writeFileAtomic(path, formatNodeState(state), { mode: 0o600, signal: options.signal });
}

/**
 * Reads the node state file. The role is read as the original reads it:
 * case-insensitive, `control-plane` accepted; an unknown role is an error here.
 *
 * @throws {NodeStateError} when the file is missing, unreadable, or malformed
 */
export async function readNodeState(path: string): Promise<NodeState> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      throw new NodeStateError("missing", `node state file ${path} does not exist`);
    }
    throw new NodeStateError(
      "unreadable",
      `node state file ${path} cannot be read: ${(error as Error).message}`,
    );
  }
  return parseNodeState(text, path);
}

/** Parses node state file content; `path` only names the file in errors. */
export function parseNodeState(text: string, path = "node state"): NodeState {
  const malformed = (why: string) => new NodeStateError("malformed", `node state file ${path}: ${why}`);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw malformed("not valid JSON");
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) throw malformed("not a JSON object");
  const { Role: role, MeasurementSalt: salt } = json as Record<string, unknown>;
  if (typeof role !== "string") throw malformed('"Role" is missing or not a string');
  const parsedRole = parseRole(role);
  if (parsedRole === undefined) throw malformed(`unknown role ${JSON.stringify(role)}`);
  if (typeof salt !== "string") throw malformed('"MeasurementSalt" is missing or not a string');
  let measurementSalt: Uint8Array;
  try {
    measurementSalt = Uint8Array.fromBase64(salt);
  } catch {
    throw malformed('"MeasurementSalt" is not standard base64');
  }
  if (measurementSalt.length === 0) throw malformed('"MeasurementSalt" is empty');
  return { role: parsedRole, measurementSalt };
}

/** A role name as the original parses it (case-insensitive; "control-plane" too), or undefined. */
export function parseRole(name: string): NodeRole | undefined {
  switch (name.toLowerCase()) {
    case "controlplane":
    case "control-plane":
      return "ControlPlane";
    case "worker":
      return "Worker";
    default:
      return undefined;
  }
}
