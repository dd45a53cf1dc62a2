/**
 * A cluster of bootstrapper processes for tests and benchmarks: the metadata
 * API, a first control-plane node ({@linkcode createBootstrapNode}), the fake
 * API server serving the PKI its kubeadm writes, the operator's secrets and
 * attestation config, and, once the init is done, the real key and join
 * services started from the objects the init created (as the cluster's
 * DaemonSets would be, with those objects projected into their config dir).
 *
 * @module
 */
import { freePort } from "../../src/net/free_port.ts";
import bcrypt from "bcryptjs";
import { parseAttestationConfig } from "../../src/attestation/config.ts";
import type { AkTrust, Validator } from "../../src/attestation/attestation.ts";
import { createValidator } from "../../src/attestation/registry.ts";
import { type NodePaths, nodePaths } from "../../src/bootstrapper/node_paths.ts";
import type { InitParameters } from "../../src/init/client.ts";
import {
  COMPONENTS_LIST_KEY,
  componentsConfigMapName,
  encodeComponents,
  type KubernetesComponent,
  NODE_VERSION_MAX_AGE_MS,
  NODE_VERSION_NAME,
  NODE_VERSIONS,
} from "../../src/joinservice/components.ts";
import { sleep } from "../../src/async/sleep.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { type MetadataServer, startMetadataServer } from "../../src/metadata/server.ts";
import { KEY_SERVICE_LISTENING, keyServiceArgs, REPO_ROOT } from "../keyservice/key_service_process.ts";
import { imageMeasurements } from "../../src/localcluster/node.ts";
import { type BootstrapNode, createBootstrapNode } from "./bootstrap_node.ts";
import {
  joinServiceArgs,
  projectServiceConfig,
  publishClusterInfo,
} from "../../src/localcluster/services.ts";
import { type FakeApiServer, startFakeApiServer } from "./fake_apiserver.ts";
import { JOIN_SERVICE_LISTENING } from "./join_cluster.ts";
import { SERVICE_ENV } from "../../src/os/service_runtime.ts";
import { type RunningService, startService } from "../../src/os/service_process.ts";

/** The cluster's init secret (its bcrypt hash is what the metadata API serves). */
export const INIT_SECRET = "correct horse battery staple init secret";

/** A running bootstrap cluster. Its resources are on the stack it was given. */
export interface BootstrapCluster {
  readonly dir: string;
  readonly metadata: MetadataServer;
  readonly apiServer: FakeApiServer;
  /** "127.0.0.1:<port>" of the API server (metadata's `/endpoint`). */
  readonly apiEndpoint: string;
  /** The first control-plane node and its paths. */
  readonly controlPlane: BootstrapNode;
  readonly cpPaths: NodePaths;
  /** The operator's attestation config (JSON text), a validator for it and its control-plane keys. */
  readonly attestationConfigText: string;
  readonly validator: Validator;
  readonly controlPlanes: AkTrust;
  /** The operator's secrets. */
  readonly kms: ClusterKms;
  readonly measurementSalt: Uint8Array;
  /** The init request the operator's CLI sends, with `initSecret` and the Kubernetes components. */
  initRequest(initSecret?: string, components?: KubernetesComponent[]): InitParameters;
  /**
   * Makes the join service hand out `components` from now on, as an upgrade
   * would: a new components ConfigMap and the NodeVersion pointing at it.
   * Resolves once a NodeVersion the join service read before has expired
   * (it serves one read for a second), so every ticket after it carries
   * `components`.
   */
  setComponents(components: KubernetesComponent[]): Promise<void>;
  /**
   * After the init: writes the services' config from the cluster objects,
   * publishes cluster-info, starts the key service; resolves to the flags
   * that point a joining node at the join service (not started yet).
   */
  prepareServices(): Promise<string[]>;
  /** Starts the join service (after {@linkcode prepareServices}). */
  startJoinService(): Promise<RunningService>;
  /** Adds a joining node with an address of its own (not loopback: its kubelet certificate names it). */
  addNode(
    name: string,
    role: "ControlPlane" | "Worker",
    options?: { tamperPcr4?: boolean },
  ): Promise<BootstrapNode>;
}

