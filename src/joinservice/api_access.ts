/**
 * Every Kubernetes API call the join service makes, written once as RBAC
 * rules: the Role and ClusterRole of `deploy/kubernetes/join-service.yaml`
 * grant exactly these. Tests hold both sides to it: the manifest's rules
 * equal this list (tests/deploy/kubernetes_manifests_test.ts), and the real
 * join service process, allowed only what the manifest grants, issues every
 * kind of ticket and uses every rule (tests/deploy/join_service_rbac_test.ts).
 *
 * A new call in the join service needs a line here and in the manifest.
 *
 * @module
 */
import { KUBE_SYSTEM_NAMESPACE } from "../kubernetes/names.ts";
import { NODE_VERSION_NAME, NODE_VERSIONS } from "./components.ts";
import { CONTROL_PLANE_JOINING_NODE_NAME, JOINING_NODES } from "./joiningnodes.ts";

/** One RBAC rule: verbs on one resource, in one namespace (a Role) or cluster-wide (a ClusterRole). */
export interface ApiAccessRule {
  /** API group, "" for the core group. */
  apiGroup: string;
  /** Plural resource name, e.g. "secrets". */
  resource: string;
  /** The namespace of a namespaced resource (granted by a Role there); absent: cluster-scoped. */
  namespace?: string;
  /** The verbs, as RBAC names them (get, create, patch, delete, …). */
  verbs: readonly string[];
  /** Only these objects; absent: any (create cannot be limited by name). */
  resourceNames?: readonly string[];
  /** Which calls need the rule. */
  usedBy: string;
}

/** What the join service does in the Kubernetes API, and nothing more. */
export const JOIN_SERVICE_API_ACCESS: readonly ApiAccessRule[] = [
  {
    apiGroup: "",
    resource: "secrets",
    namespace: KUBE_SYSTEM_NAMESPACE,
    verbs: ["create", "delete"],
    usedBy:
      "bootstraptoken.ts: a bootstrap-token Secret per ticket, deleted when the ticket fails afterwards",
  },
  {
    apiGroup: "",
    resource: "configmaps",
    namespace: KUBE_SYSTEM_NAMESPACE,
    verbs: ["get"],
    usedBy: "components.ts: the components ConfigMap the NodeVersion names (k8s-components-sha256-…)",
  },
  {
    apiGroup: NODE_VERSIONS.group,
    resource: NODE_VERSIONS.plural,
    verbs: ["get"],
    resourceNames: [NODE_VERSION_NAME],
    usedBy: "components.ts: the cluster's NodeVersion",
  },
  {
    apiGroup: JOINING_NODES.group,
    resource: JOINING_NODES.plural,
    verbs: ["create", "patch"],
    usedBy: "joiningnodes.ts: a worker's record by server-side apply (patch), the control plane's by create",
  },
  {
    apiGroup: JOINING_NODES.group,
    resource: JOINING_NODES.plural,
    verbs: ["get", "delete"],
    resourceNames: [CONTROL_PLANE_JOINING_NODE_NAME],
    usedBy: "joiningnodes.ts: a control-plane record that exists is read, and replaced when stale",
  },
];
