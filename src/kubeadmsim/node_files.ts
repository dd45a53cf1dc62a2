/**
 * The node files kubeadm writes besides the PKI: kubeconfigs
 * (`admin.conf`, `kubelet.conf`, `controller-manager.conf`,
 * `scheduler.conf`), the kubelet's `config.yaml` and `kubeadm-flags.env`,
 * and the static Pod manifests of the control plane.
 *
 * @module
 */
import { stringify } from "yaml";
import type { Json } from "./documents.ts";
import { kubeconfigYaml } from "./kubeconfig_file.ts";
import { type Authority, issueLeaf } from "./pki.ts";
import type { SimRoot } from "./root.ts";

/** kubeadm's directory of kubeconfigs and manifests. */
export const KUBERNETES_DIR = "/etc/kubernetes";
/** The kubelet's configuration file kubeadm writes. */
export const KUBELET_CONFIG_FILE = "/var/lib/kubelet/config.yaml";
/** The kubelet's extra flags kubeadm writes. */
export const KUBELET_FLAGS_FILE = "/var/lib/kubelet/kubeadm-flags.env";
/** Where the kubelet keeps its rotated client certificate after TLS bootstrap. */
export const KUBELET_CLIENT_CURRENT = "/var/lib/kubelet/pki/kubelet-client-current.pem";

/** The cluster facts every kubeconfig needs. */
export interface ClusterAccess {
  /** ClusterConfiguration `clusterName`. */
  clusterName: string;
  /** `https://host:port` of the API server. */
  server: string;
  /** The cluster CA. */
  authority: Authority;
}

/** A kubeconfig for a client certificate `commonName` in `organizations`, signed by the cluster CA. */
export async function clientKubeconfig(
  access: ClusterAccess,
  commonName: string,
  organizations: string[] = [],
): Promise<string> {
  const client = await issueLeaf(access.authority, { commonName, organizations, usages: ["clientAuth"] });
  return kubeconfigYaml({
    clusterName: access.clusterName,
    server: access.server,
    caPem: access.authority.certPem,
    userName: commonName,
    client,
  });
}

/** Writes `admin.conf`, `controller-manager.conf` and `scheduler.conf` (0600), as a control-plane node has them. */
export async function writeControlPlaneKubeconfigs(root: SimRoot, access: ClusterAccess): Promise<void> {
  const files: [string, string, string[]][] = [
    ["admin.conf", "kubernetes-admin", ["system:masters"]],
    ["controller-manager.conf", "system:kube-controller-manager", []],
    ["scheduler.conf", "system:kube-scheduler", []],
  ];
  for (const [file, commonName, organizations] of files) {
    await root.write(`${KUBERNETES_DIR}/${file}`, await clientKubeconfig(access, commonName, organizations), {
      mode: 0o600,
    });
  }
}

/** Writes the kubelet's `config.yaml` (the KubeletConfiguration document) and `kubeadm-flags.env`. */
export async function writeKubeletFiles(
  root: SimRoot,
  kubelet: Json,
  flags: { criSocket: string; extraArgs: Record<string, string> },
): Promise<void> {
  await root.write(KUBELET_CONFIG_FILE, stringify(kubelet), { mode: 0o644 });
  const args = [`--container-runtime-endpoint=${flags.criSocket}`];
  for (const name of Object.keys(flags.extraArgs).sort()) args.push(`--${name}=${flags.extraArgs[name]}`);
  await root.write(KUBELET_FLAGS_FILE, `KUBELET_KUBEADM_ARGS="${args.join(" ")}"\n`, { mode: 0o644 });
}

/** The control-plane component settings a static Pod manifest needs. */
export interface ControlPlaneManifests {
  /** e.g. "v1.27.4". */
  kubernetesVersion: string;
  /** e.g. "registry.k8s.io". */
  imageRepository: string;
  /** The API server's address and port. */
  advertiseAddress: string;
  /** The API server's port. */
  bindPort: number;
  /** Extra flags per component. */
  extraArgs: {
    apiServer: Record<string, string>;
    controllerManager: Record<string, string>;
    scheduler: Record<string, string>;
  };
}

/** Writes the static Pod manifests of kube-apiserver, kube-controller-manager, kube-scheduler and etcd (0600). */
export async function writeControlPlaneManifests(
  root: SimRoot,
  settings: ControlPlaneManifests,
): Promise<void> {
  const pod = (name: string, image: string, command: string[]) =>
    stringify({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name, namespace: "kube-system", labels: { component: name, tier: "control-plane" } },
      spec: {
        hostNetwork: true,
        priorityClassName: "system-node-critical",
        containers: [{ name, image, command }],
      },
    });
  const flags = (defaults: Record<string, string>, extra: Record<string, string>) =>
    Object.entries({ ...defaults, ...extra }).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) =>
      `--${k}=${v}`
    );
  const image = (name: string) => `${settings.imageRepository}/${name}:${settings.kubernetesVersion}`;
  const manifests: Record<string, string> = {
    "kube-apiserver": pod("kube-apiserver", image("kube-apiserver"), [
      "kube-apiserver",
      ...flags({
        "advertise-address": settings.advertiseAddress,
        "secure-port": String(settings.bindPort),
        "client-ca-file": "/etc/kubernetes/pki/ca.crt",
        "tls-cert-file": "/etc/kubernetes/pki/apiserver.crt",
        "tls-private-key-file": "/etc/kubernetes/pki/apiserver.key",
        "enable-bootstrap-token-auth": "true",
      }, settings.extraArgs.apiServer),
    ]),
    "kube-controller-manager": pod("kube-controller-manager", image("kube-controller-manager"), [
      "kube-controller-manager",
      ...flags({
        kubeconfig: "/etc/kubernetes/controller-manager.conf",
        "cluster-signing-cert-file": "/etc/kubernetes/pki/ca.crt",
        "cluster-signing-key-file": "/etc/kubernetes/pki/ca.key",
      }, settings.extraArgs.controllerManager),
    ]),
    "kube-scheduler": pod("kube-scheduler", image("kube-scheduler"), [
      "kube-scheduler",
      ...flags({ kubeconfig: "/etc/kubernetes/scheduler.conf" }, settings.extraArgs.scheduler),
    ]),
    etcd: pod("etcd", `${settings.imageRepository}/etcd:3.5.7-0`, [
      "etcd",
      `--advertise-client-urls=https://${settings.advertiseAddress}:2379`,
      "--cert-file=/etc/kubernetes/pki/etcd/server.crt",
      "--key-file=/etc/kubernetes/pki/etcd/server.key",
      "--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt",
    ]),
  };
  for (const [name, text] of Object.entries(manifests)) {
    await root.write(`${KUBERNETES_DIR}/manifests/${name}.yaml`, text, { mode: 0o600 });
  }
}
