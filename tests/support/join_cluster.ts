/**
 * A small cluster around the real join service process, for integration
 * tests and benchmarks: the join service runs as `deno run -P=join-service`
 * (scoped to the cluster's temporary directory and 127.0.0.1), next to the
 * real key service process, the fake API server (whose CA is the cluster CA,
 * as in a kubeadm cluster) and a swtpm whose quotes are the joining node's
 * evidence (a {@linkcode TpmIssuer} in the calling process).
 *
 * The attestation config expects the swtpm's real PCR values (all 16,
 * enforced; PCRs 4 and 9 are extended first so the boot chain is not all
 * zeros) and trusts only the issuer's attestation key, as a worker's unless
 * the cluster is started with `controlPlaneKey`. Tickets are requested
 * as a node would: challenge, CSR, attested request, sealed response opened
 * with the node's HPKE key.
 *
 * ```ts
 * await using cluster = await startJoinCluster();
 * const { ticket } = await cluster.requestTicket({ diskUuid, nodeName: "worker-1", ips: ["10.0.0.7"] });
 * ```
 *
 * @module
 */
import { create, fromBinary } from "@bufbuild/protobuf";
import { type Client, createClient } from "@connectrpc/connect";
import { TpmIssuer } from "../../src/attestation/tpm/issuer.ts";
import { readPcrs } from "../../src/attestation/tpm/pcr.ts";
import { runLoadingTpmTool } from "../../src/attestation/tpm/tools.ts";
import {
  type AttestedRequestBundle,
  createAttestedRequest,
  openSealedResponse,
} from "../../src/atls/attester.ts";
import { rejoinRequestDigest } from "../../src/atls/reportdata.ts";
import {
  API,
  type GetStatusResponse,
  type IssueJoinTicketResponse,
  IssueRejoinTicketRequestSchema,
  type IssueRejoinTicketResponse,
  IssueRejoinTicketResponseSchema,
} from "../../src/gen/join/join_pb.ts";
import {
  componentsConfigMapName,
  encodeComponents,
  type KubernetesComponent,
} from "../../src/joinservice/components.ts";
import { CONTROL_PLANE_FILE_NAMES } from "../../src/joinservice/controlplanefiles.ts";
import { bootstrapTokenSecretName } from "../../src/joinservice/bootstraptoken.ts";
import { SERVICE_DENO_FLAGS, SERVICE_ENV } from "../../src/os/service_runtime.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../../src/kubernetes/names.ts";
import { deriveKey } from "../../src/kms/hkdf.ts";
import {
  dataKeyInfo,
  DERIVED_KEY_LENGTH,
  MEASUREMENT_SECRET_KEY_ID,
  stateDiskKeyId,
} from "../../src/kms/keys.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import { encodePem } from "../../src/x509/pem.ts";
import * as x509 from "../../src/x509/x509.ts";
import {
  KEY_SERVICE_LISTENING,
  keyServiceArgs,
  REPO_ROOT,
  writeSecrets,
} from "../keyservice/key_service_process.ts";
import {
  type AuthorizationRequest,
  type FakeApiServer,
  JOINING_NODES,
  NODE_VERSIONS,
  startFakeApiServer,
} from "./fake_apiserver.ts";
import { type AttestedJoinRequest, attestedJoinRequest, openJoinTicket } from "./join_request.ts";
import { createTestCa, issueLoopbackServerCert, privateKeyToPem, type TestCa } from "./pki.ts";
import { type RunningService, runToExit, startService } from "../../src/os/service_process.ts";
import { startSwtpm, type Swtpm } from "../../src/localcluster/swtpm.ts";
import { freePort } from "../../src/net/free_port.ts";

/** The join service's "listening" log line; group 1 is the join.API port. */
export const JOIN_SERVICE_LISTENING = /"msg":"listening".*"port":(\d+)/;

/** The attestation variant the cluster runs. */
export const CLUSTER_VARIANT = "qemu-vtpm";

/** PCRs extended with boot-chain-like events before the measurements are read. */
export const EXTENDED_PCRS: readonly number[] = [4, 9];

