/**
 * Discovery documents of the local Kubernetes API, as `kubectl` reads them
 * to map a resource name (`secrets`, `cm`, `nodeversions`) to a URL: the
 * legacy `/api` (APIVersions), `/apis` (APIGroupList) and per group version
 * `/api/v1`, `/apis/<group>/<version>` (APIResourceList with kinds, verbs,
 * scope and short names). The aggregated discovery format is not served;
 * `kubectl` falls back to these when it gets plain JSON.
 *
 * @module
 */
import type { ResourceType } from "./resources.ts";

import type { JsonObject as Json } from "./json.ts";

/** A resource type in discovery, with the verbs served on it. */
export interface DiscoveredResource extends ResourceType {
  /** Kubernetes verbs, e.g. get, list, create. */
  verbs: string[];
}

/** `GET /api`. */
export function apiVersions(serverAddress: string): Json {
  return {
    kind: "APIVersions",
    versions: ["v1"],
    serverAddressByClientCIDRs: [{ clientCIDR: "0.0.0.0/0", serverAddress }],
  };
}

/** `GET /apis`: one group per non-core group of `resources`. */
export function apiGroupList(resources: readonly DiscoveredResource[]): Json {
  const groups = new Map<string, Set<string>>();
  for (const r of resources) {
    if (r.group === "") continue;
    (groups.get(r.group) ?? groups.set(r.group, new Set()).get(r.group)!).add(r.version);
  }
  return {
    kind: "APIGroupList",
    apiVersion: "v1",
    groups: [...groups].map(([name, versions]) => {
      const list = [...versions].map((version) => ({ groupVersion: `${name}/${version}`, version }));
      return { name, versions: list, preferredVersion: list[0] };
    }),
  };
}

/** `GET /apis/<group>`, or undefined when no resource is in `group`. */
export function apiGroup(resources: readonly DiscoveredResource[], group: string): Json | undefined {
  const found = (apiGroupList(resources).groups as Json[]).find((g) => g.name === group);
  return found ? { kind: "APIGroup", apiVersion: "v1", ...found } : undefined;
}

/** `GET /api/v1` or `/apis/<group>/<version>`, or undefined when nothing is served there. */
export function apiResourceList(
  resources: readonly DiscoveredResource[],
  group: string,
  version: string,
): Json | undefined {
  const served = resources.filter((r) => r.group === group && r.version === version);
  if (served.length === 0) return undefined;
  return {
    kind: "APIResourceList",
    apiVersion: "v1",
    groupVersion: group === "" ? version : `${group}/${version}`,
    resources: served.map((r) => ({
      name: r.plural,
      singularName: r.kind.toLowerCase(),
      namespaced: r.namespaced,
      kind: r.kind,
      verbs: r.verbs,
      ...(r.shortNames ? { shortNames: r.shortNames } : {}),
    })),
  };
}
