/**
 * The resource types the local Kubernetes API serves, and how request paths
 * map onto them: core Secrets and ConfigMaps, Constellation's NodeVersion
 * and JoiningNode custom resources, and (for a kubeadm cluster) kubelet
 * CertificateSigningRequests.
 *
 * @module
 */

/** A resource type the local API serves. */
export interface ResourceType {
  /** API group, "" for core. */
  group: string;
  /** API version within the group, e.g. "v1". */
  version: string;
  /** Plural resource name, as in URLs (e.g. "secrets"). */
  plural: string;
  /** Kind of its objects, e.g. "Secret". */
  kind: string;
  /** Whether its objects live in namespaces. */
  namespaced: boolean;
  /** Short names `kubectl` accepts (discovery's `shortNames`). */
  shortNames?: string[];
}

/** Core Secrets. */
export const SECRETS: ResourceType = {
  group: "",
  version: "v1",
  plural: "secrets",
  kind: "Secret",
  namespaced: true,
};

/** Core ConfigMaps. */
export const CONFIG_MAPS: ResourceType = {
  group: "",
  version: "v1",
  plural: "configmaps",
  kind: "ConfigMap",
  namespaced: true,
  shortNames: ["cm"],
};

/** Constellation's NodeVersion (cluster-scoped). */
export const NODE_VERSIONS: ResourceType = {
  group: "update.edgeless.systems",
  version: "v1alpha1",
  plural: "nodeversions",
  kind: "NodeVersion",
  namespaced: false,
};

/** Constellation's JoiningNode (cluster-scoped). */
export const JOINING_NODES: ResourceType = {
  group: "update.edgeless.systems",
  version: "v1alpha1",
  plural: "joiningnodes",
  kind: "JoiningNode",
  namespaced: false,
};

/** The core types every local API serves. */
export const CORE_RESOURCES: readonly ResourceType[] = [SECRETS, CONFIG_MAPS];

/** A request's target: one object, or a collection (no `name`). */
export interface Route {
  /** The type addressed. */
  resource: ResourceType;
  /** The namespace; undefined for cluster-scoped types and for lists across all namespaces. */
  namespace?: string;
  /** The object's name; undefined for a collection. */
  name?: string;
}

/**
 * Parses a URL path into a route; undefined when it addresses nothing
 * served. A namespaced type without a namespace is a list across all
 * namespaces (`/api/v1/secrets`).
 */
export function parseRoute(pathname: string, resources: readonly ResourceType[]): Route | undefined {
  let parts: string[];
  try {
    parts = pathname.split("/").slice(1).map(decodeURIComponent);
  } catch {
    return undefined;
  }
  if (parts.some((part) => part === "")) return undefined;
  let group: string, version: string, rest: string[];
  if (parts[0] === "api") [group, version, rest] = ["", parts[1], parts.slice(2)];
  else if (parts[0] === "apis") [group, version, rest] = [parts[1], parts[2], parts.slice(3)];
  else return undefined;
  let namespace: string | undefined;
  if (rest[0] === "namespaces" && rest.length >= 3) {
    namespace = rest[1];
    rest = rest.slice(2);
  }
  if (rest.length < 1 || rest.length > 2) return undefined;
  const resource = resources.find((r) =>
    r.group === group && r.version === version && r.plural === rest[0] &&
    (r.namespaced === (namespace !== undefined) || (r.namespaced && rest.length === 1))
  );
  return resource ? { resource, namespace, name: rest[1] } : undefined;
}

/** The Kubernetes verb of an HTTP method on a route (get, list, create, update, patch, delete). */
export function verbOf(method: string, route: Route | undefined): string | undefined {
  if (!route) return undefined;
  if (route.name === undefined) {
    if (method === "GET") return "list";
    return method === "POST" && (route.namespace !== undefined || !route.resource.namespaced)
      ? "create"
      : undefined;
  }
  return ({ GET: "get", PUT: "update", PATCH: "patch", DELETE: "delete" } as Record<string, string>)[method];
}

/** The URL path of the object a route names. */
export function objectPath(route: Route): string {
  const { group, version, plural } = route.resource;
  const base = group === "" ? `/api/${version}` : `/apis/${group}/${version}`;
  const scope = route.namespace === undefined ? "" : `/namespaces/${route.namespace}`;
  return `${base}${scope}/${plural}/${route.name}`;
}

/** `apiVersion` of a type's objects: "v1" or "group/version". */
export function apiVersionOf(resource: ResourceType): string {
  return resource.group === "" ? resource.version : `${resource.group}/${resource.version}`;
}

/** The resource as errors name it: "secrets" or "nodeversions.update.edgeless.systems". */
export function resourceLabel(resource: ResourceType): string {
  return resource.group === "" ? resource.plural : `${resource.plural}.${resource.group}`;
}