/** Where the fake API server keeps the cluster's objects (URL paths). */
export const OBJECT_PATHS = {
  nodeVersion: `/apis/${NODE_VERSIONS.group}/${NODE_VERSIONS.version}/nodeversions/constellation-version`,
  configMap: (name: string) => `/api/v1/namespaces/${KUBE_SYSTEM_NAMESPACE}/configmaps/${name}`,
  secrets: `/api/v1/namespaces/${KUBE_SYSTEM_NAMESPACE}/secrets`,
  tokenSecret: (tokenId: string) =>
    `/api/v1/namespaces/${KUBE_SYSTEM_NAMESPACE}/secrets/${bootstrapTokenSecretName(tokenId)}`,
  joiningNode: (name: string) => `/apis/${JOINING_NODES.group}/${JOINING_NODES.version}/joiningnodes/${name}`,
} as const;

/** The attestation config file as JSON (src/attestation/config.ts). */
export interface AttestationConfigJson {
  variant: string;
  measurements: Record<string, { expected: string; warnOnly: boolean }>;
  akTrust:
    | { allowedKeyDigests: string[]; controlPlaneKeyDigests?: string[] }
    | { trustAnyKey: true; controlPlaneKeyDigests?: string[]; controlPlaneAnyKey?: true };
}

/** Options for {@linkcode startJoinCluster}. */
export interface JoinClusterOptions {
  /**
   * Extra flags of the join service; later flags win. The defaults allow
   * 1000 tickets per second per peer (every test client is 127.0.0.1) and
   * 10 000 overall, so only a test that sets limits meets them.
   */
  joinServiceFlags?: string[];
  /** The fake API server's authorizer, asked per request; default allows all. */
  authorize?: (request: AuthorizationRequest) => boolean;
  /** The join service's log level; default "info". */
  logLevel?: "debug" | "info" | "warn" | "error";
  /**
   * Whether the node's attestation key may join as a control plane
   * (`akTrust.controlPlaneKeyDigests` lists it); default false: it is a
   * worker's key.
   */
  controlPlaneKey?: boolean;
}

/** The real key service process, restartable on the same port. */
export interface KeyServiceProcess {
  /** Its port (fixed for the cluster's lifetime). */
  readonly port: number;
  /** "127.0.0.1:<port>". */
  readonly endpoint: string;
  /** The running process, or undefined while stopped. */
  readonly process: RunningService | undefined;
  /** Starts it again on {@linkcode port} (no-op when running). */
  start(): Promise<void>;
  /** Stops it with SIGTERM (no-op when stopped); resolves to the exit status. */
  stop(): Promise<Deno.CommandStatus | undefined>;
}

/** A running join service process and a client for it. */
export interface JoinServiceProcess {
  /** `https://127.0.0.1:<port>` (join.API and /healthz). */
  readonly url: string;
  /** `http://127.0.0.1:<metrics port>` (/metrics and /healthz). */
  readonly metricsUrl: string;
  /** A gRPC client trusting the join service's test certificate. */
  readonly client: Client<typeof API>;
  /** The process; its stderr lines are the service's JSON log. */
  readonly process: RunningService;
  /** Stops it with `signal` (default SIGTERM) and closes the client; resolves to the exit status. */
  stop(signal?: Deno.Signal): Promise<Deno.CommandStatus>;
}

/** A joining node's request for a join ticket. */
export interface TicketRequestOptions {
  /** The state disk UUID, sent as is. */
  diskUuid: string;
  /** The node name in the CSR's CN (`system:node:<nodeName>`). */
  nodeName: string;
  /** IP SANs of the CSR; default none. */
  ips?: string[];
  isControlPlane?: boolean;
  /** SSH host key to certify: OpenSSH wire-format public key and principals. */
  hostKey?: { publicKey: Uint8Array; principals: string[] };
  /** A CSR to send instead of the node CSR made from `nodeName` and `ips` (e.g. a forbidden one). */
  certificateRequest?: Uint8Array;
  /** The join service to ask; default the cluster's. */
  service?: JoinServiceProcess;
}

