/**
 * The settings of `kubeadm init` (InitConfiguration, ClusterConfiguration,
 * KubeletConfiguration) and `kubeadm join` (JoinConfiguration) as kubeadm
 * v1beta3 reads them: defaults applied, and refused with kubeadm's field
 * errors where kubeadm's validation refuses them (exit code 3).
 *
 * Where real kubeadm would look something up that the simulator cannot
 * (the host name as node name, the default route's address, the
 * "stable-1" release label on the internet), the simulator requires the
 * value and says why.
 *
 * Bootstrap tokens and certificate keys are credentials: errors show them
 * as `<redacted>`, and {@linkcode secretsIn} lists them for redacting
 * output and records.
 *
 * @module
 */
import { isIP } from "node:net";
import { BOOTSTRAP_TOKEN_PATTERN, REDACTED } from "../kubernetes/bootstrap_token.ts";
import { type Documents, type Json, KUBEADM_API_VERSION, KUBELET_API_VERSION } from "./documents.ts";
import { KubeadmSimError, validationError } from "./errors.ts";
import { FieldReader } from "./fields.ts";

/** kubeadm's default API server port. */
export const DEFAULT_BIND_PORT = 6443;

/** A host and optional port, as in `controlPlaneEndpoint` or `apiServerEndpoint`. */
export interface HostPort {
  /** An IP address (IPv6 without brackets) or DNS name. */
  host: string;
  /** The port, when given. */
  port?: number;
}

/** `nodeRegistration`. */
export interface NodeRegistration {
  /** The node name. */
  name: string;
  /** The container runtime's socket (`unix://` URL or path). */
  criSocket: string;
  /** Extra kubelet flags (e.g. node-ip, provider-id). */
  kubeletExtraArgs: Record<string, string>;
  /** Preflight checks that do not fail ("all" for every one). */
  ignorePreflightErrors: string[];
}

/** ClusterConfiguration, defaulted. */
export interface ClusterSettings {
  /** Normalized, e.g. "v1.27.4". */
  kubernetesVersion: string;
  /** The cluster's name (default "kubernetes"). */
  clusterName: string;
  /** The shared API server endpoint, when set. */
  controlPlaneEndpoint?: HostPort;
  /** Extra subject alternative names of the API server's certificate. */
  certSANs: string[];
  /** Extra kube-apiserver flags. */
  apiServerExtraArgs: Record<string, string>;
  /** Extra kube-controller-manager flags. */
  controllerManagerExtraArgs: Record<string, string>;
  /** Extra kube-scheduler flags. */
  schedulerExtraArgs: Record<string, string>;
  /** The Service network (default 10.96.0.0/12). */
  serviceSubnet: string;
  /** The Pod network, when set. */
  podSubnet?: string;
  /** The cluster DNS domain (default cluster.local). */
  dnsDomain: string;
  /** Node path of the PKI. */
  certificatesDir: string;
  /** How long kubeadm waits for the control plane (default 4 min). */
  timeoutForControlPlaneMs: number;
  /** Where control-plane images come from (default registry.k8s.io). */
  imageRepository: string;
  /** The document, defaulted, as kubeadm uploads it to the kubeadm-config ConfigMap. */
  document: Json;
}

/** A bootstrap token of InitConfiguration. `token` is a credential. */
export interface BootstrapTokenSettings {
  /** Absent: generated, as kubeadm does. */
  token?: string;
  /** Lifetime (default 24 h). */
  ttlMs: number;
  /** What the token may do (default signing, authentication). */
  usages: string[];
  /** Extra groups (default kubeadm's node-token group). */
  groups: string[];
  /** Free text. */
  description?: string;
}

/** `kubeadm init` settings. */
export interface InitSettings {
  /** `nodeRegistration`. */
  node: NodeRegistration;
  /** The node's API server address (localAPIEndpoint, else the node-ip kubelet flag). */
  advertiseAddress: string;
  /** The API server port (default 6443). */
  bindPort: number;
  /** The tokens to create (one generated when none is given). */
  bootstrapTokens: BootstrapTokenSettings[];
  /** `skipPhases` of the document. */
  skipPhases: string[];
  /** The ClusterConfiguration. */
  cluster: ClusterSettings;
  /** The KubeletConfiguration document (apiVersion and kind only when the file has none). */
  kubelet: Json;
}

