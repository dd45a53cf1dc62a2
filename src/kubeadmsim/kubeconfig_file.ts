/**
 * The kubeconfig files kubeadm writes (`admin.conf`, `kubelet.conf`, the
 * output of `kubeadm kubeconfig user`): one cluster with the CA embedded,
 * one user with an embedded client certificate or paths to one, one
 * context `<user>@<cluster>`.
 *
 * @module
 */
import { stringify } from "yaml";

/** What goes into a kubeconfig. */
export interface KubeconfigSpec {
  /** The cluster's name (ClusterConfiguration `clusterName`). */
  clusterName: string;
  /** `https://host:port`. */
  server: string;
  /** The cluster CA, PEM. */
  caPem: string;
  /** The user's name, e.g. "kubernetes-admin" or "system:node:worker-0". */
  userName: string;
  /** An embedded client certificate and key (PEM), or paths to them on the node. */
  client: { certPem: string; keyPem: string } | { certFile: string; keyFile: string };
}

const base64 = (text: string) => new TextEncoder().encode(text).toBase64();

/** The kubeconfig YAML for `spec`. */
export function kubeconfigYaml(spec: KubeconfigSpec): string {
  const context = `${spec.userName}@${spec.clusterName}`;
  const user = "certPem" in spec.client
    ? {
      "client-certificate-data": base64(spec.client.certPem),
      "client-key-data": base64(spec.client.keyPem),
    }
    : { "client-certificate": spec.client.certFile, "client-key": spec.client.keyFile };
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{
      name: spec.clusterName,
      cluster: { "certificate-authority-data": base64(spec.caPem), server: spec.server },
    }],
    contexts: [{ name: context, context: { cluster: spec.clusterName, user: spec.userName } }],
    "current-context": context,
    preferences: {},
    users: [{ name: spec.userName, user }],
  });
}