/** A join request ready to send (see {@linkcode AttestedJoinRequest}), and the node's kubelet keys. */
export interface PreparedJoinRequest extends AttestedJoinRequest {
  /** The kubelet key pair the CSR was made with. */
  kubeletKeys: CryptoKeyPair;
}

/** An opened join ticket. */
export interface OpenedJoinTicket extends PreparedJoinRequest {
  ticket: IssueJoinTicketResponse;
}

/** Options for {@linkcode nodeCsr}. */
export interface NodeCsrOptions {
  /** Node name in CN=system:node:<nodeName>; default "worker-1". */
  nodeName?: string;
  /** IP SANs; default none. */
  ips?: string[];
  /** DNS SANs (a kubelet certificate may not have them). */
  dnsNames?: string[];
  /** Subject replacing O=system:nodes, CN=system:node:<nodeName>. */
  subject?: x509.JsonName;
  /** Key pair; default a fresh P-256 key. */
  keys?: CryptoKeyPair;
}

/** A running cluster. Dispose it (or call `stop`) to stop every process and remove its files. */
export interface JoinCluster extends AsyncDisposable {
  /** The join service started with the cluster. */
  readonly joinService: JoinServiceProcess;
  /** Its URL (`https://127.0.0.1:<port>`). */
  readonly joinUrl: string;
  /** Its metrics URL (`http://127.0.0.1:<port>`). */
  readonly metricsUrl: string;
  /** PEM CA of the join service's serving certificate. */
  readonly joinCaPem: string;
  readonly keyService: KeyServiceProcess;
  readonly apiServer: FakeApiServer;
  /** The cluster CA (= the API server's CA): signs kubelet certificates, pinned by the discovery hash. */
  readonly clusterCa: TestCa;
  readonly swtpm: Swtpm;
  readonly issuer: TpmIssuer;
  /** The swtpm's SHA-256 PCRs 0–15 as the measurements were taken from. */
  readonly pcrs: ReadonlyMap<number, Uint8Array>;
  /** Files and directories of the cluster; everything lies under `root`. */
  readonly paths: {
    root: string;
    configDir: string;
    attestationConfig: string;
    kubernetesDir: string;
    pkiDir: string;
    kubeconfig: string;
    tlsCert: string;
    tlsKey: string;
  };
  /** The eight control-plane files' bytes by name (as in the PKI directory). */
  readonly controlPlaneFiles: ReadonlyMap<string, Uint8Array>;
  readonly masterSecret: Uint8Array;
  readonly masterSalt: Uint8Array;
  readonly measurementSalt: Uint8Array;
  /** `--api-server-endpoint` of the join services. */
  readonly apiServerEndpoint: string;
  /** The components the ConfigMap lists, and its name. */
  readonly components: readonly KubernetesComponent[];
  readonly componentsConfigMapName: string;
  /** The attestation config the cluster started with. */
  readonly attestationConfig: AttestationConfigJson;
  /** Replaces the attestation config file atomically (write a new file, rename it over the old). */
  writeAttestationConfig(config: AttestationConfigJson): Promise<void>;
  /** Polls GetStatus until configGeneration ≥ `generation` (default timeout 10 s). */
  waitForConfigGeneration(generation: bigint, options?: { timeoutMs?: number }): Promise<GetStatusResponse>;
  /** The `deno run` arguments of a join service of this cluster, with `flags` appended. */
  joinServiceArgs(flags?: string[]): string[];
  /** Starts another join service of this cluster (stopped by `stop`). */
  startJoinService(options?: { flags?: string[] }): Promise<JoinServiceProcess>;
  /** Builds an attested join request as a node would. */
  prepareJoinRequest(options: TicketRequestOptions): Promise<PreparedJoinRequest>;
  /** Opens the sealed ticket of a join response. */
  openJoinTicket(
    response: IssueJoinTicketResponse,
    bundle: AttestedRequestBundle,
  ): Promise<IssueJoinTicketResponse>;
  /** Requests a join ticket and opens it; rejects with the service's ConnectError. */
  requestTicket(options: TicketRequestOptions): Promise<OpenedJoinTicket>;
  /** Requests a rejoin ticket and opens it. */
  requestRejoinTicket(
    diskUuid: string,
    options?: { service?: JoinServiceProcess },
  ): Promise<IssueRejoinTicketResponse>;
  /** The keys a ticket for `diskUuid` must hold, derived locally from the master secret. */
  expectedKeys(diskUuid: string): Promise<{ stateDiskKey: Uint8Array; measurementSecret: Uint8Array }>;
  /** Stops every process and removes the cluster's files. */
  stop(): Promise<void>;
}

