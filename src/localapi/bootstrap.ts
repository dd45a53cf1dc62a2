/**
 * What a kubeadm cluster's API server and controller manager do for joining
 * nodes, for the local API server:
 *
 * - the **bootstrap token authenticator** (kube-apiserver
 *   `--enable-bootstrap-token-auth`): a bearer `<id>.<secret>` is user
 *   `system:bootstrap:<id>` when Secret `kube-system/bootstrap-token-<id>`
 *   has type `bootstrap.kubernetes.io/token`, that `token-id` and
 *   `token-secret`, `usage-bootstrap-authentication: "true"` and an
 *   `expiration` in the future;
 * - the **token cleaner** (kube-controller-manager): token Secrets whose
 *   `expiration` has passed are deleted ({@linkcode isExpiredBootstrapToken});
 * - the **bootstrap signer** (kube-controller-manager): `kube-public/
 *   cluster-info` carries `jws-kubeconfig-<id>` for every unexpired token
 *   with `usage-bootstrap-signing: "true"` (computed when read, so it is
 *   never stale);
 * - **kubeadm's default RBAC** for the two identities without a client
 *   certificate: anonymous users may only read cluster-info, bootstrap
 *   tokens of kubeadm's group may read the `kubeadm-config` and
 *   `kubelet-config` ConfigMaps and create and read CertificateSigningRequests.
 *
 * @module
 */
import {
  BOOTSTRAP_TOKEN_GROUP,
  BOOTSTRAP_TOKEN_SECRET_TYPE,
  bootstrapTokenSecretName,
} from "../joinservice/bootstraptoken.ts";
import { bytesEqual } from "../bytes/equal.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../kubernetes/names.ts";
import { parseBootstrapToken } from "../kubernetes/bootstrap_token.ts";
import { clusterInfoSignatureKey, signClusterInfo } from "../kubernetes/cluster_info_signature.ts";

import type { JsonObject as Json } from "./json.ts";

/** An authenticated (or anonymous) user. */
export interface Identity {
  /** The user name. */
  user: string;
  /** The user's groups. */
  groups: string[];
}

/** Kubernetes' anonymous user. */
export const ANONYMOUS: Identity = { user: "system:anonymous", groups: ["system:unauthenticated"] };

/** The group every bootstrap token user is in. */
export const BOOTSTRAPPERS_GROUP = "system:bootstrappers";

/** Where cluster-info lives. */
export const CLUSTER_INFO = { namespace: "kube-public", name: "cluster-info" };

/** Reads a stored Secret's object (undefined when absent). */
export type SecretLookup = (namespace: string, name: string) => Json | undefined;

/** A valid token Secret's string values, or undefined. */
function tokenSecretValues(secret: Json | undefined, now: number): Record<string, string> | undefined {
  if (!secret || secret.type !== BOOTSTRAP_TOKEN_SECRET_TYPE) return undefined;
  if ((secret.metadata as Json | undefined)?.deletionTimestamp) return undefined;
  const values: Record<string, string> = {};
  for (const [key, value] of Object.entries((secret.data ?? {}) as Record<string, string>)) {
    values[key] = new TextDecoder().decode(Uint8Array.fromBase64(value));
  }
  // As the real authenticator: an expiration that does not parse counts as expired.
  if (values.expiration !== undefined) {
    const expiresAt = Date.parse(values.expiration);
    if (!(expiresAt > now)) return undefined;
  }
  return values;
}

/**
 * Whether `secret` is a bootstrap token whose `expiration` has passed at
 * `now`: what kube-controller-manager's token cleaner deletes. A token
 * without an expiration never expires; one whose expiration does not parse
 * is left alone, as the cleaner does (the authenticator refuses it anyway).
 */
export function isExpiredBootstrapToken(secret: Json, now: number): boolean {
  if (secret.type !== BOOTSTRAP_TOKEN_SECRET_TYPE) return false;
  const encoded = (secret.data as Record<string, string> | undefined)?.expiration;
  if (encoded === undefined) return false;
  const expiresAt = Date.parse(new TextDecoder().decode(Uint8Array.fromBase64(encoded)));
  return expiresAt <= now;
}

