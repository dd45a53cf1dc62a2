/**
 * Expected measurements in the original Constellation JSON shape:
 *
 * ```json
 * {"4": {"expected": "<hex>", "warnOnly": false}, "9": "<hex>"}
 * ```
 *
 * Keys are measurement indices (TPM PCRs; MRTD and RTMR0–3 as 0–4 for TDX),
 * written as canonical decimal integers from 0 to {@linkcode MAX_MEASUREMENT_INDEX}.
 * The bound is the 24 PCRs of a TPM 2.0 PC-client bank: no variant can report
 * a higher index, so configuring one would only ever fail (or silently
 * never match), and is rejected up front. Narrower per-variant limits (TDX
 * uses 0–4) belong to that variant's validator.
 *
 * A value is an object with a hex `expected` (32 bytes for TPM PCRs, 48 for
 * TDX) and an optional boolean `warnOnly` (missing means enforced), or the
 * legacy bare hex string (always enforced). Base64 is not accepted (the
 * original's doc comment claims it is; its code rejects it). All values of
 * one map must have the same length.
 *
 * @module
 */
import { primitives } from "../crypto/primitives.ts";
import { quoted } from "../json/quoted.ts";
import { bytesEqual } from "../bytes/equal.ts";
import type { Measurement, Measurements } from "./attestation.ts";

/** Highest accepted measurement index (TPM 2.0 PCR 23). */
export const MAX_MEASUREMENT_INDEX = 23;

/** Accepted lengths of an expected value in bytes: SHA-256 PCRs and SHA-384 TDX registers. */
export const MEASUREMENT_LENGTHS: readonly number[] = [32, 48];

/** A measurements map could not be parsed. The message names the offending key. */
export class MeasurementsError extends Error {
  /** The offending key as written in the input, or undefined when the map itself is wrong. */
  readonly key: string | undefined;

  /** Bad measurements; `key` names the offending measurement when there is one. */
  constructor(message: string, key?: string) {
    super(message);
    this.name = "MeasurementsError";
    this.key = key;
  }
}

const ENTRY_FIELDS = new Set(["expected", "warnOnly"]);
const LENGTHS_TEXT = MEASUREMENT_LENGTHS.join(" or ");

/**
 * Parses an already JSON-decoded measurements object into {@linkcode Measurements}.
 *
 * Throws {@linkcode MeasurementsError} naming the offending key, e.g.
 * `measurement "4": expected must be hex of 32 or 48 bytes, got 31 bytes`.
 */
export function parseMeasurements(value: unknown): Measurements {
  if (!isPlainObject(value)) {
    throw new MeasurementsError(
      `measurements must be an object of index to {"expected": "<hex>", "warnOnly": <bool>}, got ${
        describeType(value)
      }`,
    );
  }
  const result = new Map<number, Measurement>();
  let first: { key: string; length: number } | undefined;
  for (const [key, entry] of Object.entries(value)) {
    const index = parseIndex(key);
    const measurement = parseEntry(key, entry);
    if (first === undefined) {
      first = { key, length: measurement.expected.length };
    } else if (measurement.expected.length !== first.length) {
      throw new MeasurementsError(
        `measurement "${key}": expected is ${measurement.expected.length} bytes but measurement "${first.key}" is ${first.length} bytes; all measurements must have the same length`,
        key,
      );
    }
    result.set(index, measurement);
  }
  return new Map([...result].sort(([a], [b]) => a - b));
}

/** The index a key names; once it passed, messages may quote the key as it is (a number). */
function parseIndex(key: string): number {
  // Canonical decimal only: "04" or "+4" would be a second spelling of the same index.
  if (!/^(0|[1-9][0-9]?)$/.test(key) || Number(key) > MAX_MEASUREMENT_INDEX) {
    throw new MeasurementsError(
      `measurement ${quoted(key)}: index must be a decimal integer from 0 to ${MAX_MEASUREMENT_INDEX}`,
      key,
    );
  }
  return Number(key);
}

