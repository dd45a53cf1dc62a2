/**
 * The deployment's Kubernetes manifests (`deploy/kubernetes/*.yaml`) as the
 * deploy tests read them, and the RBAC they grant: which rules reach the
 * join service's ServiceAccount through its bindings, and whether they allow
 * a request, evaluated as Kubernetes' RBAC authorizer does for the rule
 * fields the manifests use (apiGroups, resources, verbs, resourceNames).
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import type { Container, PodSpec } from "kubernetes-types/core/v1.d.ts";
import type { PolicyRule, Subject } from "kubernetes-types/rbac/v1.d.ts";
import type { AuthorizationRequest } from "../support/fake_apiserver.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";

/** The manifests' directory. */
export const KUBERNETES_DIR = `${REPO_ROOT}deploy/kubernetes`;

/** A Kubernetes object of the manifests. */
export interface ManifestObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  [field: string]: unknown;
}

/** Every object of every `*.yaml` in {@linkcode KUBERNETES_DIR}, with the file it is in. */
export async function loadManifests(): Promise<{ file: string; object: ManifestObject }[]> {
  const objects: { file: string; object: ManifestObject }[] = [];
  const files = [];
  for await (const entry of Deno.readDir(KUBERNETES_DIR)) {
    if (entry.isFile && entry.name.endsWith(".yaml")) files.push(entry.name);
  }
  for (const file of files.sort()) {
    for (const document of parseAllDocuments(await Deno.readTextFile(`${KUBERNETES_DIR}/${file}`))) {
      if (document.errors.length > 0) throw new Error(`${file}: ${document.errors[0].message}`);
      objects.push({ file, object: document.toJS() as ManifestObject });
    }
  }
  return objects;
}

/** The object of `kind` named `name`; throws when there is none. */
export function findObject(objects: readonly ManifestObject[], kind: string, name: string): ManifestObject {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  if (!found) throw new Error(`the manifests have no ${kind} ${name}`);
  return found;
}

/** The pod spec of a DaemonSet or Deployment. */
export function podSpec(workload: ManifestObject): PodSpec {
  return (workload as unknown as { spec: { template: { spec: PodSpec } } }).spec.template.spec;
}

/** The one container of a workload's pod. */
export function onlyContainer(workload: ManifestObject): Container {
  const containers = podSpec(workload).containers;
  if (containers.length !== 1) {
    throw new Error(`${workload.metadata.name} has ${containers.length} containers`);
  }
  return containers[0];
}

/** An RBAC rule granted in one namespace (a Role's, through a RoleBinding) or cluster-wide (undefined). */
export interface Grant {
  namespace?: string;
  rule: PolicyRule;
}

/**
 * The rules the manifests grant ServiceAccount `namespace/name`: those of
 * every Role and ClusterRole a RoleBinding or ClusterRoleBinding binds it to.
 */
export function grantsOf(objects: readonly ManifestObject[], namespace: string, name: string): Grant[] {
  const grants: Grant[] = [];
  for (const binding of objects) {
    if (binding.kind !== "RoleBinding" && binding.kind !== "ClusterRoleBinding") continue;
    const { subjects = [], roleRef } = binding as unknown as {
      subjects?: Subject[];
      roleRef: { kind: string; name: string };
    };
    if (!subjects.some((s) => s.kind === "ServiceAccount" && s.name === name && s.namespace === namespace)) {
      continue;
    }
    const role = findObject(objects, roleRef.kind, roleRef.name);
    if (roleRef.kind === "Role" && role.metadata.namespace !== binding.metadata.namespace) {
      throw new Error(`RoleBinding ${binding.metadata.name} names a Role of another namespace`);
    }
    // A ClusterRole bound by a RoleBinding grants only in the binding's namespace.
    const scope = binding.kind === "RoleBinding" ? binding.metadata.namespace : undefined;
    for (const rule of (role as unknown as { rules?: PolicyRule[] }).rules ?? []) {
      grants.push({ namespace: scope, rule });
    }
  }
  return grants;
}

/** Whether `grants` allow `request`, as the RBAC authorizer decides for resource requests. */
export function allows(grants: readonly Grant[], request: AuthorizationRequest): boolean {
  const matches = (list: readonly string[] | undefined, value: string) =>
    (list ?? []).includes("*") || (list ?? []).includes(value);
  return grants.some(({ namespace, rule }) =>
    (namespace === undefined || namespace === request.namespace) &&
    matches(rule.apiGroups, request.group) &&
    matches(rule.resources, request.resource) &&
    matches(rule.verbs, request.verb) &&
    (!rule.resourceNames?.length || (request.name !== undefined && rule.resourceNames.includes(request.name)))
  );
}
