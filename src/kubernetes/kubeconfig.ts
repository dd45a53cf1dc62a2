/**
 * Kubeconfig files: parsing, choosing the connection of the current context,
 * and kubeadm's choice of the discovery cluster.
 *
 * File references (`certificate-authority`, `client-certificate`,
 * `client-key`, `tokenFile`) are resolved relative to the kubeconfig's
 * directory and read through an injected reader, so a process needs read
 * permission for exactly the files its kubeconfig names. Errors name what is
 * missing or wrong, never the content of a key, certificate or token.
 *
 * @module
 */
import { ReasonError } from "../reason_error.ts";
import { quoted } from "../json/quoted.ts";
import { dirname, isAbsolute, join } from "node:path";
import { parse, YAMLParseError } from "yaml";
import { readCertificate } from "../x509/certificate.ts";
import { decodePemBlocks, encodePem } from "../x509/pem.ts";
import type { ClientCertificate, ConnectionConfig } from "./connection.ts";
import {
  fileTokenSource,
  isWellFormedToken,
  type ReadTextFile,
  staticToken,
  TokenFileError,
  type TokenSource,
} from "./token.ts";

/** A `clusters[].cluster` entry, with the kubeconfig's own key names. */
export interface KubeconfigCluster {
  /** The API server URL. */
  server?: string;
  /** Base64 PEM of the CA certificates. */
  "certificate-authority-data"?: string;
  /** A file of CA certificates. */
  "certificate-authority"?: string;
  /** Skip verifying the server (refused by this client). */
  "insecure-skip-tls-verify"?: boolean;
  /** The name to verify the server certificate against. */
  "tls-server-name"?: string;
  /** A proxy URL (refused by this client). */
  "proxy-url"?: string;
}

/** A `contexts[].context` entry. */
export interface KubeconfigContext {
  /** The cluster entry's name. */
  cluster?: string;
  /** The user entry's name. */
  user?: string;
  /** The default namespace. */
  namespace?: string;
}

/** A `users[].user` entry. Only the credential kinds this client supports are typed. */
export interface KubeconfigUser {
  /** Base64 PEM client certificate. */
  "client-certificate-data"?: string;
  /** A client certificate file. */
  "client-certificate"?: string;
  /** Base64 PEM client key. */
  "client-key-data"?: string;
  /** A client key file. */
  "client-key"?: string;
  /** A bearer token. */
  token?: string;
  /** A file holding a bearer token. */
  tokenFile?: string;
  /** Present only to be rejected with a clear error. */
  exec?: unknown;
  /** Impersonation (refused). */
  as?: unknown;
  /** Impersonation (refused). */
  "as-uid"?: unknown;
  /** Impersonation (refused). */
  "as-groups"?: unknown;
  /** Impersonation (refused). */
  "as-user-extra"?: unknown;
  /** Present only to be rejected with a clear error. */
  "auth-provider"?: unknown;
  /** Present only to be rejected with a clear error. */
  username?: string;
}

/** A parsed kubeconfig. Entry names may be "" (kubeadm writes an unnamed cluster in discovery files). */
export interface Kubeconfig {
  /** Named cluster entries. */
  clusters: { name: string; cluster: KubeconfigCluster }[];
  /** Named context entries. */
  contexts: { name: string; context: KubeconfigContext }[];
  /** Named user entries. */
  users: { name: string; user: KubeconfigUser }[];
  /** The context in use. */
  "current-context": string;
}

/** Why a kubeconfig could not be used. */
export type KubeconfigErrorReason =
  | "malformed" // not YAML, or fields of the wrong type, or duplicate names
  | "missing" // a required entry or field is absent
  | "unsupported" // a feature this client does not implement (exec plugins, insecure TLS, ...)
  | "unreadable"; // a referenced file could not be read

/** A kubeconfig is malformed, incomplete, unsupported, or references an unreadable file. */
export class KubeconfigError extends ReasonError<KubeconfigErrorReason> {}

