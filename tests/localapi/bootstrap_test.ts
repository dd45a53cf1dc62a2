import assert from "node:assert/strict";
import {
  authenticateBootstrapToken,
  BOOTSTRAPPERS_GROUP,
  clusterRbac,
  kubeadmRbac,
  NODES_GROUP,
  type RbacRequest,
} from "../../src/localapi/bootstrap.ts";
import { BOOTSTRAP_TOKEN_GROUP, BOOTSTRAP_TOKEN_SECRET_TYPE } from "../../src/joinservice/bootstraptoken.ts";
import type { JsonObject as Json } from "../../src/localapi/json.ts";

const NOW = Date.parse("2026-11-28T12:00:00Z");
const ID = "abcdef";
const SECRET = "0123456789abcdef";
const TOKEN = `${ID}.${SECRET}`;

/** A bootstrap token Secret as the join service writes it, with `changes` to its string values. */
function tokenSecret(changes: Record<string, string | undefined> = {}): Json {
  const values: Record<string, string | undefined> = {
    "token-id": ID,
    "token-secret": SECRET,
    expiration: "2026-11-28T12:15:00Z",
    "usage-bootstrap-authentication": "true",
    "usage-bootstrap-signing": "true",
    "auth-extra-groups": BOOTSTRAP_TOKEN_GROUP,
    ...changes,
  };
  const data: Record<string, string> = {};
  for (const [key, value] of Object.entries(values)) {
    if (value !== undefined) data[key] = new TextEncoder().encode(value).toBase64();
  }
  return { type: BOOTSTRAP_TOKEN_SECRET_TYPE, metadata: { name: `bootstrap-token-${ID}` }, data };
}

Deno.test("bootstrap token authentication: what kube-apiserver's authenticator accepts", async (t) => {
  const rows: { name: string; secret: Json | undefined; token?: string; now?: number; groups?: string[] }[] =
    [
      {
        name: "a valid token: kubeadm's node group",
        secret: tokenSecret(),
        groups: [BOOTSTRAPPERS_GROUP, BOOTSTRAP_TOKEN_GROUP, "system:authenticated"],
      },
      { name: "no such Secret", secret: undefined },
      { name: "another secret", secret: tokenSecret(), token: `${ID}.ffffffffffffffff` },
      { name: "not for authentication", secret: tokenSecret({ "usage-bootstrap-authentication": "false" }) },
      { name: "expired", secret: tokenSecret({ expiration: "2026-11-28T11:59:59Z" }) },
      { name: "expiring at this very instant", secret: tokenSecret({ expiration: "2026-11-28T12:00:00Z" }) },
      {
        name: "an expiration that does not parse counts as expired",
        secret: tokenSecret({ expiration: "soon" }),
      },
      // An extra group outside system:bootstrappers: would make the token an administrator.
      {
        name: "an extra group outside system:bootstrappers: (system:masters)",
        secret: tokenSecret({ "auth-extra-groups": `${BOOTSTRAP_TOKEN_GROUP},system:masters` }),
      },
      {
        name: "an extra group that only starts like it",
        secret: tokenSecret({ "auth-extra-groups": "system:bootstrappersX" }),
      },
      { name: "a Secret of another type", secret: { ...tokenSecret(), type: "Opaque" } },
      {
        name: "no extra groups: bootstrappers only",
        secret: tokenSecret({ "auth-extra-groups": undefined }),
        groups: [BOOTSTRAPPERS_GROUP, "system:authenticated"],
      },
    ];
  for (const row of rows) {
    await t.step(row.name, () => {
      const identity = authenticateBootstrapToken(row.token ?? TOKEN, () => row.secret, row.now ?? NOW);
      if (row.groups === undefined) assert.equal(identity, undefined);
      else assert.deepEqual(identity, { user: `system:bootstrap:${ID}`, groups: row.groups });
    });
  }
});

/** A request to read ConfigMap `namespace/name`, for any identity. */
function configMap(namespace: string, name: string) {
  return { verb: "get", group: "", resource: "configmaps", namespace, name };
}

/** A request to `verb` CertificateSigningRequests, for any identity. */
function csr(verb: string) {
  return { verb, group: "certificates.k8s.io", resource: "certificatesigningrequests" };
}

