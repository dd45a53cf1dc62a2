/**
 * What kubeadm's `bootstrap-token` init phase publishes and the recording
 * kubeadm does not: the `kube-public/cluster-info` ConfigMap that joining
 * nodes discover the cluster CA from (its JWS signatures are the fake API
 * server's bootstrap signer's job).
 *
 * @module
 */
import { stringify } from "yaml";
import { KubernetesClient } from "../../src/kubernetes/client.ts";
import { loadKubeconfig } from "../../src/kubernetes/kubeconfig.ts";

/** Where the cluster is and who may publish its cluster-info. */
export interface ClusterInfoOptions {
  /** The admin kubeconfig kubeadm init wrote. */
  adminConf: string;
  /** "host:port" of the API server, as joining nodes reach it. */
  endpoint: string;
  /** The cluster CA (ca.crt), PEM. */
  caPem: string;
}

/** Creates `kube-public/cluster-info` unless it exists. */
export async function publishClusterInfo(options: ClusterInfoOptions): Promise<void> {
  using admin = new KubernetesClient(await loadKubeconfig(options.adminConf), { getAttempts: 1 });
  const kubeconfig = stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{
      name: "",
      cluster: {
        server: `https://${options.endpoint}`,
        "certificate-authority-data": new TextEncoder().encode(options.caPem).toBase64(),
      },
    }],
  });
  await admin.getConfigMap("kube-public", "cluster-info").catch(() =>
    admin.createConfigMap("kube-public", { metadata: { name: "cluster-info" }, data: { kubeconfig } })
  );
}