/** `kubeadm join` settings. */
export interface JoinSettings {
  /** `nodeRegistration`. */
  node: NodeRegistration;
  /** Node path of the CA certificate kubeadm writes. */
  caCertPath: string;
  /** Token discovery. */
  discovery: {
    apiServerEndpoint: HostPort & { port: number };
    /** A credential. */
    token: string;
    caCertHashes: string[];
    unsafeSkipCaVerification: boolean;
    /** A credential; the discovery token when not set. */
    tlsBootstrapToken: string;
    timeoutMs: number;
  };
  /** Present for a control-plane join. */
  controlPlane?: { advertiseAddress: string; bindPort: number };
  /** `skipPhases` of the document. */
  skipPhases: string[];
  /** The KubeletConfiguration document (apiVersion and kind only when the file has none). */
  kubelet: Json;
}

const DEFAULT_CRI_SOCKET = "unix:///var/run/containerd/containerd.sock";
const DEFAULT_TOKEN_TTL_MS = 24 * 3600_000;
const DEFAULT_TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token";
const dns1123Label = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const dns1123Subdomain = new RegExp(`^${dns1123Label}(\\.${dns1123Label})*$`);
const wildcardSubdomain = new RegExp(`^\\*\\.${dns1123Label}(\\.${dns1123Label})*$`);
const subdomainRule =
  "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', " +
  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is " +
  "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/** Every credential the documents hold (token fields, certificate keys), for redaction; even malformed ones. */
export function secretsIn(documents: Documents): string[] {
  const secrets: string[] = [];
  const add = (value: unknown) => {
    if (typeof value === "string" && value !== "") secrets.push(value);
  };
  for (const document of documents.all) {
    const discovery = document.discovery as Json | undefined;
    add((discovery?.bootstrapToken as Json | undefined)?.token);
    add(discovery?.tlsBootstrapToken);
    add(document.certificateKey);
    const tokens = document.bootstrapTokens;
    if (Array.isArray(tokens)) { for (const token of tokens) add((token as Json | null)?.token); }
  }
  return secrets;
}

/** The documents with every credential replaced by `<redacted>` (see {@linkcode secretsIn}). */
export function redactDocuments(documents: Documents): Json[] {
  const secrets = new Set(secretsIn(documents));
  const redact = (value: unknown): unknown => {
    if (typeof value === "string") return secrets.has(value) ? REDACTED : value;
    if (Array.isArray(value)) return value.map(redact);
    if (typeof value === "object" && value !== null) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redact(v)]));
    }
    return value;
  };
  return documents.all.map((document) => redact(document) as Json);
}