const MASTER_SECRET_LENGTH = 32;
const SALT_LENGTH = 32;
/** `--api-server-endpoint` of the cluster's join services. */
const API_SERVER_ENDPOINT = "10.0.0.1:6443";
/** Rate limits no test meets unless it sets its own (every test client is 127.0.0.1). */
const OPEN_RATE_LIMITS = ["--rate-per-peer", "1000", "--burst-per-peer", "1000"].concat(
  ["--rate-global", "10000", "--burst-global", "10000"],
);

/** Starts a cluster: swtpm and issuer, fake API server, key service and one join service. */
export async function startJoinCluster(options: JoinClusterOptions = {}): Promise<JoinCluster> {
  const cleanups: (() => Promise<unknown>)[] = [];
  const cleanup = async () => {
    for (const fn of cleanups.splice(0).reverse()) await fn().catch(() => {});
  };
  try {
    return await build(options, cleanups, cleanup);
  } catch (error) {
    await cleanup();
    throw error;
  }
}

async function build(
  options: JoinClusterOptions,
  cleanups: (() => Promise<unknown>)[],
  cleanup: () => Promise<void>,
): Promise<JoinCluster> {
  const root = await Deno.realPath(await Deno.makeTempDir({ prefix: "join-cluster-" }));
  cleanups.push(() => Deno.remove(root, { recursive: true }));
  const paths = {
    root,
    configDir: `${root}/config`,
    attestationConfig: `${root}/config/attestationConfig`,
    kubernetesDir: `${root}/kubernetes`,
    pkiDir: `${root}/kubernetes/pki`,
    kubeconfig: `${root}/join-service.kubeconfig`,
    tlsCert: `${root}/tls/join-service.crt`,
    tlsKey: `${root}/tls/join-service.key`,
  };
  for (const dir of [paths.configDir, `${paths.pkiDir}/etcd`, `${root}/tls`]) {
    await Deno.mkdir(dir, { recursive: true });
  }

  // The node's TPM and the measurements it reports.
  const swtpm = await startSwtpm();
  cleanups.push(() => swtpm.stop());
  for (const pcr of EXTENDED_PCRS) {
    await runLoadingTpmTool({ tcti: swtpm.tcti }, "tpm2_pcrevent", [String(pcr)], {
      stdin: new TextEncoder().encode(`boot component measured into PCR ${pcr}`),
    });
  }
  const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, eventLogPath: null });
  cleanups.push(() => issuer.close());
  const pcrs = await readPcrs({ tcti: swtpm.tcti }, Array.from({ length: 16 }, (_, i) => i));
  const attestationConfig = enforcingAttestationConfig(pcrs, issuer.keyDigest, options);
  await Deno.writeTextFile(paths.attestationConfig, JSON.stringify(attestationConfig));

  // Secrets.
  const masterSecret = crypto.getRandomValues(new Uint8Array(MASTER_SECRET_LENGTH));
  const masterSalt = crypto.getRandomValues(new Uint8Array(SALT_LENGTH));
  const measurementSalt = crypto.getRandomValues(new Uint8Array(SALT_LENGTH));
  await Deno.writeFile(`${paths.configDir}/measurementSalt`, measurementSalt, { mode: 0o600 });

  // The API server; its CA is the cluster CA, as kubeadm sets it up.
  const apiServer = await startFakeApiServer({ authorize: options.authorize });
  cleanups.push(() => apiServer.close());
  const clusterCa = apiServer.ca;
  const controlPlaneFiles = await writePki(paths.pkiDir, clusterCa);
  await Deno.writeTextFile(`${paths.kubernetesDir}/admin.conf`, apiServer.kubeconfig());
  await Deno.writeTextFile(paths.kubeconfig, apiServer.kubeconfig());
  const components = await testComponents();
  const configMapName = await componentsConfigMapName(components);
  apiServer.putObject(OBJECT_PATHS.configMap(configMapName), {
    immutable: true,
    data: { components: encodeComponents(components), "cluster-version": "v1.31.1" },
  });
  apiServer.putObject(OBJECT_PATHS.nodeVersion, {
    spec: { kubernetesComponentsReference: configMapName, kubernetesClusterVersion: "v1.31.1" },
  });

  // The join service's serving certificate.
  const joinCa = await createTestCa("CN=join-service-test-ca");
  const leaf = await issueLoopbackServerCert(joinCa, "CN=join-service");
  await Deno.writeTextFile(paths.tlsCert, leaf.certPem);
  await Deno.writeTextFile(paths.tlsKey, leaf.keyPem, { mode: 0o600 });

  const keyService = await startKeyServiceProcess({ masterSecret, salt: masterSalt }, root);
  cleanups.push(() => keyService.stop());

  const joinServiceArgs = (flags: string[] = []) =>
    joinServiceCommand({ paths, keyServiceEndpoint: keyService.endpoint, logLevel: options.logLevel, flags });
  const startJoinService = async (start: { flags?: string[] } = {}) => {
    const started = await joinServiceProcess(joinServiceArgs(start.flags), joinCa.certPem);
    cleanups.push(() => started.stop());
    return started;
  };
  const joinService = await startJoinService({ flags: options.joinServiceFlags });

  const prepareJoinRequest = async (request: TicketRequestOptions): Promise<PreparedJoinRequest> => {
    const kubeletKeys = await generateNodeKeys();
    const certificateRequest = request.certificateRequest ??
      await nodeCsr({ nodeName: request.nodeName, ips: request.ips, keys: kubeletKeys });
    const prepared = await attestedJoinRequest({
      issuer,
      client: (request.service ?? joinService).client,
      diskUuid: request.diskUuid,
      certificateRequest,
      isControlPlane: request.isControlPlane,
      hostKey: request.hostKey,
    });
    return { ...prepared, kubeletKeys };
  };

  const cluster: JoinCluster = {
    joinService,
    joinUrl: joinService.url,
    metricsUrl: joinService.metricsUrl,
    joinCaPem: joinCa.certPem,
    keyService,
    apiServer,
    clusterCa,
    swtpm,
    issuer,
    pcrs,
    paths,
    controlPlaneFiles,
    masterSecret,
    masterSalt,
    measurementSalt,
    apiServerEndpoint: API_SERVER_ENDPOINT,
    components,
    componentsConfigMapName: configMapName,
    attestationConfig,
    async writeAttestationConfig(config) {
      const next = `${paths.configDir}/.attestationConfig.next`;
      await Deno.writeTextFile(next, JSON.stringify(config));
      await Deno.rename(next, paths.attestationConfig);
    },
    async waitForConfigGeneration(generation, wait = {}) {
      const deadline = Date.now() + (wait.timeoutMs ?? 10_000);
      for (;;) {
        const status = await joinService.client.getStatus({});
        if (status.configGeneration >= generation) return status;
        if (Date.now() > deadline) {
          throw new Error(
            `config generation ${status.configGeneration} did not reach ${generation} within ${wait.timeoutMs} ms`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    },
    joinServiceArgs,
    startJoinService,
    prepareJoinRequest,
    openJoinTicket,
    async requestTicket(request) {
      const prepared = await prepareJoinRequest(request);
      const response = await (request.service ?? joinService).client.issueJoinTicket(prepared.request);
      return { ...prepared, ticket: await openJoinTicket(response, prepared.bundle) };
    },
    async requestRejoinTicket(diskUuid, rejoin = {}) {
      const service = rejoin.service ?? joinService;
      const { nonce } = await service.client.getChallenge({});
      const bundle = await createAttestedRequest({
        issuer,
        nonce,
        purpose: "rejoin",
        requestDigest: await rejoinRequestDigest({ diskUuid }),
      });
      const response = await service.client.issueRejoinTicket(
        create(IssueRejoinTicketRequestSchema, { diskUuid, attestation: bundle.attestation }),
      );
      return fromBinary(
        IssueRejoinTicketResponseSchema,
        await openSealedResponse({ sealed: response.sealed, bundle, purpose: "rejoin" }),
      );
    },
    async expectedKeys(diskUuid) {
      const derive = (id: string) => deriveKey(masterSecret, masterSalt, dataKeyInfo(id), DERIVED_KEY_LENGTH);
      return {
        stateDiskKey: await derive(stateDiskKeyId(diskUuid)),
        measurementSecret: await derive(MEASUREMENT_SECRET_KEY_ID),
      };
    },
    stop: cleanup,
    [Symbol.asyncDispose]: cleanup,
  };
  return cluster;
}

/**
 * The attestation config of a cluster whose nodes report `pcrs`: every PCR
 * enforced, and only the attestation key `keyDigest` trusted, as a worker's
 * unless `controlPlaneKey`.
 */
export function enforcingAttestationConfig(
  pcrs: ReadonlyMap<number, Uint8Array>,
  keyDigest: string,
  options: { controlPlaneKey?: boolean } = {},
): AttestationConfigJson {
  return {
    variant: CLUSTER_VARIANT,
    measurements: Object.fromEntries(
      [...pcrs].map(([index, value]) => [String(index), { expected: value.toHex(), warnOnly: false }]),
    ),
    akTrust: {
      allowedKeyDigests: [keyDigest],
      controlPlaneKeyDigests: options.controlPlaneKey ? [keyDigest] : [],
    },
  };
}

/** What {@linkcode joinServiceCommand} needs: the cluster's files and its key service. */
export interface JoinServiceCommandOptions {
  /** The cluster's files; the service may read everything under `root`. */
  paths: Pick<
    JoinCluster["paths"],
    "root" | "kubeconfig" | "configDir" | "kubernetesDir" | "tlsCert" | "tlsKey"
  >;
  /** "127.0.0.1:<port>". */
  keyServiceEndpoint: string;
  /** Default "info". */
  logLevel?: JoinClusterOptions["logLevel"];
  /** Flags of `deno run` itself, before the script (e.g. `--cpu-prof`). */
  denoFlags?: string[];
  /** The service's extra flags; later flags win. */
  flags?: string[];
  /**
   * The loopback address both ports bind (default 127.0.0.1): replicas on
   * 127.0.0.1, 127.0.0.2, … share one port, as join services on control-plane
   * nodes share the node port.
   */
  listenAddress?: string;
  /** The join.API port; default 0 (a free one). */
  port?: number;
}

/**
 * The `deno run` arguments of a join service of a cluster: the
 * `join-service` permission set reading only the cluster's files and
 * reaching only 127.0.0.1 (and its own listen address), the service's
 * runtime flags (`runtime.ts`), both ports on `options.listenAddress`
 * (default 127.0.0.1; the join.API port `options.port`, else free ones),
 * open rate limits, then `options.flags`.
 */
export function joinServiceCommand(options: JoinServiceCommandOptions): string[] {
  const { paths, flags = [] } = options;
  const address = options.listenAddress ?? "127.0.0.1";
  return [
    "run",
    "-P=join-service",
    "--no-prompt",
    `--allow-read=${paths.root}`,
    `--allow-net=${[...new Set(["127.0.0.1", address])].join(",")}`,
    ...SERVICE_DENO_FLAGS,
    ...(options.denoFlags ?? []),
    "src/joinservice/main.ts",
    ...["--attestation-variant", CLUSTER_VARIANT],
    ...["--key-service-endpoint", options.keyServiceEndpoint],
    // Tests of the metadata API give --metadata-url instead; the two flags exclude each other.
    ...(flags.includes("--metadata-url") ? [] : ["--api-server-endpoint", API_SERVER_ENDPOINT]),
    ...["--kubeconfig", paths.kubeconfig],
    ...["--config-dir", paths.configDir, "--kubernetes-dir", paths.kubernetesDir],
    ...["--tls-cert", paths.tlsCert, "--tls-key", paths.tlsKey],
    ...["--port", String(options.port ?? 0), "--listen-address", address],
    ...["--metrics-port", "0", "--metrics-address", address],
    ...OPEN_RATE_LIMITS,
    ...["--log-level", options.logLevel ?? "info"],
    ...flags,
  ];
}

/** Generates a joining node's kubelet key pair (P-256, as the bootstrapper does). */
export async function generateNodeKeys(): Promise<CryptoKeyPair> {
  return await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"]);
}

/** A DER kubelet CSR as a joining node makes it: O=system:nodes, CN=system:node:<name>, IP SANs. */
export async function nodeCsr(options: NodeCsrOptions = {}): Promise<Uint8Array<ArrayBuffer>> {
  const names = [
    ...(options.ips ?? []).map((value) => ({ type: "ip" as const, value })),
    ...(options.dnsNames ?? []).map((value) => ({ type: "dns" as const, value })),
  ];
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: options.subject ??
      [{ O: ["system:nodes"] }, { CN: [`system:node:${options.nodeName ?? "worker-1"}`] }],
    keys: options.keys ?? await generateNodeKeys(),
    signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
    extensions: names.length > 0 ? [new x509.SubjectAlternativeNameExtension(names)] : [],
  });
  return new Uint8Array(csr.rawData);
}

