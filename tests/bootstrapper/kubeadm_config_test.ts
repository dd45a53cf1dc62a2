/** The kubeadm documents, field by field against reference §6.3–§6.4. */
import assert from "node:assert/strict";
import { parseAllDocuments } from "yaml";
import {
  API_SERVER_TLS_CIPHER_SUITES,
  auditPolicy,
  initConfiguration,
  joinConfiguration,
  KUBELET_TLS_CIPHER_SUITES,
} from "../../src/bootstrapper/kubeadm_config.ts";
import { NodeNameError } from "../../src/kubernetes/nodename.ts";

// deno-lint-ignore no-explicit-any
type Doc = any;

function documents(yaml: string): Doc[] {
  return parseAllDocuments(yaml).map((document) => document.toJS());
}

const INIT = {
  kubernetesVersion: "v1.30.2",
  clusterName: "constellation",
  nodeName: "Control_Plane-0",
  nodeIp: "192.0.2.1",
  providerId: "qemu:///control-plane-0",
  controlPlaneHost: "192.0.2.100",
  certSans: ["api.example.com", "", "192.0.2.1"],
};

Deno.test("kubeadm init config: InitConfiguration, ClusterConfiguration, KubeletConfiguration in that order", () => {
  const [init, cluster, kubelet, ...rest] = documents(initConfiguration(INIT));
  assert.deepEqual(rest, []);
  assert.deepEqual([init.kind, cluster.kind, kubelet.kind], [
    "InitConfiguration",
    "ClusterConfiguration",
    "KubeletConfiguration",
  ]);
  assert.equal(init.apiVersion, "kubeadm.k8s.io/v1beta3");
  assert.equal(cluster.apiVersion, "kubeadm.k8s.io/v1beta3");
  assert.equal(kubelet.apiVersion, "kubelet.config.k8s.io/v1beta1");

  assert.deepEqual(init.nodeRegistration, {
    criSocket: "unix:///run/containerd/containerd.sock",
    name: "control-plane-0",
    kubeletExtraArgs: { "node-ip": "192.0.2.1", "provider-id": "qemu:///control-plane-0" },
  });
  assert.deepEqual(init.localAPIEndpoint, { bindPort: 6443 }); // advertiseAddress auto-detected
});

Deno.test("kubeadm init config: ClusterConfiguration fields", () => {
  const cluster = documents(initConfiguration(INIT))[1];
  assert.equal(cluster.kubernetesVersion, "v1.30.2");
  assert.equal(cluster.clusterName, "constellation");
  assert.equal(cluster.controlPlaneEndpoint, "192.0.2.100");
  assert.equal(cluster.networking, undefined); // kubeadm's defaults, as the original
  assert.deepEqual(cluster.apiServer.certSANs, ["127.0.0.1", "192.0.2.1", "api.example.com"]);
  assert.deepEqual(cluster.apiServer.extraArgs, {
    "audit-policy-file": "/etc/kubernetes/audit-policy.yaml",
    "audit-log-path": "/var/log/kubernetes/audit/audit.log",
    "audit-log-maxage": "30",
    "audit-log-maxbackup": "10",
    "audit-log-maxsize": "100",
    "profiling": "false",
    "egress-selector-config-file": "/etc/kubernetes/egress-selector-configuration.yaml",
    "kubelet-certificate-authority": "/etc/kubernetes/pki/ca.crt",
    "tls-cipher-suites": API_SERVER_TLS_CIPHER_SUITES.join(","),
  });
  assert.equal(API_SERVER_TLS_CIPHER_SUITES.length, 21);
  assert.deepEqual(cluster.apiServer.extraVolumes, [
    {
      name: "audit-log",
      hostPath: "/var/log/kubernetes/audit/",
      mountPath: "/var/log/kubernetes/audit/",
      pathType: "DirectoryOrCreate",
    },
    {
      name: "audit",
      hostPath: "/etc/kubernetes/audit-policy.yaml",
      mountPath: "/etc/kubernetes/audit-policy.yaml",
      readOnly: true,
      pathType: "File",
    },
    {
      name: "egress-config",
      hostPath: "/etc/kubernetes/egress-selector-configuration.yaml",
      mountPath: "/etc/kubernetes/egress-selector-configuration.yaml",
      readOnly: true,
      pathType: "File",
    },
    {
      name: "konnectivity-uds",
      hostPath: "/run/konnectivity-server",
      mountPath: "/run/konnectivity-server",
      pathType: "DirectoryOrCreate",
    },
  ]);
  assert.deepEqual(cluster.controllerManager.extraArgs, {
    "flex-volume-plugin-dir": "/opt/libexec/kubernetes/kubelet-plugins/volume/exec/",
    "configure-cloud-routes": "false",
    "profiling": "false",
    "terminated-pod-gc-threshold": "1000",
  });
  assert.deepEqual(cluster.scheduler, { extraArgs: { profiling: "false" } });
});

