/**
 * The kubeadm configuration documents of reference §6.4: for `kubeadm init`
 * an InitConfiguration, a ClusterConfiguration and a KubeletConfiguration; for
 * `kubeadm join` a JoinConfiguration (with its control-plane section on
 * control-plane nodes) and a KubeletConfiguration; and the audit policy.
 *
 * Paths inside the documents are paths on the node (`/etc/kubernetes/…`),
 * as the kubelet and the control-plane pods see them, whatever filesystem
 * root the bootstrapper itself writes under. Node names are normalized with
 * the same rule the join service applies ({@linkcode k8sCompliantHostname}).
 *
 * Differences from the original, on purpose: `cloud-provider` is set only
 * when an external cloud provider is used (the original wrote an empty
 * value), on init and join alike (the original forgot AWS on join, §12.4);
 * the control-plane join needs no `certificateKey`, because the join ticket
 * carries the control-plane files.
 *
 * @module
 */
import { stringify } from "yaml";
import { k8sCompliantHostname } from "../kubernetes/nodename.ts";
import { nodePaths } from "./node_paths.ts";

/** API version of the kubeadm documents. */
export const KUBEADM_API_VERSION = "kubeadm.k8s.io/v1beta3";
/** API version of the KubeletConfiguration. */
export const KUBELET_API_VERSION = "kubelet.config.k8s.io/v1beta1";
/** API version of the audit policy. */
export const AUDIT_API_VERSION = "audit.k8s.io/v1";
/** The container runtime's socket. */
export const CRI_SOCKET = "unix:///run/containerd/containerd.sock";
/** The Kubernetes API port (kubeadm's bind port). */
export const KUBERNETES_PORT = 6443;
/** The kubeadm phase a control-plane join skips: the certificates come with the join ticket. */
export const SKIP_DOWNLOAD_CERTS_PHASE = "control-plane-prepare/download-certs";

const NODE = nodePaths("/");
/** The audit policy on the node. */
export const AUDIT_POLICY_PATH = `${NODE.kubernetesDir}/audit-policy.yaml`;
/** Where the API server writes its audit log, on the node. */
export const AUDIT_LOG_DIR = "/var/log/kubernetes/audit/";
/** The egress selector configuration (Konnectivity) on the node. */
export const EGRESS_SELECTOR_CONFIG_PATH = `${NODE.kubernetesDir}/egress-selector-configuration.yaml`;
/** The Konnectivity server's socket directory on the node. */
export const KONNECTIVITY_UDS_DIR = "/run/konnectivity-server";
/** The static pod directory on the node. */
export const STATIC_POD_PATH = `${NODE.kubernetesDir}/manifests`;

/** TLS cipher suites of the API server, in the original's order. */
export const API_SERVER_TLS_CIPHER_SUITES: readonly string[] = [
  "TLS_AES_128_GCM_SHA256",
  "TLS_AES_256_GCM_SHA384",
  "TLS_CHACHA20_POLY1305_SHA256",
  "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
  "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
  "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
  "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
  "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
  "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
  "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
  "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
  "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
  "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
  "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
  "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
  "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
  "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
  "TLS_RSA_WITH_AES_128_CBC_SHA",
  "TLS_RSA_WITH_AES_128_GCM_SHA256",
  "TLS_RSA_WITH_AES_256_CBC_SHA",
  "TLS_RSA_WITH_AES_256_GCM_SHA384",
];

/** TLS cipher suites of the kubelet, in the original's order. */
export const KUBELET_TLS_CIPHER_SUITES: readonly string[] = [
  "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
  "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
  "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
  "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
  "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
  "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
  "TLS_RSA_WITH_AES_256_GCM_SHA384",
  "TLS_RSA_WITH_AES_128_GCM_SHA256",
];

/** A configuration document: a plain JSON object with apiVersion and kind. */
export type KubeadmDocument = Record<string, unknown> & { apiVersion: string; kind: string };