/**
 * Writes the cluster PKI: ca.{crt,key} from `clusterCa`, fresh front-proxy and etcd CAs, a service-account
 * key; returns the eight control-plane files' bytes by name.
 */
export async function writePki(pkiDir: string, clusterCa: TestCa): Promise<Map<string, Uint8Array>> {
  const frontProxyCa = await createTestCa("CN=front-proxy-ca");
  const etcdCa = await createTestCa("CN=etcd-ca");
  const serviceAccount = await crypto.subtle.generateKey(
    { name: "ECDSA", namedCurve: "P-256" },
    true,
    ["sign", "verify"],
  );
  const contents: Record<string, string> = {
    "ca.crt": clusterCa.certPem,
    "ca.key": clusterCa.keyPem,
    "front-proxy-ca.crt": frontProxyCa.certPem,
    "front-proxy-ca.key": frontProxyCa.keyPem,
    "etcd/ca.crt": etcdCa.certPem,
    "etcd/ca.key": etcdCa.keyPem,
    "sa.key": await privateKeyToPem(serviceAccount.privateKey),
    "sa.pub": encodePem(await crypto.subtle.exportKey("spki", serviceAccount.publicKey), "PUBLIC KEY"),
  };
  const files = new Map<string, Uint8Array>();
  for (const name of CONTROL_PLANE_FILE_NAMES) {
    const data = new TextEncoder().encode(contents[name]);
    await Deno.writeFile(`${pkiDir}/${name}`, data, { mode: name.endsWith(".key") ? 0o600 : 0o644 });
    files.set(name, data);
  }
  return files;
}

