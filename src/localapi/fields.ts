/**
 * Field ownership for server-side apply: an object's leaf fields as JSON
 * arrays of keys, their FieldsV1 encoding (`managedFields`), and the JSON
 * helpers the object store compares and edits objects with.
 *
 * @module
 */

import type { JsonObject as Json } from "./json.ts";

/**
 * Leaf fields an object sets, as JSON arrays of keys → value: everything but
 * type meta, status and server-owned metadata (labels and annotations
 * count). Arrays are atomic leaves.
 */
export function leaves(object: Json): Map<string, unknown> {
  const result = new Map<string, unknown>();
  const walk = (value: unknown, path: string[]) => {
    if (
      typeof value === "object" && value !== null && !Array.isArray(value) && Object.keys(value).length > 0
    ) {
      for (const [key, child] of Object.entries(value)) walk(child, [...path, key]);
    } else {
      result.set(JSON.stringify(path), value);
    }
  };
  for (const [key, value] of Object.entries(object)) {
    if (key === "apiVersion" || key === "kind" || key === "status") continue;
    if (key === "metadata") {
      const metadata = value as Json;
      for (const field of ["labels", "annotations"]) {
        if (metadata[field] !== undefined) walk(metadata[field], ["metadata", field]);
      }
      continue;
    }
    walk(value, [key]);
  }
  return result;
}

/** Leaves of `after` that `before` lacks or has with another value. */
export function changedLeaves(before: Json, after: Json): Set<string> {
  const old = leaves(before);
  const changed = new Set<string>();
  for (const [leaf, value] of leaves(after)) {
    if (!old.has(leaf) || !jsonEqual(old.get(leaf), value)) changed.add(leaf);
  }
  return changed;
}

/** Encodes leaf paths as FieldsV1 (`{"f:spec":{"f:name":{}}}`). */
export function fieldsV1(fields: Set<string>): Json {
  const root: Json = {};
  for (const leaf of [...fields].sort()) {
    let node = root;
    for (const key of JSON.parse(leaf) as string[]) node = (node[`f:${key}`] ??= {}) as Json;
  }
  return root;
}

/** The value at a key path, or undefined. */
export function getAt(object: Json, path: string[]): unknown {
  let node: unknown = object;
  for (const key of path) {
    if (typeof node !== "object" || node === null) return undefined;
    node = (node as Json)[key];
  }
  return node;
}

/** Sets the value at a key path, creating maps on the way. */
export function setAt(object: Json, path: string[], value: unknown): void {
  let node = object;
  for (const key of path.slice(0, -1)) {
    if (typeof node[key] !== "object" || node[key] === null || Array.isArray(node[key])) node[key] = {};
    node = node[key] as Json;
  }
  node[path[path.length - 1]] = value;
}

/** Deletes a leaf and the maps it leaves empty. */
export function deleteAt(object: Json, path: string[]): void {
  const parents: Json[] = [];
  let node = object;
  for (const key of path.slice(0, -1)) {
    if (typeof node[key] !== "object" || node[key] === null) return;
    parents.push(node);
    node = node[key] as Json;
  }
  delete node[path[path.length - 1]];
  for (let i = parents.length - 1; i >= 0 && Object.keys(node).length === 0; i--) {
    const key = path[i];
    if (i === 0 && key === "metadata") break;
    node = parents[i];
    delete node[key];
  }
}

/** `object` without resourceVersion and generation, for comparing contents. */
export function withoutVolatile(object: Json): Json {
  const { metadata, ...rest } = object;
  const { resourceVersion: _rv, generation: _generation, ...meta } = metadata as Json;
  return { ...rest, metadata: meta };
}

/** Deep equality of JSON values, ignoring key order. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

/** A JSON value with object keys sorted. */
export function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.keys(value).sort().map((key) => [key, canonical((value as Json)[key])]));
  }
  return value;
}