/** What `kubeadm init` is configured with (the first control-plane node). */
export interface KubeadmInitConfig {
  /** Kubernetes version, e.g. "v1.30.2". */
  kubernetesVersion: string;
  /** Cluster name (default in the original: "constellation"). */
  clusterName: string;
  /** The node's name from metadata; normalized here. */
  nodeName: string;
  /** The node's VPC IP (kubelet `node-ip`, a certificate SAN). */
  nodeIp: string;
  /** The cloud provider's ID of this instance (kubelet `provider-id`), if any. */
  providerId?: string;
  /** The load balancer's host (no port): `controlPlaneEndpoint`, if any. */
  controlPlaneHost?: string;
  /** Extra API server certificate SANs (after 127.0.0.1 and the node IP; empty entries skipped). */
  certSans?: readonly string[];
  /** The service CIDR (`networking.serviceSubnet`); kubeadm's default when unset. */
  serviceSubnet?: string;
  /** Whether a cloud controller manager runs (`cloud-provider: external`); default false. */
  externalCloudProvider?: boolean;
  /** Keep kube-proxy (conformance mode); default false: the CNI replaces it. */
  keepKubeProxy?: boolean;
}

/** What `kubeadm join` is configured with. */
export interface KubeadmJoinConfig {
  /** The node's name from metadata; normalized here. */
  nodeName: string;
  /** The node's VPC IP (kubelet `node-ip`). */
  nodeIp: string;
  /** The cloud provider's ID of this instance (KubeletConfiguration `providerID`), if any. */
  providerId?: string;
  /** The API server to discover the cluster through, "host:port" (from the join ticket). */
  apiServerEndpoint: string;
  /** The bootstrap token (a secret: never logged). */
  token: string;
  /** Pins of the cluster CA, "sha256:<hex>" (from the join ticket). */
  caCertHashes: readonly string[];
  /** Set on control-plane nodes: the local API server's endpoint. */
  controlPlane?: {
    /** The address the local API server advertises; default the node IP. */
    advertiseAddress?: string;
    /** Its port; default 6443. */
    bindPort?: number;
  };
  /** Whether a cloud controller manager runs (`cloud-provider: external`); default false. */
  externalCloudProvider?: boolean;
}

/** The init documents: InitConfiguration, ClusterConfiguration, KubeletConfiguration. */
export function initDocuments(config: KubeadmInitConfig): KubeadmDocument[] {
  const nodeName = k8sCompliantHostname(config.nodeName);
  const external = config.externalCloudProvider ?? false;
  const kubeletExtraArgs: Record<string, string> = {
    ...(external ? { "cloud-provider": "external" } : {}),
    "node-ip": config.nodeIp,
    ...(config.providerId ? { "provider-id": config.providerId } : {}),
  };
  const init: KubeadmDocument = {
    apiVersion: KUBEADM_API_VERSION,
    kind: "InitConfiguration",
    nodeRegistration: { criSocket: CRI_SOCKET, name: nodeName, kubeletExtraArgs },
    localAPIEndpoint: { bindPort: KUBERNETES_PORT },
  };
  const certSANs = [
    ...new Set(["127.0.0.1", config.nodeIp, ...(config.certSans ?? [])].filter((san) => san)),
  ];
  const cluster: KubeadmDocument = {
    apiVersion: KUBEADM_API_VERSION,
    kind: "ClusterConfiguration",
    kubernetesVersion: config.kubernetesVersion,
    clusterName: config.clusterName,
    ...(config.controlPlaneHost ? { controlPlaneEndpoint: config.controlPlaneHost } : {}),
    ...(config.serviceSubnet ? { networking: { serviceSubnet: config.serviceSubnet } } : {}),
    apiServer: {
      certSANs,
      extraArgs: {
        "audit-policy-file": AUDIT_POLICY_PATH,
        "audit-log-path": `${AUDIT_LOG_DIR}audit.log`,
        "audit-log-maxage": "30",
        "audit-log-maxbackup": "10",
        "audit-log-maxsize": "100",
        "profiling": "false",
        "egress-selector-config-file": EGRESS_SELECTOR_CONFIG_PATH,
        "kubelet-certificate-authority": `${NODE.pkiDir}/ca.crt`,
        "tls-cipher-suites": API_SERVER_TLS_CIPHER_SUITES.join(","),
      },
      extraVolumes: [
        {
          name: "audit-log",
          hostPath: AUDIT_LOG_DIR,
          mountPath: AUDIT_LOG_DIR,
          pathType: "DirectoryOrCreate",
        },
        {
          name: "audit",
          hostPath: AUDIT_POLICY_PATH,
          mountPath: AUDIT_POLICY_PATH,
          readOnly: true,
          pathType: "File",
        },
        {
          name: "egress-config",
          hostPath: EGRESS_SELECTOR_CONFIG_PATH,
          mountPath: EGRESS_SELECTOR_CONFIG_PATH,
          readOnly: true,
          pathType: "File",
        },
        {
          name: "konnectivity-uds",
          hostPath: KONNECTIVITY_UDS_DIR,
          mountPath: KONNECTIVITY_UDS_DIR,
          pathType: "DirectoryOrCreate",
        },
      ],
    },
    controllerManager: {
      extraArgs: {
        "flex-volume-plugin-dir": "/opt/libexec/kubernetes/kubelet-plugins/volume/exec/",
        ...(external ? { "cloud-provider": "external" } : {}),
        "configure-cloud-routes": "false",
        "profiling": "false",
        "terminated-pod-gc-threshold": "1000",
      },
    },
    scheduler: { extraArgs: { profiling: "false" } },
  };
  const kubelet: KubeadmDocument = {
    apiVersion: KUBELET_API_VERSION,
    kind: "KubeletConfiguration",
    protectKernelDefaults: true,
    tlsCipherSuites: [...KUBELET_TLS_CIPHER_SUITES],
    staticPodPath: STATIC_POD_PATH,
    registerWithTaints: [
      { key: "node.cloudprovider.kubernetes.io/uninitialized", value: "true", effect: "PreferNoSchedule" },
      { key: "node.cilium.io/agent-not-ready", value: "true", effect: "PreferNoSchedule" },
    ],
    tlsCertFile: NODE.kubeletCert,
    tlsPrivateKeyFile: NODE.kubeletKey,
  };
  return [init, cluster, kubelet];
}