/**
 * Parses kubeconfig text (YAML or JSON) and checks its shape. Does not
 * resolve anything; see {@linkcode resolveConnection}.
 */
export function parseKubeconfig(text: string): Kubeconfig {
  let document: unknown;
  try {
    // Warnings (unknown tags or directives) would go to stderr quoting the source line, which may hold a token.
    document = parse(text, { logLevel: "error" });
  } catch (error) {
    // Only the error's code and position: the yaml library's message quotes source text, even in its
    // first line ("Could not resolve tag: !x!<token>"), and the source may hold a key or token.
    const position = error instanceof YAMLParseError && error.linePos
      ? ` at line ${error.linePos[0].line}, column ${error.linePos[0].col}`
      : "";
    const detail = error instanceof YAMLParseError ? ` (${error.code})` : "";
    throw new KubeconfigError("malformed", `kubeconfig is not valid YAML${position}${detail}`);
  }
  if (document === null || document === undefined) document = {};
  const root = expectObject(document, "kubeconfig");
  const config: Kubeconfig = {
    clusters: namedEntries<"cluster", KubeconfigCluster>(root, "clusters", "cluster", clusterFields),
    contexts: namedEntries<"context", KubeconfigContext>(root, "contexts", "context", contextFields),
    users: namedEntries<"user", KubeconfigUser>(root, "users", "user", userFields),
    "current-context": optionalString(root, "current-context", "kubeconfig") ?? "",
  };
  return config;
}

/** Options for {@linkcode resolveConnection}. */
export interface ResolveConnectionOptions {
  /** Directory that relative file references are resolved against (the kubeconfig's directory). */
  baseDir: string;
  /** Reads referenced files; default `Deno.readTextFile`. */
  readTextFile?: ReadTextFile;
  /** Context to use instead of `current-context`. */
  context?: string;
}

/**
 * Builds the connection of the current context (or `options.context`):
 * server URL, CA, client certificate and key, bearer token, namespace.
 * Reads referenced files now (a token file is also re-read later).
 */