/** Two components as the bootstrapper lists them (data: URLs with their real hashes). */
export async function testComponents(): Promise<KubernetesComponent[]> {
  const component = async (content: string, installPath: string, extract: boolean) => {
    const bytes = new TextEncoder().encode(content);
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)).toHex();
    return { url: `data:;base64,${bytes.toBase64()}`, hash: `sha256:${digest}`, installPath, extract };
  };
  return [
    await component("#!/bin/sh\necho kubelet\n", "/run/state/bin/kubelet", false),
    await component("crictl archive", "/run/state/bin", true),
  ];
}

/**
 * Starts the key service process on a free port, its secrets in a new directory under `parent`, with
 * `flags` added; it restarts on that same port.
 */
export async function startKeyServiceProcess(
  secrets: { masterSecret: Uint8Array; salt: Uint8Array },
  parent: string,
  flags: string[] = [],
): Promise<KeyServiceProcess> {
  const { masterSecretPath, saltPath } = await writeSecrets(secrets, parent);
  const spawn = (port: number) =>
    startService(
      "deno",
      keyServiceArgs(
        [masterSecretPath, saltPath],
        ["--master-secret", masterSecretPath, "--salt", saltPath, "--port", String(port), ...flags],
      ),
      { readyMatch: KEY_SERVICE_LISTENING, cwd: REPO_ROOT },
    );
  // Not port 0: while the service is down, another port-0 listener could take an ephemeral port.
  const port = freePort();
  let running: RunningService | undefined = await spawn(port);
  return {
    port,
    endpoint: `127.0.0.1:${port}`,
    get process() {
      return running;
    },
    async start() {
      running ??= await spawn(port);
    },
    async stop() {
      const stopping = running;
      running = undefined;
      return await stopping?.stop();
    },
  };
}