Deno.test("kubeadm init config: KubeletConfiguration fields", () => {
  const kubelet = documents(initConfiguration(INIT))[2];
  assert.deepEqual(kubelet, {
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "KubeletConfiguration",
    protectKernelDefaults: true,
    tlsCipherSuites: [...KUBELET_TLS_CIPHER_SUITES],
    staticPodPath: "/etc/kubernetes/manifests",
    registerWithTaints: [
      { key: "node.cloudprovider.kubernetes.io/uninitialized", value: "true", effect: "PreferNoSchedule" },
      { key: "node.cilium.io/agent-not-ready", value: "true", effect: "PreferNoSchedule" },
    ],
    tlsCertFile: "/run/state/kubelet/pki/kubelet-client-crt.pem",
    tlsPrivateKeyFile: "/run/state/kubelet/pki/kubelet-client-key.pem",
  });
  assert.equal(KUBELET_TLS_CIPHER_SUITES.length, 8);
});

Deno.test("kubeadm init config: external cloud provider, service CIDR; optional fields left out", () => {
  const [init, cluster] = documents(initConfiguration({
    kubernetesVersion: "v1.30.2",
    clusterName: "c",
    nodeName: "n",
    nodeIp: "10.0.0.1",
    externalCloudProvider: true,
    serviceSubnet: "10.96.0.0/12",
  }));
  assert.deepEqual(init.nodeRegistration.kubeletExtraArgs, {
    "cloud-provider": "external",
    "node-ip": "10.0.0.1",
  });
  assert.equal(cluster.controllerManager.extraArgs["cloud-provider"], "external");
  assert.equal(cluster.controlPlaneEndpoint, undefined);
  assert.deepEqual(cluster.networking, { serviceSubnet: "10.96.0.0/12" });
  assert.deepEqual(cluster.apiServer.certSANs, ["127.0.0.1", "10.0.0.1"]);
});

const JOIN = {
  nodeName: "Worker_1.example",
  nodeIp: "192.0.2.8",
  providerId: "qemu:///worker-1",
  apiServerEndpoint: "192.0.2.0:6443",
  token: "abcdef.0123456789abcdef",
  caCertHashes: ["sha256:" + "ab".repeat(32)],
};

Deno.test("kubeadm join config (worker): JoinConfiguration then KubeletConfiguration", () => {
  const [join, kubelet, ...rest] = documents(joinConfiguration(JOIN));
  assert.deepEqual(rest, []);
  assert.deepEqual(join, {
    apiVersion: "kubeadm.k8s.io/v1beta3",
    kind: "JoinConfiguration",
    nodeRegistration: {
      criSocket: "unix:///run/containerd/containerd.sock",
      name: "worker-1.example",
      kubeletExtraArgs: { "node-ip": "192.0.2.8" },
    },
    discovery: {
      bootstrapToken: {
        apiServerEndpoint: "192.0.2.0:6443",
        token: "abcdef.0123456789abcdef",
        caCertHashes: ["sha256:" + "ab".repeat(32)],
      },
    },
  });
  assert.deepEqual(kubelet, {
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "KubeletConfiguration",
    providerID: "qemu:///worker-1",
  });
});

Deno.test("kubeadm join config (control plane): local API endpoint and skipped download-certs, no certificateKey", () => {
  const [join] = documents(joinConfiguration({ ...JOIN, controlPlane: {} }));
  assert.deepEqual(join.controlPlane, {
    localAPIEndpoint: { advertiseAddress: "192.0.2.8", bindPort: 6443 },
  });
  assert.deepEqual(join.skipPhases, ["control-plane-prepare/download-certs"]);
  assert.equal(JSON.stringify(join).includes("certificateKey"), false);
  const [custom] = documents(
    joinConfiguration({ ...JOIN, controlPlane: { advertiseAddress: "192.0.2.9", bindPort: 7443 } }),
  );
  assert.deepEqual(custom.controlPlane.localAPIEndpoint, { advertiseAddress: "192.0.2.9", bindPort: 7443 });
});

Deno.test("kubeadm config: node names are normalized with the shared rule; bad names are refused", () => {
  assert.equal(
    documents(joinConfiguration({ ...JOIN, nodeName: "TEST_node" }))[0].nodeRegistration.name,
    "test-node",
  );
  assert.throws(() => joinConfiguration({ ...JOIN, nodeName: "test_node_" }), NodeNameError);
  assert.throws(() => initConfiguration({ ...INIT, nodeName: "" }), NodeNameError);
});

Deno.test("audit policy: audit.k8s.io/v1 Policy with one Metadata rule", () => {
  assert.deepEqual(documents(auditPolicy()), [{
    apiVersion: "audit.k8s.io/v1",
    kind: "Policy",
    rules: [{ level: "Metadata" }],
  }]);
});