/** The init settings of a configuration file's documents. */
export function initSettings(documents: Documents): InitSettings {
  const init = documents.byKind.InitConfiguration ??
    { apiVersion: KUBEADM_API_VERSION, kind: "InitConfiguration" };
  const errors: string[] = [];
  const read = new FieldReader("InitConfiguration");
  const node = nodeRegistration(read, read.object(init, "nodeRegistration", "nodeRegistration"), errors);
  const endpoint = read.object(init, "localAPIEndpoint", "localAPIEndpoint");
  const bindPort = checkPort(
    read.int(endpoint, "bindPort", "localAPIEndpoint.bindPort") ?? DEFAULT_BIND_PORT,
    "localAPIEndpoint.bindPort",
    errors,
  );
  let advertiseAddress = read.string(endpoint, "advertiseAddress", "localAPIEndpoint.advertiseAddress") ?? "";
  if (advertiseAddress !== "") {
    checkIp(advertiseAddress, "localAPIEndpoint.advertiseAddress", errors);
  } else {
    advertiseAddress = node.kubeletExtraArgs["node-ip"] ?? "";
  }
  const bootstrapTokens = read.objects(init, "bootstrapTokens", "bootstrapTokens").map((entry, i) => {
    const path = `bootstrapTokens[${i}]`;
    const token = read.string(entry, "token", `${path}.token`);
    if (token !== undefined && !BOOTSTRAP_TOKEN_PATTERN.test(token)) {
      errors.push(invalidToken(`${path}.token`, token));
    }
    const settings: BootstrapTokenSettings = {
      token,
      ttlMs: read.duration(entry, "ttl", `${path}.ttl`) ?? DEFAULT_TOKEN_TTL_MS,
      usages: read.strings(entry, "usages", `${path}.usages`),
      groups: read.strings(entry, "groups", `${path}.groups`),
      description: read.string(entry, "description", `${path}.description`),
    };
    if (settings.usages.length === 0) settings.usages = ["signing", "authentication"];
    if (settings.groups.length === 0) settings.groups = [DEFAULT_TOKEN_GROUP];
    return settings;
  });
  const cluster = clusterSettings(documents.byKind.ClusterConfiguration, errors);
  if (errors.length > 0) throw validationError(errors);
  requireNodeName(node);
  if (advertiseAddress === "") {
    throw new KubeadmSimError(
      "unsupported",
      "kubeadm-sim: cannot find the node's address (real kubeadm takes the default route's): " +
        "set localAPIEndpoint.advertiseAddress or nodeRegistration.kubeletExtraArgs.node-ip",
    );
  }
  return {
    node,
    advertiseAddress,
    bindPort,
    bootstrapTokens: bootstrapTokens.length > 0 ? bootstrapTokens : [{
      ttlMs: DEFAULT_TOKEN_TTL_MS,
      usages: ["signing", "authentication"],
      groups: [DEFAULT_TOKEN_GROUP],
    }],
    skipPhases: read.strings(init, "skipPhases", "skipPhases"),
    cluster,
    kubelet: documents.byKind.KubeletConfiguration ??
      { apiVersion: KUBELET_API_VERSION, kind: "KubeletConfiguration" },
  };
}

/** The cluster settings alone (e.g. for `kubeconfig user`, which needs no node). */
export function clusterSettingsOf(documents: Documents): ClusterSettings {
  const errors: string[] = [];
  const cluster = clusterSettings(documents.byKind.ClusterConfiguration, errors);
  if (errors.length > 0) throw validationError(errors);
  return cluster;
}

