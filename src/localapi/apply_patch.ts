/**
 * Parsing of server-side apply bodies (`application/apply-patch+yaml`).
 *
 * The body is YAML, and JSON is YAML (its flow style), which is what
 * clients send: ours, and kubectl's `--server-side`. The YAML parser costs
 * the local API about a quarter of its CPU time under the join service's
 * load (two writes per ticket, one of them an apply), so a body that parses
 * as JSON is taken as JSON. Only the answer to one kind of input differs
 * between the two parsers: a repeated key, which YAML refuses and
 * `JSON.parse` lets the last one win; {@linkcode hasRepeatedKey} refuses it
 * on the JSON path as well.
 *
 * @module
 */
import { parse as parseYaml } from "yaml";

/**
 * The value of an apply body. Throws an Error (with the parser's message)
 * when the body is not valid YAML, or when an object repeats a key.
 */
export function parseApplyPatch(body: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return parseYaml(body);
  }
  if (hasRepeatedKey(body)) throw new Error("an object repeats a key");
  return value;
}

/**
 * Whether an object in `json` (text that `JSON.parse` accepts) has the same
 * key twice, after unescaping (`"a"` and `"\u0061"` are one key).
 */
export function hasRepeatedKey(json: string): boolean {
  // One entry per open object (its keys so far) or array (null); whether the next string is a key.
  const open: (Set<string> | null)[] = [];
  let expectKey = false;
  for (let i = 0; i < json.length; i++) {
    const char = json[i];
    if (char === "{") {
      open.push(new Set());
      expectKey = true;
    } else if (char === "[") {
      open.push(null);
      expectKey = false;
    } else if (char === "}" || char === "]") {
      open.pop();
      expectKey = false;
    } else if (char === ",") {
      expectKey = open.at(-1) != null;
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
      const keys = open.at(-1)!;
      const key = escaped ? JSON.parse(json.slice(start, i + 1)) as string : json.slice(start + 1, i);
      if (keys.has(key)) return true;
      keys.add(key);
    }
  }
  return false;
}