/**
 * Starts a join service with `args` (`joinServiceCommand`, listening on
 * `hostname`, default 127.0.0.1); waits for its "listening" line.
 */
export async function joinServiceProcess(
  args: string[],
  caPem: string,
  hostname = "127.0.0.1",
): Promise<JoinServiceProcess> {
  const process = await startService("deno", args, {
    readyMatch: JOIN_SERVICE_LISTENING,
    cwd: REPO_ROOT,
    env: { ...SERVICE_ENV },
  });
  const listening = JSON.parse(process.stderrLines.find((line) => JOIN_SERVICE_LISTENING.test(line))!);
  const url = `https://${hostname}:${process.port}`;
  const connection = connectRpc({
    baseUrl: url,
    caCerts: [caPem],
    idleConnectionTimeoutMs: clientIdleTimeoutMs(args),
  });
  const client = createClient(API, connection.transport);
  let stopped: Promise<Deno.CommandStatus> | undefined;
  // A join service that dies by itself fails every later call: say why, once, where the test output shows it.
  process.status.then((status) => {
    if (stopped) return;
    console.error(
      `join service ${url} exited by itself (code ${status.code}, signal ${status.signal}); its last lines:\n${
        process.stderrLines.slice(-10).join("\n")
      }`,
    );
  });
  return {
    url,
    metricsUrl: `http://${hostname}:${listening.metricsPort}`,
    client,
    process,
    stop(signal?: Deno.Signal) {
      stopped ??= (async () => {
        connection.close();
        return await process.stop(signal);
      })();
      return stopped;
    },
  };
}

