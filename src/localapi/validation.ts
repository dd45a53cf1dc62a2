/**
 * Decoding and validation of request bodies for the local Kubernetes API:
 * type meta checked against the endpoint, server-owned metadata dropped,
 * Secret `stringData` folded into `data`, names and data keys validated as
 * the real API server does.
 *
 * @module
 */
import type { IncomingMessage } from "node:http";
import { parseApplyPatch } from "./apply_patch.ts";
import { apiVersionOf, type ResourceType, type Route } from "./resources.ts";
import { invalid, StatusError, unsupportedMediaType } from "./status.ts";

import type { JsonObject as Json } from "./json.ts";

const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const configKey = /^[-._a-zA-Z0-9]+$/;

/** The media type of a request's `content-type`, lower-cased, without parameters. */
export function mediaType(headers: IncomingMessage["headers"]): string {
  return String(headers["content-type"] ?? "").split(";")[0].trim().toLowerCase();
}

/** Decodes a JSON request body for `resource`. */
export function decodeJson(body: string, headers: IncomingMessage["headers"], resource: ResourceType): Json {
  if (mediaType(headers) !== "application/json") throw unsupportedMediaType();
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch (error) {
    throw new StatusError(
      400,
      "BadRequest",
      `couldn't get version/kind; json parse error: ${(error as Error).message}`,
    );
  }
  return checkTypeMeta(value, resource);
}

/**
 * The preconditions of a delete's body (`DeleteOptions`, JSON; an empty body has none). Only `uid` is
 * honoured; a `resourceVersion` precondition is refused rather than ignored.
 */
export function decodeDeletePreconditions(
  body: string,
  headers: IncomingMessage["headers"],
): { uid?: string } {
  if (body.trim() === "") return {};
  if (mediaType(headers) !== "application/json") throw unsupportedMediaType();
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch (error) {
    throw new StatusError(400, "BadRequest", `DeleteOptions: json parse error: ${(error as Error).message}`);
  }
  if (!isObject(value)) throw new StatusError(400, "BadRequest", "DeleteOptions: not a JSON object");
  // As kube-apiserver: an absent or null field is no precondition.
  const preconditions = value.preconditions ?? {};
  if (!isObject(preconditions)) {
    throw new StatusError(400, "BadRequest", "DeleteOptions: preconditions is not a JSON object");
  }
  const { uid, resourceVersion } = preconditions;
  if (uid !== undefined && uid !== null && typeof uid !== "string") {
    throw new StatusError(400, "BadRequest", "DeleteOptions: preconditions.uid must be a string");
  }
  if (resourceVersion !== undefined && resourceVersion !== null) {
    throw new StatusError(
      400,
      "BadRequest",
      "DeleteOptions: a resourceVersion precondition is not supported here",
    );
  }
  return typeof uid === "string" ? { uid } : {};
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Decodes a server-side apply body (`application/apply-patch+yaml`) for the object at `route`. */
export function decodeApply(
  body: string,
  headers: IncomingMessage["headers"],
  resource: ResourceType,
  route: Route,
): Json {
  if (mediaType(headers) !== "application/apply-patch+yaml") {
    throw new StatusError(
      415,
      "UnsupportedMediaType",
      `the body of the request was in an unknown format - accepted media types include: application/apply-patch+yaml`,
    );
  }
  let value: unknown;
  try {
    value = parseApplyPatch(body);
  } catch {
    throw new StatusError(400, "BadRequest", "error decoding YAML: the apply patch is not valid YAML");
  }
  const object = checkTypeMeta(value, resource);
  if (typeof object.apiVersion !== "string" || typeof object.kind !== "string") {
    throw new StatusError(400, "BadRequest", "invalid object type: apiVersion and kind must be set");
  }
  const metadata = (object.metadata ?? {}) as Json;
  checkNameMatchesUrl(metadata, route);
  return object;
}

/** Checks apiVersion and kind against the endpoint (core types may omit them; custom resources need kind). */
export function checkTypeMeta(value: unknown, resource: ResourceType): Json {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new StatusError(400, "BadRequest", "the request body is not an object");
  }
  const object = value as Json;
  const expected = apiVersionOf(resource);
  if (object.apiVersion !== undefined && object.apiVersion !== expected) {
    throw new StatusError(
      400,
      "BadRequest",
      `the API version in the data (${
        String(object.apiVersion)
      }) does not match the expected API version (${expected})`,
    );
  }
  if (object.kind === undefined && resource.group !== "") {
    throw new StatusError(400, "BadRequest", "Object 'Kind' is missing in the request body");
  }
  if (object.kind !== undefined && object.kind !== resource.kind) {
    throw new StatusError(
      400,
      "BadRequest",
      `the kind in the data (${String(object.kind)}) does not match the expected kind (${resource.kind})`,
    );
  }
  if (object.metadata !== undefined && (typeof object.metadata !== "object" || object.metadata === null)) {
    throw new StatusError(400, "BadRequest", "metadata is not an object");
  }
  return object;
}