export async function resolveConnection(
  config: Kubeconfig,
  options: ResolveConnectionOptions,
): Promise<ConnectionConfig> {
  const readTextFile = options.readTextFile ?? Deno.readTextFile;
  const resolvePath = (path: string) => isAbsolute(path) ? path : join(options.baseDir, path);
  const readReferenced = async (path: string, what: string): Promise<string> => {
    try {
      return await readTextFile(resolvePath(path));
    } catch (error) {
      throw new KubeconfigError("unreadable", `reading ${what}: ${(error as Error).message}`);
    }
  };

  const contextName = options.context ?? config["current-context"];
  if (contextName === "") throw new KubeconfigError("missing", "kubeconfig has no current-context");
  const context = config.contexts.find((c) => c.name === contextName)?.context;
  if (!context) throw new KubeconfigError("missing", `context "${contextName}" not found in kubeconfig`);
  const clusterName = context.cluster ?? "";
  const cluster = config.clusters.find((c) => c.name === clusterName)?.cluster;
  if (!cluster) {
    throw new KubeconfigError(
      "missing",
      `cluster "${clusterName}" of context "${contextName}" not found in kubeconfig`,
    );
  }

  const clusterLabel = `cluster "${clusterName}"`;
  if (!cluster.server) throw new KubeconfigError("missing", `${clusterLabel} has no server`);
  const server = parseApiServerUrl(cluster.server, `server of ${clusterLabel}`);
  if (cluster["insecure-skip-tls-verify"]) {
    throw new KubeconfigError(
      "unsupported",
      `${clusterLabel} sets insecure-skip-tls-verify, which is not supported`,
    );
  }
  if (cluster["tls-server-name"]) {
    throw new KubeconfigError("unsupported", `${clusterLabel} sets tls-server-name, which is not supported`);
  }
  if (cluster["proxy-url"]) {
    throw new KubeconfigError("unsupported", `${clusterLabel} sets proxy-url, which is not supported`);
  }

  let caPem: string | undefined;
  if (cluster["certificate-authority-data"]) {
    caPem = decodeData(
      cluster["certificate-authority-data"],
      `certificate-authority-data of ${clusterLabel}`,
    );
  } else if (cluster["certificate-authority"]) {
    caPem = await readReferenced(
      cluster["certificate-authority"],
      `certificate-authority of ${clusterLabel}`,
    );
  }
  if (caPem !== undefined) requirePem(caPem, "CERTIFICATE", `certificate authority of ${clusterLabel}`);

  let clientCertificate: ClientCertificate | undefined;
  let token: TokenSource | undefined;
  const userName = context.user;
  if (userName !== undefined && userName !== "") {
    const user = config.users.find((u) => u.name === userName)?.user;
    if (!user) {
      throw new KubeconfigError(
        "missing",
        `user "${userName}" of context "${contextName}" not found in kubeconfig`,
      );
    }
    const userLabel = `user "${userName}"`;
    if (user.exec !== undefined) {
      throw new KubeconfigError("unsupported", `${userLabel} uses exec credentials, which are not supported`);
    }
    if (user["auth-provider"] !== undefined) {
      throw new KubeconfigError("unsupported", `${userLabel} uses an auth-provider, which is not supported`);
    }
    if (user.username !== undefined) {
      throw new KubeconfigError(
        "unsupported",
        `${userLabel} uses basic authentication, which is not supported`,
      );
    }
    // Not applied, so refused: the requests would run as the underlying (usually mightier) identity.
    const impersonation = IMPERSONATION_FIELDS.filter((field) => user[field] !== undefined);
    if (impersonation.length > 0) {
      throw new KubeconfigError(
        "unsupported",
        `${userLabel} uses impersonation (${impersonation.join(", ")}), which is not supported`,
      );
    }

    let certPem: string | undefined;
    if (user["client-certificate-data"]) {
      certPem = decodeData(user["client-certificate-data"], `client-certificate-data of ${userLabel}`);
    } else if (user["client-certificate"]) {
      certPem = await readReferenced(user["client-certificate"], `client-certificate of ${userLabel}`);
    }
    let keyPem: string | undefined;
    if (user["client-key-data"]) {
      keyPem = decodeData(user["client-key-data"], `client-key-data of ${userLabel}`);
    } else if (user["client-key"]) {
      keyPem = await readReferenced(user["client-key"], `client-key of ${userLabel}`);
    }
    if (certPem !== undefined && keyPem === undefined) {
      throw new KubeconfigError("missing", `${userLabel} has a client certificate but no client key`);
    }
    if (keyPem !== undefined && certPem === undefined) {
      throw new KubeconfigError("missing", `${userLabel} has a client key but no client certificate`);
    }
    if (certPem !== undefined && keyPem !== undefined) {
      requirePem(certPem, "CERTIFICATE", `client certificate of ${userLabel}`);
      requirePem(keyPem, "PRIVATE KEY", `client key of ${userLabel}`);
      clientCertificate = { certPem, keyPem };
    }

    if (user.tokenFile) {
      // As client-go: a token file wins over an inline token and is re-read periodically.
      const path = resolvePath(user.tokenFile);
      const source = fileTokenSource(path, { readTextFile });
      try {
        await source.token();
      } catch (error) {
        const reason = error instanceof TokenFileError ? error.reason : "unreadable";
        throw new KubeconfigError(reason, `tokenFile of ${userLabel}: ${(error as Error).message}`);
      }
      token = source;
    } else if (user.token) {
      // Checked here, where the error can name the user without the value; see isWellFormedToken.
      if (!isWellFormedToken(user.token)) {
        throw new KubeconfigError(
          "malformed",
          `token of ${userLabel} is not a bearer token (one line of visible ASCII characters)`,
        );
      }
      token = staticToken(user.token);
    }
  }

  return { server, caPem, clientCertificate, token, namespace: context.namespace || "default" };
}

