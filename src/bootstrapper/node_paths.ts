/**
 * Where a node's files live (reference §8.2), under a configurable root so
 * tests and the local cluster run the bootstrapper without touching the host.
 * With the default root `/` the paths are exactly the original's.
 *
 * @module
 */
import { join, resolve } from "node:path";

/** The files and directories the bootstrapper reads and writes, all under {@linkcode NodePaths.root}. */
export interface NodePaths {
  /** The filesystem root everything below lies under (absolute). */
  root: string;
  /** `<root>/run/state/constellation/node_state.json`: role and measurement salt, read on reboot. */
  nodeState: string;
  /** `<root>/run/state/kubelet/pki/kubelet-client-key.pem`. */
  kubeletKey: string;
  /** `<root>/run/state/kubelet/pki/kubelet-client-crt.pem`. */
  kubeletCert: string;
  /** `<root>/etc/kubernetes`. */
  kubernetesDir: string;
  /** `<root>/etc/kubernetes/pki`: the cluster CA and, on control-plane nodes, its keys. */
  pkiDir: string;
  /** `<root>/etc/kubernetes/admin.conf`, written by kubeadm init. */
  adminConf: string;
  /** `<root>/run/cryptsetup-keys.d/state.key`: the state disk's initial passphrase. */
  initialPassphrase: string;
  /** `<root>/run/state/bin`: kubelet, kubeadm, kubectl, crictl. */
  binDir: string;
  /** `<root>/opt/cni/bin`: CNI plugins. */
  cniBinDir: string;
  /** `<root>/tmp`: kubeadm configuration files, removed after use, and the TPM issuer's working directory. */
  tmpDir: string;
  /** `<root>/var/log/bootstrapper.log`: the log source when there is no journal. */
  bootstrapperLog: string;
}

/** The node's paths under `root` (made absolute against the working directory). */
export function nodePaths(root: string): NodePaths {
  const absoluteRoot = resolve(root);
  const under = (path: string) => join(absoluteRoot, path);
  return {
    root: absoluteRoot,
    nodeState: under("run/state/constellation/node_state.json"),
    kubeletKey: under("run/state/kubelet/pki/kubelet-client-key.pem"),
    kubeletCert: under("run/state/kubelet/pki/kubelet-client-crt.pem"),
    kubernetesDir: under("etc/kubernetes"),
    pkiDir: under("etc/kubernetes/pki"),
    adminConf: under("etc/kubernetes/admin.conf"),
    initialPassphrase: under("run/cryptsetup-keys.d/state.key"),
    binDir: under("run/state/bin"),
    cniBinDir: under("opt/cni/bin"),
    tmpDir: under("tmp"),
    bootstrapperLog: under("var/log/bootstrapper.log"),
  };
}
