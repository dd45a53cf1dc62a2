/**
 * The first control-plane node's Kubernetes init (reference §6.2, §6.6–§6.7,
 * as this port needs it): install the components, run `kubeadm init`, read
 * the `admin.conf` kubeadm wrote, then create, through the Kubernetes API,
 * the objects the cluster's own services read, so that a key service and a
 * join service started from them (as the cluster's DaemonSets would, with
 * them projected into `/var/config`) issue tickets at once:
 *
 * | object (kube-system unless noted)           | content                                                      | read by |
 * | ------------------------------------------- | ------------------------------------------------------------ | ------- |
 * | Secret `constellation-mastersecret`         | `mastersecret`, `salt` (raw bytes)                           | key service (`/var/config/{mastersecret,salt}`) |
 * | ConfigMap `join-config`                     | `data.attestationConfig` (JSON), `binaryData.measurementSalt` | join service (`/var/config/{attestationConfig,measurementSalt}`) |
 * | ConfigMap `k8s-components-sha256-<hex>`     | `components` (Go JSON), `cluster-version`; immutable          | join service, via the NodeVersion |
 * | NodeVersion `constellation-version` (cluster-scoped) | `spec.kubernetesComponentsReference`, `spec.kubernetesClusterVersion` | join service |
 * | ConfigMap `internal-config`                 | empty                                                        | join service's projected volume |
 *
 * Each object is created idempotently: when it exists with the same content
 * nothing changes, with other content a mutable object is replaced (an
 * immutable one is an error). The API server may still be starting right
 * after kubeadm: calls that failed retryably are repeated for up to
 * {@linkcode DEFAULT_API_WAIT_MS}.
 *
 * Not done (reference §6.2 steps the port leaves to the CLI and the
 * cluster's charts): the CoreDNS patch, the node annotation, Cilium, the
 * first node's kubelet certificate and Konnectivity.
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import type { ConfigMap, Secret } from "kubernetes-types/core/v1.d.ts";
import type { CustomResource, KubernetesObject, RequestOptions } from "../kubernetes/client.ts";
import { KubernetesClient } from "../kubernetes/client.ts";
import { isKubernetesError } from "../kubernetes/errors.ts";
import { loadKubeconfig } from "../kubernetes/kubeconfig.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../kubernetes/names.ts";
import {
  COMPONENTS_LIST_KEY,
  componentsConfigMapName,
  encodeComponents,
  type KubernetesComponent,
  NODE_VERSION_NAME,
  NODE_VERSIONS,
} from "../joinservice/components.ts";
import { k8sCompliantHostname } from "../kubernetes/nodename.ts";
import { type Logger, silentLogger } from "../log/logger.ts";
import { retryUntilDone, systemTimers } from "./retry.ts";
import { ReasonError } from "../reason_error.ts";
import { joinHostPort } from "../net/endpoint.ts";
import { type KubeadmInitConfig, KUBERNETES_PORT } from "./kubeadm_config.ts";
import {
  type ClusterInitializer,
  type ClusterInitParameters,
  type InitNode,
  InitNodeError,
  type SignalOptions,
} from "./initserver.ts";

/** Name of the Secret holding the master secret and salt. */
export const MASTER_SECRET_NAME = "constellation-mastersecret";
/** Name of the join service's ConfigMap. */
export const JOIN_CONFIG_NAME = "join-config";
/** Name of the (empty) internal ConfigMap. */
export const INTERNAL_CONFIG_NAME = "internal-config";
/** How long the API server may take to answer after kubeadm init. */
export const DEFAULT_API_WAIT_MS = 120_000;
/** Wait between attempts while the API server starts. */
export const DEFAULT_API_POLL_MS = 2_000;

/** Runs `kubeadm init` ({@linkcode Kubeadm} in kubeadm.ts). */
export interface KubeadmInit {
  /** Runs `kubeadm init` with `config`; rejects naming the tool, status and a redacted excerpt. */
  init(config: KubeadmInitConfig, options?: SignalOptions): Promise<unknown>;
}

/** This instance, from the metadata API (the metadata client's `self` and `endpoint`). */
export interface InitMetadata {
  /** Name and VPC IP of this instance. */
  self(options?: SignalOptions): Promise<{ name: string; vpcIp: string }>;
  /** The API server endpoint (load balancer), if the platform has one. */
  endpoint?(options?: SignalOptions): Promise<{ host: string; port: number }>;
}

