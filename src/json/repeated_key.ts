/**
 * Repeated keys in JSON text. `JSON.parse` takes an object that has a key
 * twice and keeps the last value, silently; a strict reader (an operator's
 * attestation config, an apply body that YAML would refuse) finds the
 * repeated key with {@linkcode findRepeatedKey} and refuses it.
 *
 * @module
 */
import { quoted } from "./quoted.ts";

/** A key that an object of a JSON text has twice. */
export interface RepeatedKey {
  /** The key, unescaped. */
  key: string;
  /**
   * Where the object is: the keys and array indexes from the top, e.g.
   * `["measurements"]`; empty for the top-level object.
   */
  path: (string | number)[];
}

/** Longest path text in a message (a deeply nested object's path is cut). */
const MAX_PATH_TEXT = 200;

/** An open object (its keys so far, and the last one) or array (its element's index). */
type Open = { keys: Set<string>; key?: string } | { index: number };

/**
 * The first key that an object in `json` (text that `JSON.parse` accepts)
 * has twice, after unescaping (`"a"` and `"\u0061"` are one key); undefined
 * when no object repeats a key.
 */
export function findRepeatedKey(json: string): RepeatedKey | undefined {
  const open: Open[] = [];
  // Whether the next string is a key.
  let expectKey = false;
  for (let i = 0; i < json.length; i++) {
    const char = json[i];
    if (char === "{") {
      open.push({ keys: new Set() });
      expectKey = true;
    } else if (char === "[") {
      open.push({ index: 0 });
      expectKey = false;
    } else if (char === "}" || char === "]") {
      open.pop();
      expectKey = false;
    } else if (char === ",") {
      const current = open.at(-1);
      if (current !== undefined && "index" in current) current.index++;
      expectKey = current !== undefined && "keys" in current;
    } else if (char === ":") {
      expectKey = false;
    } else if (char === '"') {
      const start = i;
      let escaped = false;
      for (i++; json[i] !== '"'; i++) {
        if (json[i] === "\\") {
          escaped = true;
          i++;
        }
      }
      if (!expectKey) continue;
      const current = open.at(-1) as { keys: Set<string>; key?: string };
      const key = escaped ? JSON.parse(json.slice(start, i + 1)) as string : json.slice(start + 1, i);
      if (current.keys.has(key)) {
        return { key, path: open.slice(0, -1).map((outer) => "index" in outer ? outer.index : outer.key!) };
      }
      current.keys.add(key);
      current.key = key;
    }
  }
  return undefined;
}

/**
 * A repeated key in words, e.g. `key "4" is given twice in measurements`,
 * `key "variant" is given twice at the top level`. Keys are quoted with
 * {@linkcode quoted}: control characters in them reach no terminal, and a
 * long key is cut.
 */
export function describeRepeatedKey(repeated: RepeatedKey): string {
  const where = repeated.path.length === 0 ? "at the top level" : `in ${jsonPathText(repeated.path)}`;
  return `key ${quoted(repeated.key)} is given twice ${where}`;
}

/**
 * What is wrong with `json` (text that `JSON.parse` accepts) when an object
 * in it repeats a key, for a strict parser's error, e.g. `key "4" is given
 * twice in measurements: give each key once`; undefined when none does.
 * `JSON.parse` keeps the last of two equal keys, silently.
 */
export function repeatedKeyProblem(json: string): string | undefined {
  const repeated = findRepeatedKey(json);
  return repeated === undefined ? undefined : `${describeRepeatedKey(repeated)}: give each key once`;
}

/**
 * `["akTrust", "keys", 2]` as `akTrust.keys[2]`; a key that is not a short
 * plain word as `["a.b"]`, quoted with {@linkcode quoted} (escaped, cut); a
 * path longer than 200 characters cut with "…".
 */
function jsonPathText(path: (string | number)[]): string {
  const text = path.map((segment, i) =>
    typeof segment === "number"
      ? `[${segment}]`
      : /^[A-Za-z0-9_-]{1,64}$/.test(segment)
      ? `${i === 0 ? "" : "."}${segment}`
      : `[${quoted(segment)}]`
  ).join("");
  // A path as deep as the text allows is cut as a long value is.
  return text.length > MAX_PATH_TEXT ? text.slice(0, MAX_PATH_TEXT) + "…" : text;
}