function parseEntry(key: string, entry: unknown): Measurement {
  if (typeof entry === "string") return { expected: parseExpected(key, entry), warnOnly: false };
  if (!isPlainObject(entry)) {
    throw new MeasurementsError(
      `measurement "${key}": want {"expected": "<hex>", "warnOnly": <bool>} or a hex string, got ${
        describeType(entry)
      }`,
      key,
    );
  }
  for (const field of Object.keys(entry)) {
    if (!ENTRY_FIELDS.has(field)) {
      throw new MeasurementsError(
        `measurement "${key}": unknown field ${quoted(field)} (known: expected, warnOnly)`,
        key,
      );
    }
  }
  if (!("expected" in entry)) throw new MeasurementsError(`measurement "${key}": expected is missing`, key);
  if (typeof entry.expected !== "string") {
    throw new MeasurementsError(
      `measurement "${key}": expected must be a hex string, got ${describeType(entry.expected)}`,
      key,
    );
  }
  const warnOnly = "warnOnly" in entry ? entry.warnOnly : false;
  if (typeof warnOnly !== "boolean") {
    throw new MeasurementsError(
      `measurement "${key}": warnOnly must be a boolean, got ${describeType(warnOnly)}`,
      key,
    );
  }
  return { expected: parseExpected(key, entry.expected), warnOnly };
}

function parseExpected(key: string, hex: string): Uint8Array {
  const prefix = `measurement "${key}": expected must be hex of ${LENGTHS_TEXT} bytes, got`;
  if (!/^[0-9a-fA-F]*$/.test(hex)) {
    throw new MeasurementsError(`${prefix} non-hex characters (base64 is not accepted)`, key);
  }
  if (hex.length % 2 !== 0) {
    throw new MeasurementsError(`${prefix} an odd number of hex digits (${hex.length})`, key);
  }
  const length = hex.length / 2;
  if (!MEASUREMENT_LENGTHS.includes(length)) throw new MeasurementsError(`${prefix} ${length} bytes`, key);
  const bytes = new Uint8Array(length);
  for (let i = 0; i < length; i++) bytes[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return bytes;
}

/**
 * The canonical JSON of measurements: keys in numeric order, lower-case hex,
 * `warnOnly` always present, no whitespace. {@linkcode parseMeasurements}
 * reads it back unchanged.
 */
export function marshalMeasurements(measurements: Measurements): string {
  const entries = [...measurements].sort(([a], [b]) => a - b).map(([index, m]) =>
    `${JSON.stringify(String(index))}:${
      JSON.stringify({ expected: m.expected.toHex(), warnOnly: m.warnOnly })
    }`
  );
  return `{${entries.join(",")}}`;
}

/**
 * Lower-case hex SHA-256 of {@linkcode marshalMeasurements}: identifies a set
 * of measurements in status output and audit logs (the browser console
 * computes the same digest, with WebCrypto).
 */
export async function measurementsDigest(measurements: Measurements): Promise<string> {
  const canonical = new TextEncoder().encode(marshalMeasurements(measurements));
  return (await primitives.sha256(canonical)).toHex();
}

/** What changed between two measurement maps, as sorted indices. */
export interface MeasurementsDiff {
  /** Indices only in the new map. */
  added: number[];
  /** Indices only in the old map. */
  removed: number[];
  /** Indices in both whose expected value or `warnOnly` differ. */
  changed: number[];
}

/** Lists the indices added, removed and changed from `before` to `after` (for reload logs). */
export function diffMeasurements(before: Measurements, after: Measurements): MeasurementsDiff {
  const diff: MeasurementsDiff = { added: [], removed: [], changed: [] };
  for (const [index, next] of after) {
    const previous = before.get(index);
    if (previous === undefined) diff.added.push(index);
    else if (previous.warnOnly !== next.warnOnly || !bytesEqual(previous.expected, next.expected)) {
      diff.changed.push(index);
    }
  }
  for (const index of before.keys()) if (!after.has(index)) diff.removed.push(index);
  for (const list of [diff.added, diff.removed, diff.changed]) list.sort((a, b) => a - b);
  return diff;
}

/** True for a JSON object (not an array or null). */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A JSON type name for error messages ("array", "null", "number", ...). */
export function describeType(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}
