/**
 * The operator's Kubernetes components file (`cli init
 * --kubernetes-components FILE`): the binaries and archives every node
 * downloads and installs, in the original Constellation's JSON shape (the
 * `components.Component` message as JSON):
 *
 * ```json
 * [
 *   {"url": "https://example.com/cni-plugins.tgz", "hash": "sha256:<64 lower-case hex>",
 *    "installPath": "/opt/cni/bin", "extract": true}
 * ]
 * ```
 *
 * Every element has exactly these four fields, each once. `hash` and `installPath`
 * follow the node's own rules ({@linkcode isComponentHash},
 * {@linkcode isComponentInstallPath}); `url` must be an `https:` or a
 * `data:` URL. The CLI checks the whole file before it contacts the node, so
 * a mistake costs no init attempt. An error names the file, the element and
 * the field; it never repeats a URL (its query may carry a credential).
 *
 * @module
 */
import { describeType, isPlainObject } from "../attestation/measurements.ts";
import { readRegularTextFile } from "../fs/read_regular_file.ts";
import { quoted } from "../json/quoted.ts";
import { repeatedKeyProblem } from "../json/repeated_key.ts";
import { jsonSyntaxError } from "../json/syntax_error.ts";
import {
  COMPONENT_INSTALL_PATH_RULE,
  isComponentHash,
  isComponentInstallPath,
  type KubernetesComponent,
} from "../joinservice/components.ts";
import { CliError } from "./errors.ts";
import { describeFsError } from "./output_file.ts";

const WHAT = "kubernetes components file";
const FIELDS = ["url", "hash", "installPath", "extract"] as const;
const URL_SCHEMES = ["https:", "data:"];
const ELEMENT_SHAPE =
  `{"url": "https://…", "hash": "sha256:<64 hex>", "installPath": "/…", "extract": false}`;

/**
 * Parses the components file's text (`path` names it in errors). Throws
 * {@linkcode CliError} "input" naming the file, the element and the field.
 */
export function parseComponentsFile(text: string, path: string): KubernetesComponent[] {
  const fail = (message: string): never => {
    throw new CliError("input", `${WHAT} ${path}: ${message} (--kubernetes-components)`);
  };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    fail(`not valid JSON (${jsonSyntaxError(error)}); want [${ELEMENT_SHAPE}, …]`);
  }
  // JSON.parse keeps the last of two equal keys: which URL a node downloads must not be a guess.
  const repeated = repeatedKeyProblem(text);
  if (repeated !== undefined) fail(repeated);
  if (!Array.isArray(value)) {
    return fail(`want a JSON array [${ELEMENT_SHAPE}, …], got ${describeType(value)}`);
  }
  return value.map((element, index) =>
    parseComponent(element, (message) => fail(`element ${index}: ${message}`))
  );
}

/** One element of the array; `fail` adds the file and the element's index to the message. */
function parseComponent(element: unknown, fail: (message: string) => never): KubernetesComponent {
  if (!isPlainObject(element)) {
    return fail(`want a JSON object ${ELEMENT_SHAPE}, got ${describeType(element)}`);
  }
  for (const field of Object.keys(element)) {
    if (!(FIELDS as readonly string[]).includes(field)) {
      fail(`unknown field ${quoted(field)} (known: ${FIELDS.join(", ")})`);
    }
  }
  for (const field of FIELDS) {
    if (!(field in element)) fail(`"${field}" is missing`);
    const want = field === "extract" ? "boolean" : "string";
    if (describeType(element[field]) !== want) {
      fail(`"${field}" must be a ${want}, got ${describeType(element[field])}`);
    }
  }
  const { url, hash, installPath, extract } = element as unknown as KubernetesComponent;
  // Only the scheme is quoted: the rest of a URL may carry a credential. The node takes lower case only.
  const scheme = /^[a-z][a-z0-9+.-]*:/i.exec(url)?.[0];
  if (scheme === undefined || !URL_SCHEMES.includes(scheme)) {
    fail(`"url" must be an https: or data: URL${scheme === undefined ? "" : `, got a ${scheme} URL`}`);
  }
  if (!URL.canParse(url)) fail(`"url" is not a valid URL`);
  if (!isComponentHash(hash)) {
    fail(`"hash" must be sha256:<64 lower-case hex digits>, got ${JSON.stringify(hash.slice(0, 80))}`);
  }
  if (!isComponentInstallPath(installPath)) {
    fail(
      `"installPath" must be ${COMPONENT_INSTALL_PATH_RULE}, got ${
        JSON.stringify(installPath.slice(0, 200))
      }`,
    );
  }
  return { url, hash, installPath, extract };
}

/**
 * Reads and checks the components file at `path`. Throws
 * {@linkcode CliError} "input" when it is unreadable or malformed.
 */
export async function readComponentsFile(path: string): Promise<KubernetesComponent[]> {
  let text: string;
  try {
    text = await readRegularTextFile(path);
  } catch (error) {
    throw new CliError(
      "input",
      `cannot read ${WHAT} ${path}: ${describeFsError(error, path, "read")} (--kubernetes-components)`,
      { cause: error },
    );
  }
  return parseComponentsFile(text, path);
}