function clusterSettings(document: Json | undefined, errors: string[]): ClusterSettings {
  const config = document ?? { apiVersion: KUBEADM_API_VERSION, kind: "ClusterConfiguration" };
  const read = new FieldReader("ClusterConfiguration");
  const apiServer = read.object(config, "apiServer", "apiServer");
  const networking = read.object(config, "networking", "networking");
  const versionText = read.string(config, "kubernetesVersion", "kubernetesVersion") ?? "";
  const kubernetesVersion = normalizeVersion(versionText);

  let controlPlaneEndpoint: HostPort | undefined;
  const endpointText = read.string(config, "controlPlaneEndpoint", "controlPlaneEndpoint") ?? "";
  if (endpointText !== "") {
    controlPlaneEndpoint = parseHostPort(endpointText, false);
    if (!controlPlaneEndpoint) {
      errors.push(
        `controlPlaneEndpoint: Invalid value: "${endpointText}": must be a host or host:port with a valid port`,
      );
    }
  }
  const certSANs = read.strings(apiServer, "certSANs", "apiServer.certSANs").filter((san, i) => {
    const valid = isIP(san) !== 0 || dns1123Subdomain.test(san) || wildcardSubdomain.test(san);
    if (!valid) {
      errors.push(
        `apiServer.certSANs[${i}]: Invalid value: "${san}": altname is not a valid IP address, DNS label or a DNS label with subdomain wildcards`,
      );
    }
    return valid;
  });
  const serviceSubnet = read.string(networking, "serviceSubnet", "networking.serviceSubnet") ??
    "10.96.0.0/12";
  if (!/^\d+\.\d+\.\d+\.\d+\/\d+$/.test(serviceSubnet) || isIP(serviceSubnet.split("/")[0]) !== 4) {
    errors.push(`networking.serviceSubnet: Invalid value: "${serviceSubnet}": couldn't parse subnet`);
  }
  const dnsDomain = read.string(networking, "dnsDomain", "networking.dnsDomain") ?? "cluster.local";
  const certificatesDir = read.string(config, "certificatesDir", "certificatesDir") ?? "/etc/kubernetes/pki";
  if (!certificatesDir.startsWith("/")) {
    errors.push(`certificatesDir: Invalid value: "${certificatesDir}": path must be absolute`);
  }
  const settings: ClusterSettings = {
    kubernetesVersion,
    clusterName: read.string(config, "clusterName", "clusterName") || "kubernetes",
    controlPlaneEndpoint,
    certSANs,
    apiServerExtraArgs: read.stringMap(apiServer, "extraArgs", "apiServer.extraArgs"),
    controllerManagerExtraArgs: read.stringMap(
      read.object(config, "controllerManager", "controllerManager"),
      "extraArgs",
      "controllerManager.extraArgs",
    ),
    schedulerExtraArgs: read.stringMap(
      read.object(config, "scheduler", "scheduler"),
      "extraArgs",
      "scheduler.extraArgs",
    ),
    serviceSubnet,
    podSubnet: read.string(networking, "podSubnet", "networking.podSubnet"),
    dnsDomain,
    certificatesDir,
    timeoutForControlPlaneMs:
      read.duration(apiServer, "timeoutForControlPlane", "apiServer.timeoutForControlPlane") ??
        4 * 60_000,
    imageRepository: read.string(config, "imageRepository", "imageRepository") || "registry.k8s.io",
    document: config,
  };
  settings.document = {
    ...config,
    apiVersion: KUBEADM_API_VERSION,
    kind: "ClusterConfiguration",
    kubernetesVersion,
    clusterName: settings.clusterName,
    certificatesDir,
    imageRepository: settings.imageRepository,
    networking: { ...networking, serviceSubnet, dnsDomain },
  };
  return settings;
}

