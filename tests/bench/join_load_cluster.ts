/**
 * The cluster the join service load benchmark (`join_load.ts`) drives: the
 * join service, the key service and the local Kubernetes API, each its own
 * process, so that the benchmark process is only the load generator and each
 * process's CPU time can be read on its own.
 *
 * Unlike `tests/support/join_cluster.ts` (swtpm and an in-process API server,
 * for tests), joining nodes' evidence here is forged in this process by one
 * software attestation key the attestation config allow-lists
 * (`tests/support/software_tpm.ts`): a quote costs one ECDSA signature
 * instead of swtpm's ~30 ms, one at a time. The local API keeps its objects
 * in memory (`--in-memory`), so its disk (journal appends and fsyncs) is no
 * part of the figures; `join_burst.ts` measures the local cluster as it runs.
 *
 * For fault runs (`tests/faults/`, `join_faults.ts`) it can run several
 * join-service replicas on one port at 127.0.0.1, 127.0.0.2, … (as join
 * services on control-plane nodes share the node port), put a
 * fault-injecting proxy (`tests/support/api_fault_proxy.ts`) between them
 * and the local API, and list what the API holds.
 *
 * @module
 */
import { createClient } from "@connectrpc/connect";
import { API } from "../../src/gen/join/join_pb.ts";
import {
  componentsConfigMapName,
  encodeComponents,
  NODE_VERSION_NAME,
  NODE_VERSIONS,
} from "../../src/joinservice/components.ts";
import { KubernetesClient } from "../../src/kubernetes/client.ts";
import { loadKubeconfig } from "../../src/kubernetes/kubeconfig.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../../src/kubernetes/names.ts";
import { type RunningService, startService } from "../../src/os/service_process.ts";
import { connectRpc, type RpcConnection } from "../../src/rpc/client.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";
import {
  enforcingAttestationConfig,
  joinServiceCommand,
  type JoinServiceProcess,
  joinServiceProcess,
  type KeyServiceProcess,
  startKeyServiceProcess,
  testComponents,
  writePki,
} from "../support/join_cluster.ts";
import { createTestCa, issueCert, issueLoopbackServerCert, kubeconfigFor } from "../support/pki.ts";
import { type ApiFaultProxy, startApiFaultProxy } from "../support/api_fault_proxy.ts";
import { freePort } from "../../src/net/free_port.ts";
import { SoftwareTpmIssuer } from "../support/software_tpm.ts";

/** The local API's "listening" log line; group 1 is the port. */
const LOCAL_API_LISTENING = /"msg":"listening".*"port":(\d+)/;

/** Options for {@linkcode startLoadCluster}. */
export interface LoadClusterOptions {
  /** Extra flags of the join service; later flags win. */
  joinServiceFlags?: string[];
  /** Flags of the join service's `deno run`, e.g. `--cpu-prof`. */
  joinServiceDenoFlags?: string[];
  /** Join-service replicas, at 127.0.0.1, 127.0.0.2, … on one port; default 1 (on a free port). */
  replicas?: number;
  /** Put a fault-injecting proxy between the join services and the local API; default false. */
  apiFaultProxy?: boolean;
  /** Extra flags of the local API, e.g. `--token-cleanup-interval`. */
  localApiFlags?: string[];
}

/** A running load cluster. Dispose it to stop every process and remove its files. */
export interface LoadCluster extends AsyncDisposable {
  /** The first replica. */
  readonly joinService: JoinServiceProcess;
  /** Every replica, by index (a restarted one replaces its entry). */
  readonly joinServices: readonly JoinServiceProcess[];
  /** The replicas' addresses, by index. */
  readonly joinServiceAddresses: readonly string[];
  /** The port every replica listens on. */
  readonly joinServicePort: number;
  /** Starts replica `index` again (after it was stopped or killed), on its address and port. */
  restartJoinService(index: number): Promise<JoinServiceProcess>;
  readonly keyService: KeyServiceProcess;
  readonly localApi: RunningService;
  /** The proxy the join services reach the API through, with `apiFaultProxy`. */
  readonly apiProxy: ApiFaultProxy | undefined;
  /** Lists the objects of a collection URL path straight from the local API (as the admin). */
  list<T = Record<string, unknown>>(path: string): Promise<T[]>;
  /** PEM CA of the join services' serving certificate. */
  readonly joinCaPem: string;
  /** The joining nodes' (allow-listed) software attestation key. */
  readonly issuer: SoftwareTpmIssuer;
  /** A new connection to the join service (a joining node's), with a client over it. */
  connect(): { connection: RpcConnection; client: ReturnType<typeof createClient<typeof API>> };
  /** Stops every process and removes the cluster's files. */
  stop(): Promise<void>;
}