/** Starts the metadata API, the first control-plane node and the fake API server under `dir`. */
export async function startBootstrapCluster(
  dir: string,
  stack: AsyncDisposableStack,
): Promise<BootstrapCluster> {
  const metadata = stack.use(
    await startMetadataServer({
      instances: [{ name: "control-plane-0", role: "ControlPlane", vpcIp: "127.0.0.1" }],
      initSecretHash: bcrypt.hashSync(INIT_SECRET, 4),
    }),
  );
  const controlPlane = stack.use(
    await createBootstrapNode({
      dir,
      name: "control-plane-0",
      metadataUrl: metadata.nodeUrl("control-plane-0"),
    }),
  );
  const cpPaths = nodePaths(controlPlane.root);
  const apiServer = await startFakeApiServer({ pkiDir: cpPaths.pkiDir });
  stack.defer(() => apiServer.close());
  const apiEndpoint = `127.0.0.1:${apiServer.port}`;
  metadata.setEndpoint(apiEndpoint);

  // The operator's view: the measurements every node of this image reports.
  const attestationConfigText = JSON.stringify({
    variant: "qemu-vtpm",
    measurements: await imageMeasurements(controlPlane.tpm),
    akTrust: { trustAnyKey: true, controlPlaneAnyKey: true },
  });
  const attestationConfig = parseAttestationConfig(attestationConfigText, {
    source: "test",
    variant: "qemu-vtpm",
  });
  const validator = createValidator(attestationConfig, { logger: silentLogger });
  const masterKey = crypto.getRandomValues(new Uint8Array(32));
  const masterSalt = crypto.getRandomValues(new Uint8Array(32));
  const measurementSalt = crypto.getRandomValues(new Uint8Array(32));
  const base64url = (bytes: Uint8Array) => encodeURIComponent(bytes.toBase64({ alphabet: "base64url" }));

  const config = `${dir}/services`;
  let joinPort = 0;
  let keyServicePort = 0;
  // Joining nodes get TEST-NET addresses; only control-plane-0's join service is dialed, at 127.0.0.1.
  let nextAddress = 10;
  return {
    dir,
    metadata,
    apiServer,
    apiEndpoint,
    controlPlane,
    cpPaths,
    attestationConfigText,
    validator,
    controlPlanes: attestationConfig.controlPlanes,
    kms: new ClusterKms(masterKey, masterSalt),
    measurementSalt,
    initRequest: (initSecret = INIT_SECRET, components = []) => ({
      kmsUri: `kms://cluster-kms?key=${base64url(masterKey)}&salt=${base64url(masterSalt)}`,
      storageUri: "storage://no-store",
      kubernetesVersion: "v1.30.2",
      initSecret: new TextEncoder().encode(initSecret),
      clusterName: "test-cluster",
      measurementSalt,
      attestationConfig: attestationConfigText,
      kubernetesComponents: components,
    }),
    async setComponents(components) {
      const name = await componentsConfigMapName(components);
      const namespace = "/api/v1/namespaces/kube-system";
      apiServer.putObject(`${namespace}/configmaps/${name}`, {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name, namespace: "kube-system" },
        data: { [COMPONENTS_LIST_KEY]: encodeComponents(components) },
        immutable: true,
      });
      const path = `/apis/${NODE_VERSIONS.group}/${NODE_VERSIONS.version}/nodeversions/${NODE_VERSION_NAME}`;
      const nodeVersion = apiServer.getObject(path) as { spec: Record<string, unknown> };
      apiServer.putObject(path, {
        ...nodeVersion,
        spec: { ...nodeVersion.spec, kubernetesComponentsReference: name },
      });
      // A node started within the second would get the components before: on a quiet machine the
      // component rows of bootstrapper_process_test.ts did, every time.
      await sleep(NODE_VERSION_MAX_AGE_MS + 200);
    },
    async prepareServices() {
      await projectServiceConfig(cpPaths.adminConf, config);
      await publishClusterInfo({
        adminConf: cpPaths.adminConf,
        endpoint: apiEndpoint,
        caPem: await Deno.readTextFile(`${cpPaths.pkiDir}/ca.crt`),
      });
      const keyService = await startService(
        "deno",
        keyServiceArgs([config], ["--master-secret", `${config}/mastersecret`, "--salt", `${config}/salt`]),
        { readyMatch: KEY_SERVICE_LISTENING, cwd: REPO_ROOT, env: { ...SERVICE_ENV } },
      );
      stack.defer(() => keyService.stop().then(() => {}));
      keyServicePort = keyService.port;
      // A fixed port, so the join service can be started late (a node that finds it down at first).
      joinPort = freePort();
      return ["--join-service-port", String(joinPort)];
    },
    async startJoinService() {
      const service = await startService(
        "deno",
        joinServiceArgs({
          repoRoot: REPO_ROOT,
          configDir: config,
          kubernetesDir: cpPaths.kubernetesDir,
          bindAddress: "127.0.0.1",
          joinServicePort: joinPort,
          keyServiceEndpoint: `127.0.0.1:${keyServicePort}`,
          apiServerEndpoint: apiEndpoint,
        }),
        { readyMatch: JOIN_SERVICE_LISTENING, cwd: REPO_ROOT, env: { ...SERVICE_ENV } },
      );
      stack.defer(() => service.stop().then(() => {}));
      return service;
    },
    async addNode(name, role, options = {}) {
      metadata.setInstance({ name, role, vpcIp: `192.0.2.${nextAddress++}` });
      return stack.use(
        await createBootstrapNode({ dir, name, metadataUrl: metadata.nodeUrl(name), ...options }),
      );
    },
  };
}
