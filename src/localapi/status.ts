/**
 * Errors of the local Kubernetes API, answered as `Status` objects with the
 * codes, reasons and messages kube-apiserver uses.
 *
 * @module
 */
import { resourceLabel, type ResourceType, type Route } from "./resources.ts";

import type { JsonObject as Json } from "./json.ts";

/** An error answered as a `Status`. */
export class StatusError extends Error {
  /**
   * An error answered with `code` as a Status.
   *
   * @param code HTTP status code
   * @param reason the Status `reason`, e.g. "NotFound"
   * @param message the Status `message`
   * @param details the Status `details`
   */
  constructor(
    /** HTTP status code. */
    readonly code: number,
    /** The Status `reason`, e.g. "NotFound". */
    readonly reason: string,
    message: string,
    /** The Status `details`. */
    readonly details?: Json,
  ) {
    super(message);
  }
}

/** The `Status` object kube-apiserver answers for `error`. */
export function statusBody(error: StatusError): Json {
  const status: Json = {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message: error.message,
    reason: error.reason,
  };
  if (error.details) status.details = error.details;
  status.code = error.code;
  return status;
}

/** The `group` of a Status's details (absent for core types). */
export function groupDetail(resource: ResourceType): Json {
  return resource.group === "" ? {} : { group: resource.group };
}

/** 404 NotFound for the object a route names. */
export function notFound(route: Route): StatusError {
  return new StatusError(404, "NotFound", `${resourceLabel(route.resource)} "${route.name}" not found`, {
    name: route.name,
    ...groupDetail(route.resource),
    kind: route.resource.plural,
  });
}

/** 404 NotFound for a path that addresses nothing served. */
export function notFoundPath(): StatusError {
  return new StatusError(404, "NotFound", "the server could not find the requested resource", {});
}

/** 409 Conflict for an update against a stale resourceVersion. */
export function conflict(route: Route): StatusError {
  return new StatusError(
    409,
    "Conflict",
    `Operation cannot be fulfilled on ${resourceLabel(route.resource)} "${route.name}": ` +
      "the object has been modified; please apply your changes to the latest version and try again",
    { name: route.name, ...groupDetail(route.resource), kind: route.resource.plural },
  );
}

/** A resource's Kind as kube-apiserver names it in errors: `Secret`, `JoiningNode.update.edgeless.systems`. */
function kindLabel(resource: ResourceType): string {
  return resource.group === "" ? resource.kind : `${resource.kind}.${resource.group}`;
}

/** 409 Conflict for a delete whose UID precondition names another object than the one stored. */
export function preconditionFailed(route: Route, wantUid: string, storedUid: string): StatusError {
  return new StatusError(
    409,
    "Conflict",
    // kube-apiserver's wording (rest.BeforeDelete): the Kind, qualified by the group for custom resources.
    `Operation cannot be fulfilled on ${kindLabel(route.resource)} "${route.name}": the UID in the ` +
      `precondition (${wantUid}) does not match the UID in record (${storedUid}). ` +
      "The object might have been deleted and then recreated",
    { name: route.name, ...groupDetail(route.resource), kind: route.resource.kind },
  );
}

/** 409 Conflict for a server-side apply that would take fields other managers own. */
export function applyConflict(
  conflicts: { manager: string; apiVersion: string; path: string }[],
): StatusError {
  const fields = conflicts.map((c) => ({ ...c, field: "." + (JSON.parse(c.path) as string[]).join(".") }));
  const message = fields.length === 1
    ? `Apply failed with 1 conflict: conflict with "${fields[0].manager}" using ${fields[0].apiVersion}: ${
      fields[0].field
    }`
    : `Apply failed with ${fields.length} conflicts: ` +
      fields.map((f) => `conflict with "${f.manager}" using ${f.apiVersion}: ${f.field}`).join("\n");
  return new StatusError(409, "Conflict", message, {
    causes: fields.map((f) => ({
      reason: "FieldManagerConflict",
      message: `conflict with "${f.manager}" using ${f.apiVersion}`,
      field: f.field,
    })),
  });
}

/** 403 Forbidden as the authorizer words it. */
export function forbidden(user: string, verb: string, route: Route): StatusError {
  const { resource, namespace, name } = route;
  const scope = namespace === undefined ? "at the cluster scope" : `in the namespace "${namespace}"`;
  const subject = name === undefined ? resourceLabel(resource) : `${resourceLabel(resource)} "${name}"`;
  return new StatusError(
    403,
    "Forbidden",
    `${subject} is forbidden: User "${user}" cannot ${verb} resource "${resource.plural}" in API group "${resource.group}" ${scope}`,
    { name, ...groupDetail(resource), kind: resource.plural },
  );
}

/** 422 Invalid for one field of an object. */
export function invalid(resource: ResourceType, name: string, field: string, detail: string): StatusError {
  return new StatusError(422, "Invalid", `${resource.kind} "${name}" is invalid: ${field}: ${detail}`, {
    name,
    ...groupDetail(resource),
    kind: resource.kind,
    causes: [{
      reason: detail.startsWith("Required") ? "FieldValueRequired" : "FieldValueInvalid",
      message: detail,
      field,
    }],
  });
}

/** 415 UnsupportedMediaType for a body that is not JSON. */
export function unsupportedMediaType(): StatusError {
  return new StatusError(
    415,
    "UnsupportedMediaType",
    "the body of the request was in an unknown format - accepted media types include: application/json",
  );
}