/** Installs the Kubernetes components (helper J's components installer). */
export interface ComponentInstaller {
  /** Throws when `components` could not be installed here, before anything is downloaded. */
  check(components: readonly KubernetesComponent[]): void;
  /** Downloads, verifies and installs `components`. */
  install(components: readonly KubernetesComponent[], options?: SignalOptions): Promise<void>;
}

/** The Kubernetes calls the initializer makes (satisfied by {@linkcode KubernetesClient}). */
export interface ClusterObjectsClient extends Disposable {
  /** Reads a Secret. */
  getSecret(namespace: string, name: string, options?: RequestOptions): Promise<Secret>;
  /** Creates a Secret. */
  createSecret(namespace: string, secret: Secret, options?: RequestOptions): Promise<Secret>;
  /** Replaces a Secret. */
  updateSecret(namespace: string, secret: Secret, options?: RequestOptions): Promise<Secret>;
  /** Reads a ConfigMap. */
  getConfigMap(namespace: string, name: string, options?: RequestOptions): Promise<ConfigMap>;
  /** Creates a ConfigMap. */
  createConfigMap(namespace: string, configMap: ConfigMap, options?: RequestOptions): Promise<ConfigMap>;
  /** Replaces a ConfigMap. */
  updateConfigMap(namespace: string, configMap: ConfigMap, options?: RequestOptions): Promise<ConfigMap>;
  /** Server-side apply of a custom resource. */
  applyCustomResource<T extends KubernetesObject = CustomResource>(
    type: { group: string; version: string; plural: string },
    object: NoInfer<T>,
    options: RequestOptions & { fieldManager: string; force?: boolean },
  ): Promise<T>;
}

/** Options for {@linkcode KubeadmClusterInitializer}. */
export interface KubeadmClusterInitializerOptions {
  /** Runs kubeadm. */
  kubeadm: KubeadmInit;
  /** This instance. */
  metadata: InitMetadata;
  /** Where kubeadm writes the admin kubeconfig (`NodePaths.adminConf`). */
  paths: { adminConf: string };
  /** Installs components before kubeadm; none: they are expected in place. */
  components?: ComponentInstaller;
  /**
   * API server URL to use instead of admin.conf's: the node's own (the bootstrapper's `--init-api-server`,
   * `https://127.0.0.1:6443`), so the master secret does not cross the network to an address that a CA
   * Deno trusts by default could certify.
   */
  apiServer?: string;
  /** Opens the Kubernetes client from admin.conf; default {@linkcode KubernetesClient} over it. */
  connect?(adminConf: string, apiServer: string | undefined): Promise<ClusterObjectsClient>;
  /** How long to wait for the API server; default {@linkcode DEFAULT_API_WAIT_MS}. */
  apiWaitMs?: number;
  /** Wait between attempts; default {@linkcode DEFAULT_API_POLL_MS}. */
  apiPollMs?: number;
  /** Progress lines (never a secret). */
  logger?: Logger;
}

/** Why the cluster init failed. */
export type ClusterInitFailure =
  | "components" // installing the components failed
  | "kubeadm" // kubeadm init failed
  | "kubeconfig" // admin.conf is missing or unusable
  | "api-server"; // creating the cluster objects failed

/** A cluster init failure; the message names the step and never a secret. */
export class ClusterInitError extends ReasonError<ClusterInitFailure> {}

/** The field manager of the objects this initializer writes. */
export const FIELD_MANAGER = "constellation-bootstrapper";

/** {@linkcode ClusterInitializer} over kubeadm and the Kubernetes API. */
export class KubeadmClusterInitializer implements ClusterInitializer {
  readonly #options: KubeadmClusterInitializerOptions;
  readonly #logger: Logger;

  /** An initializer with `options`. */
  constructor(options: KubeadmClusterInitializerOptions) {
    this.#options = options;
    this.#logger = options.logger ?? silentLogger;
  }

  /** Checks `components` with the installer (none: they are expected in place, nothing to check). */
  checkComponents(components: readonly KubernetesComponent[]): void {
    this.#options.components?.check(components);
  }