/** Options for {@linkcode loadKubeconfig}. */
export interface LoadKubeconfigOptions {
  /** Reads the kubeconfig and the files it references; default `Deno.readTextFile`. */
  readTextFile?: ReadTextFile;
  /** Context to use instead of `current-context`. */
  context?: string;
}

/** Reads the kubeconfig at `path` and resolves its current context's connection. */
export async function loadKubeconfig(
  path: string,
  options: LoadKubeconfigOptions = {},
): Promise<ConnectionConfig> {
  const readTextFile = options.readTextFile ?? Deno.readTextFile;
  let text: string;
  try {
    text = await readTextFile(path);
  } catch (error) {
    throw new KubeconfigError("unreadable", `reading kubeconfig ${path}: ${(error as Error).message}`);
  }
  try {
    return await resolveConnection(parseKubeconfig(text), {
      baseDir: dirname(path),
      readTextFile,
      context: options.context,
    });
  } catch (error) {
    // Which file is wrong is half the answer: a service reads more than one.
    if (!(error instanceof KubeconfigError)) throw error;
    throw new KubeconfigError(error.reason, `${path}: ${error.message}`, { cause: error });
  }
}

/**
 * The CA certificates (one PEM `CERTIFICATE` block each, in file order) of
 * the cluster kubeadm uses for token discovery: the cluster named "" if the
 * kubeconfig has one, otherwise the current context's cluster. Only
 * `certificate-authority-data` counts (kubeadm does not read the file form).
 * PEM blocks of other types, or with headers, are skipped as Go's
 * `certutil.ParseCertsPEM` does; at least one certificate must remain.
 */
export function selectDiscoveryCluster(config: Kubeconfig): string[] {
  const unnamed = config.clusters.find((c) => c.name === "");
  let name = "";
  let cluster = unnamed?.cluster;
  if (!cluster) {
    const context = config.contexts.find((c) => c.name === config["current-context"])?.context;
    name = context?.cluster ?? "";
    cluster = context ? config.clusters.find((c) => c.name === name)?.cluster : undefined;
  }
  if (!cluster) throw new KubeconfigError("missing", "couldn't get cluster config from kubeconfig file");

  const what = `certificate-authority-data of cluster "${name}"`;
  const data = cluster["certificate-authority-data"];
  const pem = data ? decodeData(data, what) : "";
  const certificates: string[] = [];
  for (const block of decodePemBlocks(pem)) {
    if (block.type !== "CERTIFICATE" || block.headers.length > 0) continue;
    try {
      readCertificate(block.rawData);
    } catch (error) {
      throw new KubeconfigError(
        "malformed",
        `${what} holds an invalid certificate: ${(error as Error).message}`,
      );
    }
    certificates.push(encodePem(block.rawData, "CERTIFICATE"));
  }
  if (certificates.length === 0) {
    throw new KubeconfigError("missing", `${what} does not contain any valid RSA or ECDSA certificates`);
  }
  return certificates;
}

type FieldType = "string" | "boolean" | "any";
type FieldTypes = Readonly<Record<string, FieldType>>;

const hasType: Readonly<Record<FieldType, (value: unknown) => boolean>> = {
  string: (value) => typeof value === "string",
  boolean: (value) => typeof value === "boolean",
  any: () => true,
};

const clusterFields: FieldTypes = {
  server: "string",
  "certificate-authority-data": "string",
  "certificate-authority": "string",
  "insecure-skip-tls-verify": "boolean",
  "tls-server-name": "string",
  "proxy-url": "string",
};
const contextFields: FieldTypes = { cluster: "string", user: "string", namespace: "string" };
const userFields: FieldTypes = {
  "client-certificate-data": "string",
  "client-certificate": "string",
  "client-key-data": "string",
  "client-key": "string",
  token: "string",
  tokenFile: "string",
  exec: "any",
  "auth-provider": "any",
  username: "string",
  as: "any",
  "as-uid": "any",
  "as-groups": "any",
  "as-user-extra": "any",
};
/** A user's impersonation settings (kubectl's --as and friends). */
const IMPERSONATION_FIELDS = ["as", "as-uid", "as-groups", "as-user-extra"] as const;