/** The join documents: JoinConfiguration (with `controlPlane` on control-plane nodes), KubeletConfiguration. */
export function joinDocuments(config: KubeadmJoinConfig): KubeadmDocument[] {
  const nodeName = k8sCompliantHostname(config.nodeName);
  const kubeletExtraArgs: Record<string, string> = {
    ...(config.externalCloudProvider ? { "cloud-provider": "external" } : {}),
    "node-ip": config.nodeIp,
  };
  const join: KubeadmDocument = {
    apiVersion: KUBEADM_API_VERSION,
    kind: "JoinConfiguration",
    nodeRegistration: { criSocket: CRI_SOCKET, name: nodeName, kubeletExtraArgs },
    discovery: {
      bootstrapToken: {
        apiServerEndpoint: config.apiServerEndpoint,
        token: config.token,
        caCertHashes: [...config.caCertHashes],
      },
    },
  };
  if (config.controlPlane) {
    join.controlPlane = {
      localAPIEndpoint: {
        advertiseAddress: config.controlPlane.advertiseAddress ?? config.nodeIp,
        bindPort: config.controlPlane.bindPort ?? KUBERNETES_PORT,
      },
    };
    join.skipPhases = [SKIP_DOWNLOAD_CERTS_PHASE];
  }
  const kubelet: KubeadmDocument = {
    apiVersion: KUBELET_API_VERSION,
    kind: "KubeletConfiguration",
    ...(config.providerId ? { providerID: config.providerId } : {}),
  };
  return [join, kubelet];
}

/** The init configuration file: {@linkcode initDocuments} as YAML, separated by `---`. */
export function initConfiguration(config: KubeadmInitConfig): string {
  return toYaml(initDocuments(config));
}

/** The join configuration file: {@linkcode joinDocuments} as YAML. Holds the token: handle as a secret. */
export function joinConfiguration(config: KubeadmJoinConfig): string {
  return toYaml(joinDocuments(config));
}

/** The audit policy the API server loads: log every request's metadata. */
export function auditPolicy(): string {
  return toYaml([{ apiVersion: AUDIT_API_VERSION, kind: "Policy", rules: [{ level: "Metadata" }] }]);
}

function toYaml(documents: readonly KubeadmDocument[]): string {
  return documents.map((document) => stringify(document)).join("---\n");
}