  /** This node's name, VPC IP and API server endpoint, from the metadata API. */
  async describeNode(options: SignalOptions = {}): Promise<InitNode> {
    const { metadata } = this.#options;
    const read = async <T>(what: string, call: () => Promise<T>): Promise<T> => {
      try {
        return await call();
      } catch (error) {
        throw new InitNodeError("metadata", `${what}: ${errorMessage(error)}`, { cause: error });
      }
    };
    const self = await read("retrieving own instance metadata", () => metadata.self(options));
    const endpoint = metadata.endpoint
      ? await read("retrieving the API server endpoint", () => metadata.endpoint!(options))
      : undefined;
    let nodeName: string;
    try {
      nodeName = k8sCompliantHostname(self.name);
    } catch (error) {
      throw new InitNodeError("node-name", `generating node name: ${errorMessage(error)}`, { cause: error });
    }
    return {
      nodeName,
      nodeIp: self.vpcIp,
      // kubeadm takes "host" (port 6443) or "host:port".
      controlPlaneHost: endpoint &&
        (endpoint.port === KUBERNETES_PORT ? endpoint.host : joinHostPort(endpoint.host, endpoint.port)),
    };
  }

  /** Installs, runs kubeadm init, creates the cluster objects; resolves with admin.conf's bytes. */
  async initialize(
    params: ClusterInitParameters,
    options: SignalOptions = {},
  ): Promise<{ kubeconfig: Uint8Array }> {
    const { signal } = options;
    const o = this.#options;
    if (o.components && params.components.length > 0) {
      await fail(
        "components",
        "installing Kubernetes components",
        () => o.components!.install(params.components, { signal }),
      );
    }
    const { nodeName, nodeIp, controlPlaneHost } = params.node;
    const config: KubeadmInitConfig = {
      kubernetesVersion: params.kubernetesVersion,
      clusterName: params.clusterName,
      nodeName,
      nodeIp,
      controlPlaneHost,
      certSans: params.apiServerCertSans,
      serviceSubnet: params.serviceCidr || undefined,
      keepKubeProxy: params.conformanceMode,
    };
    this.#logger.info("running kubeadm init", { nodeName });
    await fail("kubeadm", "kubeadm init", () => o.kubeadm.init(config, { signal }));

    const kubeconfig = await fail("kubeconfig", "reading admin.conf", () => Deno.readFile(o.paths.adminConf));
    const connect = o.connect ?? connectWithKubeconfig;
    using client = await fail(
      "kubeconfig",
      "initializing the Kubernetes client",
      () => connect(o.paths.adminConf, o.apiServer),
    );
    await fail(
      "api-server",
      "creating the cluster objects",
      () => this.#createObjects(client, params, signal),
    );
    this.#logger.info("cluster objects created");
    return { kubeconfig };
  }

