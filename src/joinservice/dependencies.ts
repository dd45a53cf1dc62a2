/**
 * The join service's concrete dependencies: the project's libraries (key
 * service client, Kubernetes client, kubelet CA, SSH CA, ...) adapted to the
 * interfaces `server.ts` declares, with their failures turned into Connect
 * errors a node can act on (Unavailable: retry; InvalidArgument: fix the
 * request; Internal: the service is misconfigured).
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";
import type { Clock } from "../clock.ts";
import type { Logger } from "../log/logger.ts";
import type { CustomResource, KubernetesClient } from "../kubernetes/client.ts";
import { KubernetesError } from "../kubernetes/errors.ts";
import { isRetryableKeyServiceError, type KeyServiceClient } from "../keyservice/client.ts";
import { parseKubeconfig, selectDiscoveryCluster } from "../kubernetes/kubeconfig.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../kubernetes/names.ts";
import { SharedLoad } from "../async/shared_load.ts";
import { BootstrapTokenError, bootstrapTokenSecretName, createBootstrapToken } from "./bootstraptoken.ts";
import { discoveryTokenCaCertHash } from "./cahash.ts";
import { type KubernetesComponent, parseComponents } from "./components.ts";
import { loadControlPlaneFiles } from "./controlplanefiles.ts";
import { KubeletCaError, nodeNameFromCsr, readKubeletCa, signKubeletCertificate } from "./kubeletca.ts";
import { k8sCompliantHostname, NodeNameError } from "./nodename.ts";
import { SSH_CA_KEY_ID, SSH_CA_SEED_LENGTH, SshCa, SshCaError } from "./sshca.ts";
import type {
  BootstrapTokens,
  ClusterInfo,
  JoiningNodes,
  KeySource,
  KubeletSigner,
  SshHostCertifier,
} from "./server.ts";

/** The NodeVersion resource naming the components ConfigMap. */
export const NODE_VERSION = { group: "update.edgeless.systems", version: "v1alpha1", plural: "nodeversions" };
/** Name of the cluster's NodeVersion object. */
export const NODE_VERSION_NAME = "constellation-version";
/** JoiningNode resources for the node operator. */
export const JOINING_NODE = { group: "update.edgeless.systems", version: "v1alpha1", plural: "joiningnodes" };
/** Name of the single JoiningNode of a joining control plane (one at a time, as the original). */
export const CONTROL_PLANE_JOINING_NODE = "control-plane";
/** How long a JoiningNode is meant to live. */
export const JOINING_NODE_DEADLINE_MS = { worker: 48 * 3600_000, controlPlane: 10 * 60_000 };

/**
 * The key service as the join service uses it: every failure worth
 * retrying (no connection, no answer in time) is Unavailable, so a node
 * knows to try again.
 */
export function keySource(client: KeyServiceClient): KeySource {
  return {
    async getDataKey(id, length, options) {
      try {
        return await client.getDataKey(id, length, options);
      } catch (e) {
        if (!isRetryableKeyServiceError(e)) throw e;
        const cause = ConnectError.from(e);
        throw new ConnectError(
          `key service unavailable: ${cause.rawMessage}`,
          Code.Unavailable,
          undefined,
          undefined,
          e,
        );
      }
    },
  };
}

/** Turns a Kubernetes client error into a Connect error (retryable ones become Unavailable). */
export function kubernetesConnectError(e: unknown): ConnectError {
  if (e instanceof ConnectError) return e;
  if (e instanceof KubernetesError || e instanceof BootstrapTokenError) {
    if (e.retryable) return new ConnectError(`API server unavailable: ${e.message}`, Code.Unavailable);
    return new ConnectError(e.message, Code.Internal);
  }
  return new ConnectError("internal error", Code.Internal, undefined, undefined, e);
}

async function kubernetesCall<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw kubernetesConnectError(e);
  }
}

/**
 * Kubelet certificates signed with the CA in `<pki>/ca.{crt,key}`, re-read
 * when the files change. `checkCa` loads the CA once, for a clear error at
 * start.
 */