/** The join settings of a configuration file's documents. */
export function joinSettings(documents: Documents): JoinSettings {
  const join = documents.byKind.JoinConfiguration;
  if (!join) throw new KubeadmSimError("config", "no JoinConfiguration kind was found in the YAML file");
  const errors: string[] = [];
  const read = new FieldReader("JoinConfiguration");
  const node = nodeRegistration(read, read.object(join, "nodeRegistration", "nodeRegistration"), errors);
  const caCertPath = read.string(join, "caCertPath", "caCertPath") ?? "/etc/kubernetes/pki/ca.crt";
  if (!caCertPath.startsWith("/")) {
    errors.push(
      `caCertPath: Invalid value: "${caCertPath}": the ca certificate path must be an absolute path`,
    );
  }

  const discovery = read.object(join, "discovery", "discovery");
  const tokenDiscovery = discovery.bootstrapToken === undefined || discovery.bootstrapToken === null
    ? undefined
    : read.object(discovery, "bootstrapToken", "discovery.bootstrapToken");
  const fileDiscovery = discovery.file !== undefined && discovery.file !== null;
  if (!tokenDiscovery && !fileDiscovery) {
    errors.push(`discovery: Invalid value: "": bootstrapToken or file must be set`);
  }
  if (tokenDiscovery && fileDiscovery) {
    errors.push(`discovery: Invalid value: "": bootstrapToken and file cannot both be set`);
  }
  const token = tokenDiscovery
    ? read.string(tokenDiscovery, "token", "discovery.bootstrapToken.token") ?? ""
    : "";
  const caCertHashes = tokenDiscovery
    ? read.strings(tokenDiscovery, "caCertHashes", "discovery.bootstrapToken.caCertHashes")
    : [];
  const unsafeSkipCaVerification = tokenDiscovery
    ? read.bool(
      tokenDiscovery,
      "unsafeSkipCAVerification",
      "discovery.bootstrapToken.unsafeSkipCAVerification",
    ) ?? false
    : false;
  const endpointText = tokenDiscovery
    ? read.string(tokenDiscovery, "apiServerEndpoint", "discovery.bootstrapToken.apiServerEndpoint") ?? ""
    : "";
  let apiServerEndpoint: (HostPort & { port: number }) | undefined;
  if (tokenDiscovery) {
    if (caCertHashes.length === 0 && !unsafeSkipCaVerification) {
      errors.push(
        `discovery.bootstrapToken: Invalid value: "": using token-based discovery without caCertHashes can be unsafe. ` +
          "Set unsafeSkipCAVerification as true in your kubeadm config file or pass " +
          "--discovery-token-unsafe-skip-ca-verification flag to continue",
      );
    }
    if (!BOOTSTRAP_TOKEN_PATTERN.test(token)) {
      errors.push(invalidToken("discovery.bootstrapToken.token", token));
    }
    const parsed = parseHostPort(endpointText, true);
    if (parsed?.port === undefined) {
      errors.push(
        `discovery.bootstrapToken.apiServerEndpoints: Invalid value: "${endpointText}": ${
          splitHostPortError(endpointText)
        }`,
      );
    } else {
      apiServerEndpoint = { host: parsed.host, port: parsed.port };
    }
  }
  const tlsBootstrapToken = read.string(discovery, "tlsBootstrapToken", "discovery.tlsBootstrapToken") ||
    token;
  if (tlsBootstrapToken !== token && !BOOTSTRAP_TOKEN_PATTERN.test(tlsBootstrapToken)) {
    errors.push(invalidToken("discovery.tlsBootstrapToken", tlsBootstrapToken));
  }

  let controlPlane: JoinSettings["controlPlane"];
  if (join.controlPlane !== undefined && join.controlPlane !== null) {
    const endpoint = read.object(
      read.object(join, "controlPlane", "controlPlane"),
      "localAPIEndpoint",
      "controlPlane.localAPIEndpoint",
    );
    const advertiseAddress =
      read.string(endpoint, "advertiseAddress", "controlPlane.localAPIEndpoint.advertiseAddress") ??
        node.kubeletExtraArgs["node-ip"] ?? "";
    checkIp(advertiseAddress, "controlPlane.localAPIEndpoint.advertiseAddress", errors);
    const bindPort = checkPort(
      read.int(endpoint, "bindPort", "controlPlane.localAPIEndpoint.bindPort") ?? DEFAULT_BIND_PORT,
      "controlPlane.localAPIEndpoint.bindPort",
      errors,
    );
    controlPlane = { advertiseAddress, bindPort };
  }
  const timeoutMs = read.duration(discovery, "timeout", "discovery.timeout") ?? 5 * 60_000;
  if (errors.length > 0) throw validationError(errors);
  if (fileDiscovery) {
    throw new KubeadmSimError(
      "unsupported",
      "kubeadm-sim: file-based discovery (discovery.file) is not simulated",
    );
  }
  requireNodeName(node);
  return {
    node,
    caCertPath,
    /** Token discovery. */
    discovery: {
      apiServerEndpoint: apiServerEndpoint!,
      token,
      caCertHashes,
      unsafeSkipCaVerification,
      tlsBootstrapToken,
      timeoutMs,
    },
    controlPlane,
    skipPhases: read.strings(join, "skipPhases", "skipPhases"),
    kubelet: documents.byKind.KubeletConfiguration ??
      { apiVersion: KUBELET_API_VERSION, kind: "KubeletConfiguration" },
  };
}