/** A request to read the cluster's master secret. */
const MASTER_SECRET_GET = {
  verb: "get",
  group: "",
  resource: "secrets",
  namespace: "kube-system",
  name: "constellation-mastersecret",
};

Deno.test("kubeadm's bootstrap RBAC: a node token reads kubeadm's two ConfigMaps and makes CSRs, nothing else", async (t) => {
  const nodeToken = { user: `system:bootstrap:${ID}`, groups: [BOOTSTRAPPERS_GROUP, BOOTSTRAP_TOKEN_GROUP] };
  const otherToken = {
    user: `system:bootstrap:${ID}`,
    groups: [BOOTSTRAPPERS_GROUP, "system:bootstrappers:other"],
  };
  const rows: { name: string; request: RbacRequest; allowed: boolean }[] = [
    ...([
      ["kubeadm-config", "kube-system", "kubeadm-config", true],
      ["kubelet-config", "kube-system", "kubelet-config", true],
      ["another kube-system ConfigMap", "kube-system", "join-config", false],
      ["kubeadm-config in another namespace", "default", "kubeadm-config", false],
    ] satisfies [string, string, string, boolean][]).map(([name, namespace, configMapName, allowed]) => ({
      name,
      request: { ...nodeToken, ...configMap(namespace, configMapName) },
      allowed,
    })),
    { name: "create a CSR", request: { ...nodeToken, ...csr("create") }, allowed: true },
    {
      name: "list ConfigMaps",
      request: { ...nodeToken, ...configMap("kube-system", "kubeadm-config"), verb: "list" },
      allowed: false,
    },
    { name: "a Secret", request: { ...nodeToken, ...MASTER_SECRET_GET }, allowed: false },
    { name: "delete a CSR", request: { ...nodeToken, ...csr("delete") }, allowed: false },
    {
      name: "a token outside kubeadm's node group: no ConfigMap",
      request: { ...otherToken, ...configMap("kube-system", "kubeadm-config") },
      allowed: false,
    },
    {
      name: "a token outside kubeadm's node group: no CSR",
      request: { ...otherToken, ...csr("create") },
      allowed: false,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => assert.equal(kubeadmRbac(row.request), row.allowed));
  }
});

Deno.test("a kubeadm cluster's other identities: admins anything, kubelets their CSRs only, others undecided", async (t) => {
  const kubelet = { user: "system:node:worker-1", groups: [NODES_GROUP, "system:authenticated"] };
  const admin = { user: "kubernetes-admin", groups: ["kubeadm:cluster-admins", "system:authenticated"] };
  const superAdmin = { user: "kubernetes-super-admin", groups: ["system:masters"] };
  const rows: { name: string; request: RbacRequest; allowed: boolean | undefined }[] = [
    ...["create", "get", "list", "watch"].map((verb) => ({
      name: `a kubelet may ${verb} CSRs`,
      request: { ...kubelet, ...csr(verb) },
      allowed: true,
    })),
    ...["update", "patch", "delete"].map((verb) => ({
      name: `a kubelet may not ${verb} a CSR (its approval is the signer's)`,
      request: { ...kubelet, ...csr(verb) },
      allowed: false,
    })),
    {
      name: "a kubelet may not create a resource of the same name in another group",
      request: { ...kubelet, ...csr("create"), group: "example.com" },
      allowed: false,
    },
    {
      name: "a kubelet may not read the master secret",
      request: { ...kubelet, ...MASTER_SECRET_GET },
      allowed: false,
    },
    {
      name: "a kubelet may not read a ConfigMap",
      request: { ...kubelet, ...configMap("kube-system", "kubeadm-config") },
      allowed: false,
    },
    {
      name: "kubeadm's cluster admins read the master secret",
      request: { ...admin, ...MASTER_SECRET_GET },
      allowed: true,
    },
    { name: "system:masters delete CSRs", request: { ...superAdmin, ...csr("delete") }, allowed: true },
    {
      name: "a user named like a node but outside system:nodes: undecided",
      request: { user: "system:node:worker-1", groups: ["system:authenticated"], ...csr("create") },
      allowed: undefined,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => assert.equal(clusterRbac(row.request), row.allowed));
  }
});