/** Reads a list of `{name, <key>: {...}}` entries, checking field types and unique names. */
function namedEntries<K extends string, T>(
  root: Record<string, unknown>,
  list: string,
  key: K,
  fields: FieldTypes,
): ({ name: string } & Record<K, T>)[] {
  const value = root[list];
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new KubeconfigError("malformed", `kubeconfig ${list} is not a list`);
  const seen = new Set<string>();
  return value.map((item, index) => {
    const entry = expectObject(item, `kubeconfig ${list}[${index}]`);
    const name = optionalString(entry, "name", `kubeconfig ${list}[${index}]`) ?? "";
    if (seen.has(name)) throw new KubeconfigError("malformed", `kubeconfig lists ${key} "${name}" twice`);
    seen.add(name);
    const where = `${key} "${name}"`;
    const body = entry[key] === undefined || entry[key] === null
      ? {}
      : { ...expectObject(entry[key], where) };
    for (const [field, type] of Object.entries(fields)) {
      // YAML `field:` with no value is null: the same as an absent field.
      if (body[field] === null) delete body[field];
      if (body[field] === undefined || hasType[type](body[field])) continue;
      throw new KubeconfigError("malformed", `${field} of ${where} is not a ${type}`);
    }
    return { name, [key]: body } as { name: string } & Record<K, T>;
  });
}

function expectObject(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new KubeconfigError("malformed", `${what} is not a mapping`);
  }
  return value as Record<string, unknown>;
}

function optionalString(object: Record<string, unknown>, field: string, what: string): string | undefined {
  const value = object[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") {
    throw new KubeconfigError("malformed", `${field} of ${what} is not a string`);
  }
  return value;
}

/** Decodes a `*-data` field: base64 of PEM text. */
function decodeData(data: string, what: string): string {
  let bytes: Uint8Array;
  try {
    bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
  } catch {
    throw new KubeconfigError("malformed", `${what} is not valid base64`);
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new KubeconfigError("malformed", `${what} is not PEM text`);
  }
}

/** Checks that `pem` has a block whose label ends with `label` (e.g. "PRIVATE KEY" matches "EC PRIVATE KEY"). */
function requirePem(pem: string, label: string, what: string): void {
  const labels = [...pem.matchAll(/-----BEGIN ([A-Z0-9 ]+)-----/g)].map((m) => m[1]);
  if (!labels.some((l) => l === label || l.endsWith(" " + label))) {
    throw new KubeconfigError("malformed", `${what} holds no PEM ${label}`);
  }
}

/**
 * An API server URL as a client uses it: https, no user information, no
 * query or fragment; returned without a trailing slash. `what` names the
 * value in errors (e.g. "server of cluster x", "--init-api-server").
 *
 * @throws {KubeconfigError} "malformed" or "unsupported".
 */
export function parseApiServerUrl(server: string, what: string): string {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    // Echoed unless it may hold a password (user:password@host).
    const shown = server.includes("@") ? "" : `: ${shownUrl(server)}`;
    throw new KubeconfigError("malformed", `${what} is not a URL${shown}`);
  }
  if (url.username || url.password) {
    // Not echoed: the URL holds a password.
    throw new KubeconfigError("unsupported", `${what} carries user information, which is not supported`);
  }
  if (url.protocol !== "https:") {
    throw new KubeconfigError("unsupported", `${what} is not https: ${shownUrl(server)}`);
  }
  if (url.search || url.hash) {
    throw new KubeconfigError(
      "malformed",
      `${what} has a query or fragment (not repeated here): ${shownUrl(server)}`,
    );
  }
  return url.origin + url.pathname.replace(/\/+$/, "");
}

/**
 * A server URL for an error message: without its query and fragment (a
 * token may ride in either), escaped and cut ({@linkcode quoted}).
 */
function shownUrl(server: string): string {
  return quoted(server.replace(/[?#].*$/s, ""), 200);
}