/** Starts the local API, the key service and the join service, and the objects a ticket needs. */
export async function startLoadCluster(options: LoadClusterOptions = {}): Promise<LoadCluster> {
  const cleanups: (() => Promise<unknown>)[] = [];
  const stop = async () => {
    for (const fn of cleanups.splice(0).reverse()) await fn().catch(() => {});
  };
  try {
    const root = await Deno.realPath(await Deno.makeTempDir({ prefix: "join-load-" }));
    cleanups.push(() => Deno.remove(root, { recursive: true }));
    const paths = {
      root,
      configDir: `${root}/config`,
      kubernetesDir: `${root}/kubernetes`,
      pkiDir: `${root}/kubernetes/pki`,
      kubeconfig: `${root}/kubernetes/admin.conf`,
      tlsCert: `${root}/tls/join-service.crt`,
      tlsKey: `${root}/tls/join-service.key`,
    };
    for (const dir of [paths.configDir, `${paths.pkiDir}/etcd`, `${root}/tls`]) {
      await Deno.mkdir(dir, { recursive: true });
    }

    // The joining nodes' evidence: one software key, allow-listed, claiming a boot chain.
    const pcrs = new Map(
      Array.from({ length: 16 }, (_, index) => [index, crypto.getRandomValues(new Uint8Array(32))]),
    );
    const issuer = await SoftwareTpmIssuer.create({ pcrs });
    await Deno.writeTextFile(
      `${paths.configDir}/attestationConfig`,
      JSON.stringify(enforcingAttestationConfig(pcrs, issuer.keyDigest)),
    );
    await Deno.writeFile(`${paths.configDir}/measurementSalt`, crypto.getRandomValues(new Uint8Array(32)), {
      mode: 0o600,
    });

    // kubeadm's PKI, which the local API serves, and the admin kubeconfig the join service uses.
    const clusterCa = await createTestCa("CN=kubernetes");
    await writePki(paths.pkiDir, clusterCa);
    const apiServerCert = await issueLoopbackServerCert(clusterCa, "CN=kube-apiserver");
    await Deno.writeTextFile(`${paths.pkiDir}/apiserver.crt`, apiServerCert.certPem);
    await Deno.writeTextFile(`${paths.pkiDir}/apiserver.key`, apiServerCert.keyPem, { mode: 0o600 });
    const localApi = await startService("deno", [
      "run",
      "-P=local-api",
      "--no-prompt",
      `--allow-read=${paths.pkiDir}`,
      "src/localapi/main.ts",
      ...["--pki-dir", paths.pkiDir, "--in-memory", "--port", "0", "--listen-address", "127.0.0.1"],
      ...(options.localApiFlags ?? []),
    ], { readyMatch: LOCAL_API_LISTENING, cwd: REPO_ROOT });
    cleanups.push(() => localApi.stop());
    await localApi.waitForLine(/"msg":"serving"/);
    const admin = await issueCert(clusterCa, {
      subject: "CN=kubernetes-admin, O=system:masters",
      usages: ["clientAuth"],
    });
    const localApiUrl = `https://127.0.0.1:${localApi.port}`;
    await Deno.writeTextFile(paths.kubeconfig, kubeconfigFor(localApiUrl, clusterCa.certPem, admin), {
      mode: 0o600,
    });
    await createComponentObjects(paths.kubeconfig);
    const adminHttp = Deno.createHttpClient({
      caCerts: [clusterCa.certPem],
      cert: admin.certPem,
      key: admin.keyPem,
    });
    cleanups.push(() => Promise.resolve(adminHttp.close()));
    let apiProxy: ApiFaultProxy | undefined;
    if (options.apiFaultProxy) {
      // The join services' kubeconfig (also admin.conf, whose CA they pin) names the proxy instead.
      apiProxy = startApiFaultProxy({
        upstream: localApiUrl,
        upstreamCaPem: clusterCa.certPem,
        clientCert: admin,
        serverCert: await issueLoopbackServerCert(clusterCa, "CN=kube-apiserver-fault-proxy"),
      });
      cleanups.push(() => apiProxy!.close());
      await Deno.writeTextFile(paths.kubeconfig, kubeconfigFor(apiProxy.url, clusterCa.certPem, admin), {
        mode: 0o600,
      });
    }

    const keyService = await startKeyServiceProcess(
      {
        masterSecret: crypto.getRandomValues(new Uint8Array(32)),
        salt: crypto.getRandomValues(new Uint8Array(32)),
      },
      root,
      ["--log-level", "info"],
    );
    cleanups.push(() => keyService.stop());

    const replicas = options.replicas ?? 1;
    const addresses = Array.from({ length: replicas }, (_, i) => `127.0.0.${i + 1}`);
    const joinCa = await createTestCa("CN=join-service-load-ca");
    const leaf = await issueCert(joinCa, {
      subject: "CN=join-service",
      sans: { ips: addresses, dns: ["localhost"] },
      usages: ["serverAuth"],
    });
    await Deno.writeTextFile(paths.tlsCert, leaf.certPem);
    await Deno.writeTextFile(paths.tlsKey, leaf.keyPem, { mode: 0o600 });
    // One replica takes a free port; several share one, free on 127.0.0.1 when chosen (nothing else
    // here binds 127.0.0.2 and up).
    const port = replicas === 1 ? 0 : freePort();
    const startReplica = async (index: number) => {
      const replica = await joinServiceProcess(
        joinServiceCommand({
          paths,
          keyServiceEndpoint: keyService.endpoint,
          denoFlags: options.joinServiceDenoFlags,
          flags: options.joinServiceFlags,
          listenAddress: addresses[index],
          port,
        }),
        joinCa.certPem,
        addresses[index],
      );
      cleanups.push(() => replica.stop());
      return replica;
    };
    const joinServices: JoinServiceProcess[] = [];
    for (let i = 0; i < replicas; i++) joinServices.push(await startReplica(i));
    const joinService = joinServices[0];

    return {
      joinService,
      joinServices,
      joinServiceAddresses: addresses,
      joinServicePort: joinService.process.port,
      async restartJoinService(index) {
        await joinServices[index].stop();
        joinServices[index] = await startReplica(index);
        return joinServices[index];
      },
      keyService,
      localApi,
      apiProxy,
      async list<T>(path: string) {
        const response = await fetch(`${localApiUrl}${path}`, { client: adminHttp });
        if (!response.ok) throw new Error(`listing ${path}: ${response.status} ${await response.text()}`);
        return ((await response.json()) as { items: T[] }).items;
      },
      joinCaPem: joinCa.certPem,
      issuer,
      connect() {
        const connection = connectRpc({ baseUrl: joinService.url, caCerts: [joinCa.certPem] });
        cleanups.push(() => Promise.resolve(connection.close()));
        return { connection, client: createClient(API, connection.transport) };
      },
      stop,
      [Symbol.asyncDispose]: stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The components ConfigMap and the NodeVersion naming it, as `cli init` creates them. */
async function createComponentObjects(kubeconfig: string): Promise<void> {
  using client = new KubernetesClient(await loadKubeconfig(kubeconfig));
  const components = await testComponents();
  const name = await componentsConfigMapName(components);
  await client.createConfigMap(KUBE_SYSTEM_NAMESPACE, {
    metadata: { name },
    immutable: true,
    data: { components: encodeComponents(components), "cluster-version": "v1.31.1" },
  });
  await client.createCustomResource(NODE_VERSIONS, {
    kind: "NodeVersion",
    metadata: { name: NODE_VERSION_NAME },
    spec: { kubernetesComponentsReference: name, kubernetesClusterVersion: "v1.31.1" },
  });
}