export function kubeletSigner(
  options: { pkiDir: string; clock: Clock },
): KubeletSigner & { checkCa(): Promise<void> } {
  const certFile = `${options.pkiDir}/ca.crt`;
  const keyFile = `${options.pkiDir}/ca.key`;
  const ca = new SharedLoad(() => readKubeletCa({ certFile, keyFile }));
  const loadCa = async (signal?: AbortSignal) =>
    await ca.get({ version: await fileStamp([certFile, keyFile]), signal });
  return {
    async checkCa() {
      await loadCa();
    },
    async sign(csrDer, { signal }) {
      let ca;
      try {
        ca = await loadCa(signal);
      } catch (e) {
        throw new ConnectError(`cluster CA unusable: ${(e as Error).message}`, Code.Internal);
      }
      let certificatePem: string;
      let nodeName: string;
      try {
        certificatePem = await signKubeletCertificate(csrDer, ca, { clock: options.clock });
        nodeName = k8sCompliantHostname(nodeNameFromCsr(csrDer));
      } catch (e) {
        const rejected = (e instanceof KubeletCaError && e.reason.startsWith("csr-")) ||
          e instanceof NodeNameError;
        if (!rejected) throw e; // not the node's fault: an Internal error, logged by the service
        throw new ConnectError(`certificate request rejected: ${e.message}`, Code.InvalidArgument);
      }
      return { certificatePem, nodeName };
    },
  };
}

/** A change stamp of files (mtime and size), so a rotated CA is picked up without restart. */
async function fileStamp(paths: string[]): Promise<string> {
  const stats = await Promise.all(paths.map((p) => Deno.stat(p).catch(() => undefined)));
  return stats.map((s) => s ? `${s.mtime?.getTime()}:${s.size}` : "missing").join("|");
}

/** Options for {@linkcode clusterInfo}. */
export interface ClusterInfoOptions {
  client: KubernetesClient;
  /** Holds admin.conf and pki/. */
  kubernetesDir: string;
  /** The endpoint handed to nodes, or how to find it. */
  endpoint: { fixed: string } | { metadataUrl: string };
}

/** Cluster facts for tickets, from the API server, the control plane's files and the metadata API. */
export function clusterInfo(options: ClusterInfoOptions): ClusterInfo {
  const endpoint = "metadataUrl" in options.endpoint
    ? new SharedLoad(endpointFromMetadata.bind(undefined, options.endpoint.metadataUrl))
    : undefined;
  let discoveryHash: { stamp: string; hash: string } | undefined;
  const componentsByName = new Map<string, KubernetesComponent[]>();
  return {
    components({ signal }) {
      return kubernetesCall(async () => {
        const nodeVersion = await options.client.getCustomResource<
          CustomResource<{ kubernetesComponentsReference?: string }>
        >(
          NODE_VERSION,
          NODE_VERSION_NAME,
          { signal },
        );
        const configMapName = nodeVersion.spec?.kubernetesComponentsReference;
        if (!configMapName) {
          throw new ConnectError("kubernetesComponentsReference not found in node version", Code.Internal);
        }
        // The components ConfigMap is immutable and named by its content's hash: read it once per name.
        let components = componentsByName.get(configMapName);
        if (!components) {
          const configMap = await options.client.getConfigMap(KUBE_SYSTEM_NAMESPACE, configMapName, {
            signal,
          });
          try {
            components = parseComponents(configMap.data?.components ?? "");
          } catch (e) {
            throw new ConnectError(
              `components ConfigMap ${configMapName}: ${(e as Error).message}`,
              Code.Internal,
            );
          }
          componentsByName.set(configMapName, components);
        }
        return { configMapName, components };
      });
    },

    async discoveryTokenCaCertHash() {
      const path = `${options.kubernetesDir}/admin.conf`;
      try {
        const stamp = await fileStamp([path]);
        if (discoveryHash?.stamp !== stamp) {
          const [first] = selectDiscoveryCluster(parseKubeconfig(await Deno.readTextFile(path)));
          discoveryHash = { stamp, hash: await discoveryTokenCaCertHash(first, path) };
        }
        return discoveryHash.hash;
      } catch (e) {
        throw new ConnectError(`${path}: ${(e as Error).message}`, Code.Internal);
      }
    },

    apiServerEndpoint({ signal }) {
      if ("fixed" in options.endpoint) return Promise.resolve(options.endpoint.fixed);
      return endpoint!.get({ signal });
    },

    async controlPlaneFiles({ signal }) {
      try {
        return await loadControlPlaneFiles({ pkiDir: `${options.kubernetesDir}/pki`, signal });
      } catch (e) {
        throw new ConnectError((e as Error).message, Code.Internal);
      }
    },
  };
}

/** "<VPCIP>:6443" from a QEMU-style metadata API's GET /self. */
async function endpointFromMetadata(metadataUrl: string): Promise<string> {
  const url = new URL("/self", metadataUrl);
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  } catch (e) {
    throw new ConnectError(`metadata API ${url} unavailable: ${(e as Error).message}`, Code.Unavailable);
  }
  if (!response.ok) {
    await response.body?.cancel();
    throw new ConnectError(`metadata API ${url} answered ${response.status}`, Code.Unavailable);
  }
  const self = await response.json().catch(() => undefined) as { VPCIP?: unknown } | undefined;
  if (typeof self?.VPCIP !== "string" || self.VPCIP === "") {
    throw new ConnectError(`metadata API ${url} returned no VPCIP`, Code.Internal);
  }
  return self.VPCIP.includes(":") ? `[${self.VPCIP}]:6443` : `${self.VPCIP}:6443`;
}

