/**
 * Reading typed fields out of a configuration document the way kubeadm's
 * decoder does: a value of the wrong JSON type is a decode error naming the
 * Go struct field, e.g. `json: cannot unmarshal string into Go struct field
 * InitConfiguration.localAPIEndpoint.bindPort of type int32`.
 *
 * @module
 */
import type { Json } from "./documents.ts";
import { KubeadmSimError } from "./errors.ts";

/** Reads fields of one document kind (`goType` names it in errors). */
export class FieldReader {
  /** A reader for documents of the Go type `goType` (e.g. "InitConfiguration"). */
  constructor(private readonly goType: string) {}

  /** The object at `key` ({} when absent). */
  object(parent: Json, key: string, path: string): Json {
    const value = parent[key];
    if (value === undefined || value === null) return {};
    if (typeof value !== "object" || Array.isArray(value)) throw this.#wrongType(value, path, "struct");
    return value as Json;
  }

  /** The string at `key` (undefined when absent). */
  string(parent: Json, key: string, path: string): string | undefined {
    const value = parent[key];
    if (value === undefined || value === null) return undefined;
    if (typeof value !== "string") throw this.#wrongType(value, path, "string");
    return value;
  }

  /** The whole number at `key` (undefined when absent). */
  int(parent: Json, key: string, path: string): number | undefined {
    const value = parent[key];
    if (value === undefined || value === null) return undefined;
    if (typeof value !== "number" || !Number.isInteger(value)) throw this.#wrongType(value, path, "int32");
    return value;
  }

  /** The boolean at `key` (undefined when absent). */
  bool(parent: Json, key: string, path: string): boolean | undefined {
    const value = parent[key];
    if (value === undefined || value === null) return undefined;
    if (typeof value !== "boolean") throw this.#wrongType(value, path, "bool");
    return value;
  }

  /** The list of strings at `key` ([] when absent). */
  strings(parent: Json, key: string, path: string): string[] {
    const value = parent[key];
    if (value === undefined || value === null) return [];
    if (!Array.isArray(value)) throw this.#wrongType(value, path, "[]string");
    for (const entry of value) if (typeof entry !== "string") throw this.#wrongType(entry, path, "string");
    return value as string[];
  }

  /** The list of objects at `key` ([] when absent). */
  objects(parent: Json, key: string, path: string): Json[] {
    const value = parent[key];
    if (value === undefined || value === null) return [];
    if (!Array.isArray(value)) throw this.#wrongType(value, path, "[]struct");
    for (const entry of value) {
      if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
        throw this.#wrongType(entry, path, "struct");
      }
    }
    return value as Json[];
  }

  /** The string-to-string map at `key` ({} when absent). */
  stringMap(parent: Json, key: string, path: string): Record<string, string> {
    const map = this.object(parent, key, path);
    for (const [name, value] of Object.entries(map)) {
      if (typeof value !== "string") throw this.#wrongType(value, `${path}.${name}`, "string");
    }
    return map as Record<string, string>;
  }

  /** A Go duration at `key` ("4m0s", "30s", "1h30m", "500ms"), in milliseconds (undefined when absent). */
  duration(parent: Json, key: string, path: string): number | undefined {
    const text = this.string(parent, key, path);
    if (text === undefined) return undefined;
    const ms = parseGoDuration(text);
    if (ms === undefined) {
      throw new KubeadmSimError("config", `time: invalid duration "${text}" (in ${this.goType}.${path})`);
    }
    return ms;
  }

  #wrongType(value: unknown, path: string, goType: string): KubeadmSimError {
    const jsonType = value === null
      ? "null"
      : Array.isArray(value)
      ? "array"
      : typeof value === "object"
      ? "object"
      : typeof value === "number"
      ? "number"
      : typeof value;
    return new KubeadmSimError(
      "config",
      `error unmarshaling JSON: while decoding JSON: json: cannot unmarshal ${jsonType} into Go struct field ` +
        `${this.goType}.${path} of type ${goType}`,
    );
  }
}

const durationUnits: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  "µs": 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** Milliseconds of a Go duration string, or undefined when it is not one. */
export function parseGoDuration(text: string): number | undefined {
  if (text === "0") return 0;
  const match = /^([-+]?)((?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+)$/.exec(text);
  if (!match) return undefined;
  let total = 0;
  for (const [, amount, unit] of match[2].matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)) {
    total += Number(amount) * durationUnits[unit];
  }
  return match[1] === "-" ? -total : total;
}

/** A Go duration string for milliseconds, as Go prints whole ones ("4m0s", "30s", "1h0m0s"). */
export function formatGoDuration(ms: number): string {
  const seconds = Math.round(ms / 1000);
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  if (h > 0) return `${h}h${m}m${s}s`;
  if (m > 0) return `${m}m${s}s`;
  return `${s}s`;
}