/** The identity of a bootstrap token, or undefined when the API server would not accept it. */
export function authenticateBootstrapToken(
  token: string,
  secrets: SecretLookup,
  now: number,
): Identity | undefined {
  const parts = parseBootstrapToken(token);
  if (!parts) return undefined;
  const values = tokenSecretValues(secrets(KUBE_SYSTEM_NAMESPACE, bootstrapTokenSecretName(parts.id)), now);
  if (!values || values["token-id"] !== parts.id || values["usage-bootstrap-authentication"] !== "true") {
    return undefined;
  }
  const utf8 = new TextEncoder();
  if (!bytesEqual(utf8.encode(values["token-secret"] ?? ""), utf8.encode(parts.secret))) return undefined;
  const extra = (values["auth-extra-groups"] ?? "").split(",").map((g) => g.trim()).filter((g) => g !== "");
  // The real authenticator drops the token when an extra group is outside system:bootstrappers:.
  if (extra.some((group) => !group.startsWith(`${BOOTSTRAPPERS_GROUP}:`))) return undefined;
  return {
    user: `system:bootstrap:${parts.id}`,
    groups: [BOOTSTRAPPERS_GROUP, ...extra, "system:authenticated"],
  };
}

/**
 * `clusterInfo` (a stored cluster-info ConfigMap) with the bootstrap
 * signer's `jws-kubeconfig-<id>` entries for every token Secret in `tokens`
 * that may sign, and without any stale ones.
 */
export async function withClusterInfoSignatures(
  clusterInfo: Json,
  tokens: Json[],
  now: number,
): Promise<Json> {
  const data = { ...(clusterInfo.data ?? {}) as Record<string, string> };
  for (const key of Object.keys(data)) if (key.startsWith(clusterInfoSignatureKey(""))) delete data[key];
  const content = data.kubeconfig;
  if (content !== undefined) {
    for (const secret of tokens) {
      const values = tokenSecretValues(secret, now);
      const id = values?.["token-id"];
      if (!values || !id || values["usage-bootstrap-signing"] !== "true" || !values["token-secret"]) continue;
      data[clusterInfoSignatureKey(id)] = await signClusterInfo(content, id, values["token-secret"]);
    }
  }
  return { ...clusterInfo, data };
}

/** A request as kubeadm's default RBAC sees it. */
export interface RbacRequest extends Identity {
  /** get, list, create, update, patch or delete. */
  verb: string;
  /** API group, "" for core. */
  group: string;
  /** Plural resource. */
  resource: string;
  /** The namespace, for namespaced resources. */
  namespace?: string;
  /** The object's name. */
  name?: string;
}

/**
 * kubeadm's default RBAC for anonymous and bootstrap token users; undefined
 * for everyone else (decided by the server's `authorize` option).
 */
export function kubeadmRbac(request: RbacRequest): boolean | undefined {
  const { user, groups, verb, group, resource, namespace, name } = request;
  if (user === ANONYMOUS.user) {
    return verb === "get" && group === "" && resource === "configmaps" &&
      namespace === CLUSTER_INFO.namespace && name === CLUSTER_INFO.name;
  }
  if (!groups.includes(BOOTSTRAPPERS_GROUP)) return undefined;
  if (!groups.includes(BOOTSTRAP_TOKEN_GROUP)) return false;
  if (group === "" && resource === "configmaps") {
    return verb === "get" && namespace === "kube-system" &&
      (name === "kubeadm-config" || name === "kubelet-config");
  }
  return group === "certificates.k8s.io" && resource === "certificatesigningrequests" &&
    (verb === "create" || verb === "get");
}

/** The groups kubeadm makes cluster administrators (`admin.conf`'s, and the super-admin's). */
const ADMIN_GROUPS = ["system:masters", "kubeadm:cluster-admins"];

/** The group of every kubelet's client certificate (`system:node:<name>`). */
export const NODES_GROUP = "system:nodes";

/**
 * What a kubeadm cluster allows the other identities it knows: administrators
 * everything; a kubelet (`system:nodes`) what the Node authorizer and
 * kubeadm's bindings give it here: its certificate requests, and no Secret
 * or ConfigMap (it runs no pods whose objects it could read). Undefined for
 * anyone else (decided by the server's `authorize` option, else refused). A
 * worker's kubelet certificate, which every join ticket carries and any
 * bootstrap token gets signed, must not read `constellation-mastersecret`.
 */
export function clusterRbac(request: RbacRequest): boolean | undefined {
  const { groups, verb, group, resource } = request;
  if (groups.some((name) => ADMIN_GROUPS.includes(name))) return true;
  if (!groups.includes(NODES_GROUP)) return undefined;
  return group === "certificates.k8s.io" && resource === "certificatesigningrequests" &&
    (verb === "create" || verb === "get" || verb === "list" || verb === "watch");
}
