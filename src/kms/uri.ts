/**
 * KMS and storage URIs, as the CLI sends them in the init request:
 * `kms://cluster-kms?key=<base64url>&salt=<base64url>` (padded base64url) and
 * `storage://no-store`.
 *
 * Parsing follows the original (Go `net/url`): the scheme picks the URI kind,
 * the host the backend, parameters travel in the query, and parameter values
 * are unescaped twice. Only the cluster KMS and "no storage" are implemented;
 * the original's cloud backends (aws, azure, gcp) are recognised and refused.
 *
 * Error messages name parameters, never their values: the URI carries the
 * master secret.
 *
 * @module
 */
import { KmsError } from "./errors.ts";

/** The host of a cluster KMS URI. */
export const CLUSTER_KMS_TYPE = "cluster-kms";

/** The host of a storage URI meaning "no storage". */
export const NO_STORE_TYPE = "no-store";

/** The storage URI the CLI sends: the cluster KMS keeps nothing in storage. */
export const NO_STORE_URI = `storage://${NO_STORE_TYPE}`;

/** The cloud backends of the original, not implemented here. */
const CLOUD_BACKENDS = new Set(["aws", "azure", "gcp"]);

/** A cluster master secret: the HKDF input key and salt of every data key. */
export interface MasterSecret {
  /** The master secret. */
  key: Uint8Array;
  /** The salt. */
  salt: Uint8Array;
}

/** A parsed storage URI. Only "no storage" exists. */
export interface StorageConfig {
  /** Always the no-store type. */
  type: typeof NO_STORE_TYPE;
}

/**
 * Encodes a master secret as `kms://cluster-kms?key=<b64url>&salt=<b64url>`
 * (base64url with `=` padding, unescaped, as the original's `EncodeToURI`).
 * The result contains the secret: treat it as one.
 */
export function encodeMasterSecretUri(secret: MasterSecret): string {
  return `kms://${CLUSTER_KMS_TYPE}?key=${toBase64Url(secret.key)}&salt=${toBase64Url(secret.salt)}`;
}

/**
 * Parses a KMS URI. Only `kms://cluster-kms?key=…&salt=…` is accepted.
 *
 * @throws {KmsError} `invalid-uri` for a malformed URI, a scheme other than
 * `kms` ("invalid KMS URI: invalid scheme: X"), a missing or empty parameter
 * (`missing query parameter "key"`) or a value that is not padded base64url;
 * `unknown-backend` for an unknown host ("unknown KMS type: X");
 * `unsupported-backend` for the original's cloud KMS types.
 */
export function parseKmsUri(uri: string): MasterSecret {
  const url = parseUri(uri, "KMS", "kms");
  const type = url.host;
  if (type !== CLUSTER_KMS_TYPE) throw unknownBackend("KMS", type);
  const query = url.search.slice(1);
  return { key: base64UrlParameter(query, "key"), salt: base64UrlParameter(query, "salt") };
}

/**
 * Parses a storage URI. Only `storage://no-store` is accepted.
 *
 * @throws {KmsError} `invalid-uri` for a malformed URI or a scheme other than
 * `storage` ("invalid storage URI: invalid scheme: X"); `unknown-backend` for
 * an unknown host ("unknown storage type: X"); `unsupported-backend` for the
 * original's cloud storage types.
 */
export function parseStorageUri(uri: string): StorageConfig {
  const url = parseUri(uri, "storage", "storage");
  if (url.host !== NO_STORE_TYPE) throw unknownBackend("storage", url.host);
  return { type: NO_STORE_TYPE };
}

function parseUri(uri: string, kind: "KMS" | "storage", wantScheme: string): URL {
  if (!/^[A-Za-z][A-Za-z0-9+.-]*:/.test(uri)) {
    throw new KmsError("invalid-uri", `invalid ${kind} URI: missing scheme (want ${wantScheme}://)`);
  }
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    throw new KmsError("invalid-uri", `invalid ${kind} URI: malformed URI`);
  }
  const scheme = url.protocol.slice(0, -1);
  if (scheme !== wantScheme) {
    throw new KmsError("invalid-uri", `invalid ${kind} URI: invalid scheme: ${scheme}`);
  }
  return url;
}

function unknownBackend(kind: "KMS" | "storage", type: string): KmsError {
  if (CLOUD_BACKENDS.has(type)) {
    return new KmsError(
      "unsupported-backend",
      `${kind} type ${type} is not supported: only ${
        kind === "KMS" ? CLUSTER_KMS_TYPE : NO_STORE_TYPE
      } is implemented`,
    );
  }
  return new KmsError("unknown-backend", `unknown ${kind} type: ${type}`);
}

/** Reads query parameter `name` (first occurrence, unescaped twice) and decodes it as padded base64url. */
function base64UrlParameter(rawQuery: string, name: string): Uint8Array {
  const value = queryParameter(rawQuery, name);
  if (value === undefined || value === "") {
    throw new KmsError("invalid-uri", `missing query parameter "${name}"`);
  }
  const unescaped = queryUnescape(value);
  if (unescaped === undefined) {
    throw new KmsError("invalid-uri", `invalid query parameter "${name}": invalid URL escape`);
  }
  if (!PADDED_BASE64URL.test(unescaped)) {
    throw new KmsError("invalid-uri", `invalid query parameter "${name}": not padded base64url`);
  }
  return Uint8Array.fromBase64(unescaped, { alphabet: "base64url", lastChunkHandling: "loose" });
}

const PADDED_BASE64URL = /^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2}==|[A-Za-z0-9_-]{3}=)?$/;

/**
 * The first value of `name` in a raw query, as Go's `url.Values.Get`: pairs
 * split on "&", pairs with ";" or a bad escape skipped, keys and values unescaped.
 */
function queryParameter(rawQuery: string, name: string): string | undefined {
  for (const pair of rawQuery.split("&")) {
    if (pair === "" || pair.includes(";")) continue;
    const eq = pair.indexOf("=");
    const key = queryUnescape(eq < 0 ? pair : pair.slice(0, eq));
    const value = queryUnescape(eq < 0 ? "" : pair.slice(eq + 1));
    if (key === name && value !== undefined) return value;
  }
  return undefined;
}

const lenientDecoder = new TextDecoder();

/** Go's `url.QueryUnescape`: "+" is a space, "%XX" a byte; undefined for a malformed escape. */
function queryUnescape(s: string): string | undefined {
  if (/%(?![0-9A-Fa-f]{2})/.test(s)) return undefined;
  return s.replaceAll("+", " ").replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
    const bytes = new Uint8Array(run.length / 3);
    for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(run.slice(3 * i + 1, 3 * i + 3), 16);
    return lenientDecoder.decode(bytes);
  });
}

function toBase64Url(bytes: Uint8Array): string {
  return bytes.toBase64({ alphabet: "base64url" });
}