  async #createObjects(client: ClusterObjectsClient, params: ClusterInitParameters, signal?: AbortSignal) {
    const wait = {
      waitMs: this.#options.apiWaitMs ?? DEFAULT_API_WAIT_MS,
      pollMs: this.#options.apiPollMs ?? DEFAULT_API_POLL_MS,
      logger: this.#logger,
    };
    const ns = KUBE_SYSTEM_NAMESPACE;
    // Every call waits out an API server that is starting (the first) or briefly unavailable (a 5xx or a
    // dropped connection past the lock would otherwise end the init). Each is idempotent: create, else
    // compare and replace; the custom resource is applied.
    await untilAnswered(wait, signal, () =>
      ensure<Secret>({
        what: `Secret ${ns}/${MASTER_SECRET_NAME}`,
        desired: {
          apiVersion: "v1",
          kind: "Secret",
          metadata: { name: MASTER_SECRET_NAME, namespace: ns },
          type: "Opaque",
          data: {
            mastersecret: params.masterSecret.key.toBase64(),
            salt: params.masterSecret.salt.toBase64(),
          },
        },
        same: (a, b) => sameRecord(a.data, b.data),
        get: () => client.getSecret(ns, MASTER_SECRET_NAME, { signal }),
        create: (o) => client.createSecret(ns, o, { signal }),
        update: (o) => client.updateSecret(ns, o, { signal }),
      }));
    const configMap = (name: string, desired: ConfigMap, mutable = true) =>
      untilAnswered(wait, signal, () =>
        ensure<ConfigMap>({
          what: `ConfigMap ${ns}/${name}`,
          desired,
          same: (a, b) => sameRecord(a.data, b.data) && sameRecord(a.binaryData, b.binaryData),
          get: () => client.getConfigMap(ns, name, { signal }),
          create: (o) => client.createConfigMap(ns, o, { signal }),
          update: mutable ? (o) => client.updateConfigMap(ns, o, { signal }) : undefined,
        }));
    await configMap(JOIN_CONFIG_NAME, {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: JOIN_CONFIG_NAME, namespace: ns },
      data: { attestationConfig: params.attestationConfig },
      binaryData: { measurementSalt: params.measurementSalt.toBase64() },
    });
    const componentsName = await componentsConfigMapName(params.components);
    await configMap(componentsName, {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: componentsName, namespace: ns },
      immutable: true,
      data: {
        [COMPONENTS_LIST_KEY]: encodeComponents(params.components),
        "cluster-version": params.kubernetesVersion,
      },
    }, false);
    await untilAnswered(wait, signal, () =>
      client.applyCustomResource(NODE_VERSIONS, {
        apiVersion: `${NODE_VERSIONS.group}/${NODE_VERSIONS.version}`,
        kind: "NodeVersion",
        metadata: { name: NODE_VERSION_NAME },
        spec: {
          kubernetesComponentsReference: componentsName,
          kubernetesClusterVersion: params.kubernetesVersion,
        },
      }, { signal, fieldManager: FIELD_MANAGER, force: true }));
    await configMap(INTERNAL_CONFIG_NAME, {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: INTERNAL_CONFIG_NAME, namespace: ns },
      data: {},
    });
  }
}

/** A Kubernetes client from admin.conf, optionally pointed at another API server URL. */
async function connectWithKubeconfig(
  adminConf: string,
  apiServer: string | undefined,
): Promise<ClusterObjectsClient> {
  const connection = await loadKubeconfig(adminConf);
  return new KubernetesClient(apiServer ? { ...connection, server: apiServer } : connection);
}

/** Creates `desired`; if it exists: unchanged when the same, replaced when mutable, else an error. */
async function ensure<T extends KubernetesObject>(o: {
  what: string;
  desired: T;
  same(a: T, b: T): boolean;
  get(): Promise<T>;
  create(object: T): Promise<T>;
  update?(object: T): Promise<T>;
}): Promise<void> {
  try {
    await o.create(o.desired);
    return;
  } catch (error) {
    if (!isKubernetesError(error, "AlreadyExists")) throw error;
  }
  const existing = await o.get();
  if (o.same(existing, o.desired)) return;
  if (!o.update) throw new Error(`${o.what} exists with other content and is immutable`);
  await o.update({
    ...o.desired,
    metadata: { ...o.desired.metadata, resourceVersion: existing.metadata?.resourceVersion },
  });
}

function sameRecord(a: Record<string, string> | undefined, b: Record<string, string> | undefined): boolean {
  const left = Object.entries(a ?? {}).sort(([x], [y]) => x < y ? -1 : 1);
  const right = Object.entries(b ?? {}).sort(([x], [y]) => x < y ? -1 : 1);
  return JSON.stringify(left) === JSON.stringify(right);
}

/**
 * Repeats `call` while it fails retryably (API server starting or briefly unavailable), for up to `waitMs`,
 * logging each failure: a node that waits minutes for its API server says why.
 */
function untilAnswered<T>(
  wait: { waitMs: number; pollMs: number; logger: Logger },
  signal: AbortSignal | undefined,
  call: () => Promise<T>,
): Promise<T> {
  const deadline = Date.now() + wait.waitMs;
  return retryUntilDone("reaching the API server", call, {
    signal,
    timers: systemTimers,
    intervalMs: wait.pollMs,
    logger: wait.logger,
    isTerminal: (error) =>
      !(isKubernetesError(error) && error.retryable) || Date.now() + wait.pollMs > deadline,
  });
}

/** Runs a step; its failure becomes a {@linkcode ClusterInitError} naming it. */
async function fail<T>(reason: ClusterInitFailure, what: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    throw new ClusterInitError(reason, `${what}: ${errorMessage(error)}`, {
      cause: error,
    });
  }
}