/** Runs a join service of `args` expecting it to exit (e.g. on a bad input); returns its exit code and output. */
export function runJoinServiceToExit(args: string[], env: Record<string, string> = { ...SERVICE_ENV }) {
  return runToExit("deno", args, { cwd: REPO_ROOT, env });
}

/** One audit line of the join service (a JSON log line with `"log":"audit"`). */
export interface AuditLine {
  log: "audit";
  outcome: "issued" | "rejected";
  method: string;
  peer: string;
  variant: string;
  measurementsDigest: string;
  diskUuid: string;
  role: string;
  nodeName?: string;
  keyDigest?: string;
  reportedMeasurementsDigest?: string;
  reason?: string;
  code?: string;
  error?: string;
  [field: string]: unknown;
}

/**
 * The audit lines of a join service, once every decision it has counted
 * (GetStatus) has reached its stderr: lines arrive through a pipe, after the
 * RPC's answer.
 */
export async function auditLines(service: JoinServiceProcess): Promise<AuditLine[]> {
  const { counters } = await service.client.getStatus({});
  const decisions = Number(Object.values(counters).reduce((sum, n) => sum + n, 0n));
  const read = () =>
    service.process.stderrLines.map((line) => JSON.parse(line)).filter((entry) => entry.log === "audit");
  const deadline = Date.now() + 5000;
  while (read().length < decisions && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return read();
}

/**
 * The test client's idle timeout for a join service started with `args`: below the service's own
 * `--idle-timeout`, as a client's should be (connectRpc's default, 60 s, is below the services' 120 s).
 * A client that keeps a connection the server is closing for idleness races its GOAWAY: a call sent just
 * then can end "Premature close" (the hostile-peer test runs the service with a 1 s idle timeout).
 */
function clientIdleTimeoutMs(args: string[]): number | undefined {
  const at = args.indexOf("--idle-timeout");
  const seconds = at === -1 ? NaN : Number(args[at + 1]);
  return Number.isFinite(seconds) ? Math.min(60_000, seconds * 500) : undefined;
}