/** Bootstrap tokens as kubeadm Secrets in kube-system. */
export function bootstrapTokens(options: { client: KubernetesClient; clock: Clock }): BootstrapTokens {
  return {
    create({ signal }) {
      return kubernetesCall(async () => {
        const created = await createBootstrapToken({
          secrets: { create: (namespace, secret, o) => options.client.createSecret(namespace, secret, o) },
          clock: options.clock,
          signal,
        });
        return { token: created.token, tokenId: created.id };
      });
    },
    delete(tokenId, { signal }) {
      return kubernetesCall(() =>
        options.client.deleteSecret(KUBE_SYSTEM_NAMESPACE, bootstrapTokenSecretName(tokenId), { signal })
      );
    },
  };
}

/**
 * JoiningNode records: workers by server-side apply under their own name,
 * control planes as the single "control-plane" object (so control planes
 * join one at a time). A control-plane record whose deadline has passed is
 * stale (its node never finished) and is replaced.
 */
export function joiningNodes(
  options: { client: KubernetesClient; clock: Clock; logger: Logger },
): JoiningNodes {
  const { client, clock } = options;
  return {
    record(node, { signal }) {
      return kubernetesCall(async () => {
        const deadline = (ms: number) => new Date(clock.now() + ms).toISOString().replace(/\.\d{3}Z$/, "Z");
        const object = (name: string, ms: number) => ({
          kind: "JoiningNode",
          metadata: { name },
          spec: {
            name: node.name,
            componentsreference: node.componentsReference,
            iscontrolplane: node.isControlPlane,
            deadline: deadline(ms),
          },
        });
        if (!node.isControlPlane) {
          await client.applyCustomResource(JOINING_NODE, object(node.name, JOINING_NODE_DEADLINE_MS.worker), {
            fieldManager: "join-service",
            signal,
          });
          return;
        }
        const record = object(CONTROL_PLANE_JOINING_NODE, JOINING_NODE_DEADLINE_MS.controlPlane);
        try {
          await client.createCustomResource(JOINING_NODE, record, { signal });
        } catch (e) {
          if (!(e instanceof KubernetesError && e.reason === "AlreadyExists")) throw e;
          const existing = await client.getCustomResource<
            CustomResource<{ name?: string; deadline?: string }>
          >(
            JOINING_NODE,
            CONTROL_PLANE_JOINING_NODE,
            { signal },
          );
          const until = Date.parse(existing.spec?.deadline ?? "");
          // The same node asking again (its first answer was lost) may record itself again.
          if (until > clock.now() && existing.spec?.name !== node.name) {
            throw new ConnectError(
              `control-plane node ${
                JSON.stringify(existing.spec?.name ?? "")
              } is joining until ${existing.spec?.deadline}; control planes join one at a time, retry later`,
              Code.Unavailable,
            );
          }
          if (existing.spec?.name !== node.name) {
            options.logger.warn("replacing stale control-plane JoiningNode", {
              previous: existing.spec?.name,
            });
          }
          await client.deleteCustomResource(JOINING_NODE, CONTROL_PLANE_JOINING_NODE, { signal });
          await client.createCustomResource(JOINING_NODE, record, { signal });
        }
      });
    },
  };
}

/** SSH host certificates from the CA derived from the master secret (key ID "ca_emergency_ssh"). */
export function sshHostCertifier(options: { keys: KeySource; clock: Clock }): SshHostCertifier {
  const ca = new SharedLoad(async () =>
    await SshCa.fromSeed(await options.keys.getDataKey(SSH_CA_KEY_ID, SSH_CA_SEED_LENGTH, {}))
  );
  const encoder = new TextEncoder();
  return {
    async certify(hostPublicKey, principals, { signal }) {
      const sshCa = await ca.get({ signal });
      try {
        const certificate = await sshCa.signHostCertificate(hostPublicKey, principals, {
          clock: options.clock,
        });
        return {
          hostCertificate: encoder.encode(certificate),
          caPublicKey: encoder.encode(sshCa.authorizedCaPublicKey()),
        };
      } catch (e) {
        if (e instanceof SshCaError) {
          throw new ConnectError(`SSH host key: ${e.message}`, Code.InvalidArgument);
        }
        throw e;
      }
    },
  };
}
