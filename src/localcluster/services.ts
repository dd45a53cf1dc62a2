/**
 * What the cluster's own workloads would do once the init is done, done by
 * the local cluster instead: kubeadm's bootstrap-token phase publishes
 * `kube-public/cluster-info`, and on every control-plane node the key
 * service and join service DaemonSets run with the `constellation-mastersecret`
 * Secret and the `join-config` ConfigMap projected into their config
 * directory.
 *
 * @module
 */
import { stringify } from "yaml";
import { KubernetesClient } from "../kubernetes/client.ts";
import { loadKubeconfig } from "../kubernetes/kubeconfig.ts";
import { writeFileAtomic } from "../fs/atomic_write.ts";
import { SERVICE_DENO_FLAGS } from "../os/service_runtime.ts";

/** The namespace of the cluster's own objects. */
const KUBE_SYSTEM = "kube-system";
/** The key service's port, as its Service (`key-service.kube-system:9000`). */
export const KEY_SERVICE_PORT = 9000;
/** The join service's node port (`JoinServiceNodePort`), where bootstrappers dial it. */
export const JOIN_SERVICE_NODE_PORT = 30090;
/** The join service's metrics port. */
export const JOIN_SERVICE_METRICS_PORT = 9091;
/** The join service's browser port (GetStatus for the console). */
export const JOIN_SERVICE_BROWSER_PORT = 30092;

/** Where the cluster is and who may publish its cluster-info. */
export interface ClusterInfoOptions {
  /** The admin kubeconfig kubeadm init wrote. */
  adminConf: string;
  /** "host:port" of the API server, as joining nodes reach it. */
  endpoint: string;
  /** The cluster CA (ca.crt), PEM. */
  caPem: string;
}

/** Creates `kube-public/cluster-info` unless it exists, as kubeadm init's bootstrap-token phase does. */
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

/**
 * Writes the services' config directory from the cluster's objects, as the
 * DaemonSets' volumes project them: `mastersecret` and `salt` (0600) from
 * the Secret, `attestationConfig` and `measurementSalt` from the ConfigMap.
 * Each file is replaced atomically, so a running join service's watcher
 * sees a whole new attestation config or none.
 */
export async function projectServiceConfig(adminConf: string, dir: string): Promise<void> {
  using admin = new KubernetesClient(await loadKubeconfig(adminConf));
  const secret = await admin.getSecret(KUBE_SYSTEM, "constellation-mastersecret");
  const joinConfig = await admin.getConfigMap(KUBE_SYSTEM, "join-config");
  const fromBase64 = (value: string | undefined, what: string) => {
    if (value === undefined) throw new Error(`the cluster's ${what} is missing`);
    return Uint8Array.fromBase64(value);
  };
  const attestationConfig = joinConfig.data?.attestationConfig;
  if (attestationConfig === undefined) throw new Error("the cluster's join-config has no attestationConfig");
  await Deno.mkdir(dir, { recursive: true });
  await writeFileAtomic(`${dir}/mastersecret`, fromBase64(secret.data?.mastersecret, "master secret"));
  await writeFileAtomic(`${dir}/salt`, fromBase64(secret.data?.salt, "master secret salt"));
  await writeFileAtomic(`${dir}/attestationConfig`, attestationConfig, { mode: 0o644 });
  await writeFileAtomic(
    `${dir}/measurementSalt`,
    fromBase64(joinConfig.binaryData?.measurementSalt, "measurement salt"),
    { mode: 0o644 },
  );
}

/**
 * Replaces the attestation config in the cluster's `join-config` ConfigMap
 * (as an operator's config update does); the join services pick it up once
 * it is projected again ({@linkcode projectServiceConfig}).
 */
export async function updateAttestationConfig(adminConf: string, attestationConfig: string): Promise<void> {
  using admin = new KubernetesClient(await loadKubeconfig(adminConf));
  const joinConfig = await admin.getConfigMap(KUBE_SYSTEM, "join-config");
  await admin.updateConfigMap(KUBE_SYSTEM, {
    ...joinConfig,
    data: { ...joinConfig.data, attestationConfig },
  });
}

/** Options of {@linkcode keyServiceArgs} and {@linkcode joinServiceArgs}. */
export interface ServiceArgsOptions {
  /** The project's checkout, with `src/`. */
  repoRoot: string;
  /** The projected config directory ({@linkcode projectServiceConfig}). */
  configDir: string;
  /** The node's `/etc/kubernetes` (admin.conf and pki/). */
  kubernetesDir: string;
  /** Address the service binds. */
  bindAddress: string;
  /** Port of the join service. */
  joinServicePort: number;
  /** `host:port` of the key service, as the join service dials it. */
  keyServiceEndpoint: string;
  /** `host:port` of the Kubernetes API, as the join service dials it and hands it to nodes. */
  apiServerEndpoint: string;
  /** The join service's browser port (GetStatus for web pages; 0 picks a free one); none when absent. */
  browserPort?: number;
  /** Web origins whose pages may call the browser port. */
  corsAllowOrigins?: readonly string[];
  /** More flags of the join service, after these (a later flag wins). */
  joinServiceFlags?: readonly string[];
}

/**
 * `deno run` arguments of the key service of a control-plane node, under its
 * permission set: on the node's 127.0.0.1 (only the join service beside it
 * calls it) at `port`.
 */
export function keyServiceArgs(options: ServiceArgsOptions, port: number): string[] {
  const { configDir } = options;
  return [
    "run",
    "-P=key-service",
    "--no-prompt",
    `--allow-read=${configDir}`,
    ...SERVICE_DENO_FLAGS,
    `${options.repoRoot}src/keyservice/main.ts`,
    ...["--listen-address", "127.0.0.1", "--port", String(port)],
    ...["--master-secret", `${configDir}/mastersecret`, "--salt", `${configDir}/salt`],
  ];
}

/** `deno run` arguments of the join service of a control-plane node, under its permission set. */
export function joinServiceArgs(options: ServiceArgsOptions): string[] {
  return [
    "run",
    "-P=join-service",
    "--no-prompt",
    `--allow-read=${options.configDir},${options.kubernetesDir}`,
    ...SERVICE_DENO_FLAGS,
    `${options.repoRoot}src/joinservice/main.ts`,
    ...["--attestation-variant", "qemu-vtpm", "--key-service-endpoint", options.keyServiceEndpoint],
    ...[
      "--api-server-endpoint",
      options.apiServerEndpoint,
      "--kubeconfig",
      `${options.kubernetesDir}/admin.conf`,
    ],
    ...["--config-dir", options.configDir, "--kubernetes-dir", options.kubernetesDir],
    ...["--port", String(options.joinServicePort), "--listen-address", options.bindAddress],
    ...["--metrics-port", "0", "--metrics-address", options.bindAddress],
    ...(options.browserPort === undefined ? [] : ["--browser-port", String(options.browserPort)]),
    ...(options.corsAllowOrigins ?? []).flatMap((origin) => ["--cors-allow-origin", origin]),
    ...(options.joinServiceFlags ?? []),
  ];
}
