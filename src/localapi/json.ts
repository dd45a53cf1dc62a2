/**
 * The JSON object type of the local Kubernetes API's objects and documents.
 *
 * @module
 */

/** A JSON object: a Kubernetes object, a Status, a discovery document. */
export type JsonObject = Record<string, unknown>;
