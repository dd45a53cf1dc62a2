/**
 * A node's evidence saved to a file: what the browser console's "Download
 * evidence" gives, and what `cli verify --evidence FILE` checks, so the page's
 * verdict can be reproduced by the CLI for exactly the same evidence.
 *
 * ```json
 * {
 *   "format": "node-evidence/v1",
 *   "node": "10.42.0.3:9001",
 *   "fetchedAt": "2025-01-01T12:00:00.000Z",
 *   "nonce": "<64 hex: the nonce the asker drew>",
 *   "publicKey": "<64 hex: the node's HPKE key the evidence binds>",
 *   "evidence": { "variant": "qemu-vtpm", "document": "<base64>" }
 * }
 * ```
 *
 * Nothing in it is secret: evidence is what a node shows anyone who asks.
 * Verifying a saved file proves what the node's TPM signed for that nonce;
 * that the nonce was fresh rests on whoever drew it (the page did, a moment
 * before the node answered).
 *
 * @module
 */
import { MAX_EVIDENCE_DOCUMENT_BYTES } from "../attestation/attestation.ts";
import { jsonSyntaxError } from "../json/syntax_error.ts";
import { repeatedKeyProblem } from "../json/repeated_key.ts";
import { describeType, isPlainObject } from "../attestation/measurements.ts";
import { INIT_NONCE_LENGTH, isPublicKeyLength } from "../init/protocol.ts";
import { EndpointError, parseEndpoint } from "../net/endpoint.ts";
import type { NodeEvidence } from "./report.ts";

/** The `format` of the files this module writes and reads. */
export const EVIDENCE_FILE_FORMAT = "node-evidence/v1";

/** A file that is not saved evidence; the message names the field. */
export class EvidenceFileError extends Error {
  /** A bad evidence file, described by `message`. */
  constructor(message: string) {
    super(message);
    this.name = "EvidenceFileError";
  }
}

/** The file's text for `evidence` fetched at `fetchedAt` (Unix ms): pretty JSON, ending with a newline. */
export function encodeEvidenceFile(evidence: NodeEvidence, fetchedAt: number): string {
  return `${
    JSON.stringify(
      {
        format: EVIDENCE_FILE_FORMAT,
        node: evidence.node,
        fetchedAt: new Date(fetchedAt).toISOString(),
        nonce: evidence.nonce.toHex(),
        publicKey: evidence.publicKey.toHex(),
        evidence: { variant: evidence.variant, document: evidence.document.toBase64() },
      },
      null,
      2,
    )
  }\n`;
}

const FIELDS = ["format", "node", "fetchedAt", "nonce", "publicKey", "evidence"];
const EVIDENCE_FIELDS = ["variant", "document"];

/**
 * Parses an evidence file's `text` (from `source`, named in errors).
 * Strict: unknown fields, repeated keys, wrong types and bad encodings are
 * errors naming the field; `node` must be host:port (the report prints it as it is).
 * Throws {@linkcode EvidenceFileError}.
 */
export function parseEvidenceFile(text: string, source: string): NodeEvidence {
  const fail = (message: string): never => {
    throw new EvidenceFileError(`${source}: ${message}`);
  };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return fail(`not JSON: ${jsonSyntaxError(error)}`);
  }
  // Which of two nonces or documents counts must not be JSON.parse's silent choice.
  const repeated = repeatedKeyProblem(text);
  if (repeated !== undefined) fail(repeated);
  if (!isPlainObject(value)) return fail(`want a JSON object, got ${describeType(value)}`);
  for (const field of Object.keys(value)) {
    if (!FIELDS.includes(field)) fail(`unknown field "${field}" (known: ${FIELDS.join(", ")})`);
  }
  if (value.format !== EVIDENCE_FILE_FORMAT) {
    fail(`format must be "${EVIDENCE_FILE_FORMAT}", got ${JSON.stringify(value.format)}`);
  }
  const node = stringField(value, "node", fail);
  try {
    parseEndpoint(node);
  } catch (error) {
    if (!(error instanceof EndpointError)) throw error;
    // Not quoted: the value is printed as the report's first line, and a file may carry terminal escapes.
    fail("node must be host:port, e.g. 10.42.0.3:9001");
  }
  if (value.fetchedAt !== undefined) stringField(value, "fetchedAt", fail);
  const nonce = hexField(value, "nonce", fail);
  if (nonce.length !== INIT_NONCE_LENGTH) {
    fail(`nonce must be ${INIT_NONCE_LENGTH} bytes, got ${nonce.length}`);
  }
  const publicKey = hexField(value, "publicKey", fail);
  if (!isPublicKeyLength(publicKey)) fail(`publicKey must be 32 bytes (X25519), got ${publicKey.length}`);
  const evidence = value.evidence;
  if (!isPlainObject(evidence)) return fail(`evidence must be an object, got ${describeType(evidence)}`);
  for (const field of Object.keys(evidence)) {
    if (!EVIDENCE_FIELDS.includes(field)) {
      fail(`unknown field "evidence.${field}" (known: ${EVIDENCE_FIELDS.join(", ")})`);
    }
  }
  const variant = stringField(evidence, "variant", fail, "evidence.");
  const encoded = stringField(evidence, "document", fail, "evidence.");
  let document: Uint8Array;
  try {
    document = Uint8Array.fromBase64(encoded);
  } catch {
    return fail("evidence.document must be base64");
  }
  if (document.length === 0 || document.length > MAX_EVIDENCE_DOCUMENT_BYTES) {
    fail(`evidence.document must be 1 to ${MAX_EVIDENCE_DOCUMENT_BYTES} bytes, got ${document.length}`);
  }
  return { node, nonce, publicKey, variant, document };
}

function stringField(
  object: Record<string, unknown>,
  field: string,
  fail: (message: string) => never,
  prefix = "",
): string {
  const value = object[field];
  if (value === undefined) return fail(`${prefix}${field} is missing`);
  if (typeof value !== "string") {
    return fail(`${prefix}${field} must be a string, got ${describeType(value)}`);
  }
  return value;
}

function hexField(
  object: Record<string, unknown>,
  field: string,
  fail: (message: string) => never,
): Uint8Array {
  const text = stringField(object, field, fail);
  if (!/^([0-9a-fA-F]{2})*$/.test(text)) return fail(`${field} must be hex`);
  return Uint8Array.fromHex(text);
}
