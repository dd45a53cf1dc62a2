/**
 * Parsing of server-side apply bodies (`application/apply-patch+yaml`).
 *
 * The body is YAML, and JSON is YAML (its flow style), which is what
 * clients send: ours, and kubectl's `--server-side`. The YAML parser costs
 * the local API about a quarter of its CPU time under the join service's
 * load (two writes per ticket, one of them an apply), so a body that parses
 * as JSON is taken as JSON. Only the answer to one kind of input differs
 * between the two parsers: a repeated key, which YAML refuses and
 * `JSON.parse` lets the last one win; `findRepeatedKey`
 * (`src/json/repeated_key.ts`) finds it on the JSON path as well.
 *
 * @module
 */
import { parse as parseYaml } from "yaml";
import { findRepeatedKey } from "../json/repeated_key.ts";

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
  if (findRepeatedKey(body) !== undefined) throw new Error("an object repeats a key");
  return value;
}