function nodeRegistration(read: FieldReader, registration: Json, errors: string[]): NodeRegistration {
  const name = read.string(registration, "name", "nodeRegistration.name") ?? "";
  if (name !== "" && (name.length > 253 || !dns1123Subdomain.test(name))) {
    errors.push(`nodeRegistration.name: Invalid value: "${name}": ${subdomainRule}`);
  }
  const criSocket = read.string(registration, "criSocket", "nodeRegistration.criSocket") ||
    DEFAULT_CRI_SOCKET;
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//.exec(criSocket)?.[1];
  if (scheme !== undefined && scheme !== "unix") {
    errors.push(
      `nodeRegistration.criSocket: Invalid value: "${criSocket}": URL scheme "${scheme}" is not supported`,
    );
  } else if (scheme === undefined && !criSocket.startsWith("/")) {
    errors.push(`nodeRegistration.criSocket: Invalid value: "${criSocket}": path is not absolute`);
  }
  return {
    name,
    criSocket,
    kubeletExtraArgs: read.stringMap(registration, "kubeletExtraArgs", "nodeRegistration.kubeletExtraArgs"),
    ignorePreflightErrors: read.strings(
      registration,
      "ignorePreflightErrors",
      "nodeRegistration.ignorePreflightErrors",
    ),
  };
}

/** Real kubeadm names an unnamed node after the host; the simulator runs on someone else's host. */
function requireNodeName(node: NodeRegistration): void {
  if (node.name === "") {
    throw new KubeadmSimError(
      "unsupported",
      "kubeadm-sim: nodeRegistration.name is required (real kubeadm would use the host name, which is not the node's here)",
    );
  }
}

function invalidToken(path: string, token: string): string {
  return `${path}: Invalid value: "${token === "" ? "" : REDACTED}": the bootstrap token is invalid`;
}

function checkIp(value: string, path: string, errors: string[]): void {
  if (isIP(value) === 0) {
    errors.push(
      `${path}: Invalid value: "${value}": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`,
    );
  }
}

function checkPort(port: number, path: string, errors: string[]): number {
  if (!(port >= 1 && port <= 65535)) {
    errors.push(`${path}: Invalid value: ${port}: must be between 1 and 65535, inclusive`);
  }
  return port;
}

/** "v1.27.4" from "1.27.4" or "v1.27.4"; a release label or nonsense is an error. */
function normalizeVersion(text: string): string {
  if (text === "") {
    throw new KubeadmSimError(
      "unsupported",
      'kubeadm-sim: kubernetesVersion is required (real kubeadm would look up the "stable-1" release on the internet)',
    );
  }
  const match = /^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?)$/.exec(text);
  if (match) return `v${match[1]}`;
  if (/^(stable|latest|ci)(-\d+(\.\d+)?)?$/.test(text)) {
    throw new KubeadmSimError(
      "unsupported",
      `kubeadm-sim: kubernetesVersion "${text}" is a release label, which real kubeadm looks up on the internet; ` +
        "give an exact version, e.g. v1.27.4",
    );
  }
  throw new KubeadmSimError(
    "invalid",
    `couldn't parse Kubernetes version "${text}": could not parse "${text}" as version`,
  );
}

/**
 * "host", "host:port", "[v6]:port" or a bare IPv6 address; undefined when
 * the host is not an IP address or DNS name or the port is not 1–65535.
 * With `requirePort`, a value without a port is undefined too.
 */
export function parseHostPort(text: string, requirePort: boolean): HostPort | undefined {
  let host = text;
  let port: number | undefined;
  const withPort = /^(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/.exec(text);
  if (withPort) {
    host = withPort[1].replace(/^\[(.*)\]$/, "$1");
    port = Number(withPort[2]);
    if (!(port >= 1 && port <= 65535)) return undefined;
  } else if (requirePort) {
    return undefined;
  }
  if (isIP(host) === 0 && !(dns1123Subdomain.test(host) && !/^[\d.]+$/.test(host))) return undefined;
  return port === undefined ? { host } : { host, port };
}

/** Go's net.SplitHostPort error for a value without a usable port. */
function splitHostPortError(text: string): string {
  if (!text.includes(":")) return "missing port in address";
  if (!text.startsWith("[") && text.split(":").length > 2) return "too many colons in address";
  return "address is not host:port";
}