/** The object as stored: type meta set, server-owned metadata dropped, Secret stringData folded into data. */
export function normalize(resource: ResourceType, input: Json, route: Route): Json {
  const object = structuredClone(input);
  object.apiVersion = apiVersionOf(resource);
  object.kind = resource.kind;
  const metadata = { ...(object.metadata as Json | undefined) };
  for (const key of ["uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"]) {
    delete metadata[key];
  }
  if (route.name !== undefined) metadata.name = route.name;
  if (resource.namespaced) metadata.namespace = route.namespace;
  else delete metadata.namespace;
  object.metadata = metadata;
  if (resource.kind === "Secret") {
    const data = { ...(object.data as Record<string, string> | undefined) };
    for (const [key, value] of Object.entries(data)) {
      if (typeof value !== "string" || !isBase64(value)) {
        throw new StatusError(
          400,
          "BadRequest",
          `Secret in version "v1" cannot be handled as a Secret: illegal base64 data in data[${key}]`,
        );
      }
    }
    for (const [key, value] of Object.entries((object.stringData ?? {}) as Record<string, string>)) {
      data[key] = new TextEncoder().encode(String(value)).toBase64();
    }
    delete object.stringData;
    if (Object.keys(data).length > 0) object.data = data;
    object.type ??= "Opaque";
  }
  return object;
}

/** Checks an object name as the real validation does (RFC 1123 subdomain). */
export function validateName(resource: ResourceType, name: string): void {
  if (name === "") {
    throw invalid(resource, name, "metadata.name", "Required value: name or generateName is required");
  }
  if (name.length > 253 || !dns1123Subdomain.test(name)) {
    throw invalid(
      resource,
      name,
      "metadata.name",
      `Invalid value: "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric ` +
        "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', " +
        "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    );
  }
}

/**
 * Labels and annotations as string maps (every kind), then Secret and
 * ConfigMap data keys and values, as the real validation checks them.
 */
export function validateContent(resource: ResourceType, object: Json, name: string): void {
  const metadata = (object.metadata ?? {}) as Json;
  for (const field of ["labels", "annotations"]) {
    const map = metadata[field];
    if (map === undefined || map === null) continue;
    if (!isObject(map) || Object.values(map).some((value) => typeof value !== "string")) {
      throw new StatusError(400, "BadRequest", `metadata.${field} must map strings to strings`);
    }
  }
  if (resource.group !== "") return;
  for (const field of ["data", "binaryData"]) {
    const map = object[field];
    if (map === undefined || map === null) continue;
    if (!isObject(map) || Object.values(map).some((value) => typeof value !== "string")) {
      throw new StatusError(400, "BadRequest", `${field} must map keys to strings`);
    }
  }
  for (const field of ["data", "binaryData"]) {
    for (const key of Object.keys((object[field] ?? {}) as Json)) {
      if (!configKey.test(key)) {
        throw invalid(
          resource,
          name,
          `${field}[${key}]`,
          `Invalid value: "${key}": a valid config key must consist of alphanumeric characters, '-', '_' or '.' ` +
            "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        );
      }
    }
  }
}

/** Whether `value` is padded standard base64. */
export function isBase64(value: string): boolean {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(value) || value.length % 4 !== 0) return false;
  try {
    atob(value);
    return true;
  } catch {
    return false;
  }
}

/** The API server's 400 for an object whose metadata.name is not the name in the URL. */
export function checkNameMatchesUrl(metadata: Json, route: Route): void {
  if (metadata.name === route.name) return;
  throw new StatusError(
    400,
    "BadRequest",
    `the name of the object (${
      String(metadata.name ?? "")
    }) does not match the name on the URL (${route.name})`,
  );
}
