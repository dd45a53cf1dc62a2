/**
 * The join service's command line.
 *
 * @module
 */
import type { LogLevel } from "../log/logger.ts";
import {
  parseCount,
  parseEndpointFlag,
  parseFlags,
  parseHttpUrlFlag,
  parseListenAddress,
  parseLogLevelFlag,
  parsePort,
  parsePositive,
  parseSeconds,
  UsageError,
} from "../flags/flags.ts";
import {
  CONNECTION_LIMIT_OPTIONS,
  CONNECTION_LIMITS_USAGE,
  parseConnectionLimits,
} from "../flags/connection_limits.ts";
import type { ConnectionLimits } from "../rpc/limits.ts";
import {
  BROWSER_LISTENER_OPTIONS,
  type BrowserListenerFlags,
  browserListenerUsage,
  parseBrowserListener,
} from "../flags/browser_listener.ts";
import { type IpNetwork, parseCidr } from "../net/ip.ts";
import { BOOTSTRAP_TOKEN_TTL_MS } from "./bootstraptoken.ts";

/** The join service's settings. */
export interface JoinServiceFlags {
  /** The join.API port. */
  port: number;
  /** The address join.API binds. */
  listenAddress: string;
  /** The metrics port. */
  metricsPort: number;
  /** The address metrics bind. */
  metricsAddress: string;
  /** "host:port" of the key service. */
  keyServiceEndpoint: string;
  /** The attestation variant, e.g. "qemu-vtpm". */
  attestationVariant: string;
  /** Holds `attestationConfig` and `measurementSalt`. */
  configDir: string;
  /** Holds `admin.conf` and `pki/`. */
  kubernetesDir: string;
  /** "host:port" handed to nodes, or undefined to ask the metadata API. */
  apiServerEndpoint?: string;
  /** QEMU-style metadata API (GET /self) used when no endpoint is given. */
  metadataUrl?: string;
  /** Kubeconfig for the API server; undefined means the in-cluster service account. */
  kubeconfig?: string;
  /** The cluster's service network; kubelet certificates may not carry its first address (the API server's Service). */
  serviceNetwork: IpNetwork;
  /** Serving certificate file (PEM); self-signed at start when unset. */
  tlsCert?: string;
  /** Serving key file (PEM). */
  tlsKey?: string;
  /** Sustained tickets per second and burst, per peer and overall. */
  ratePerPeer: number;
  /** Largest burst per peer. */
  burstPerPeer: number;
  /** Sustained tickets per second over all peers. */
  rateGlobal: number;
  /** Largest burst over all peers. */
  burstGlobal: number;
  /** Attestation verifications running at once, and waiting at most. */
  verifyConcurrency: number;
  /** Verifications waiting at most. */
  verifyQueue: number;
  /** How long a challenge stays valid. */
  nonceLifetimeMs: number;
  /** How long a ticket's bootstrap token is valid (the API server's token cleaner deletes it then). */
  bootstrapTokenTtlMs: number;
  /** The lowest level logged. */
  logLevel: LogLevel;
  /** Connection limits of the join.API listener given on the command line. */
  limits: Partial<ConnectionLimits>;
  /** The browser listener (GetStatus only, plain HTTP), when `--browser-port` is given. */
  browser?: BrowserListenerFlags;
}

/** Usage text for `--help`. */
export const JOIN_SERVICE_USAGE =
  `Usage: join-service --attestation-variant <variant> --key-service-endpoint <host:port> [flags]

Verifies joining nodes' remote attestation and hands out their join tickets
(join.API over TLS: gRPC, gRPC-Web and Connect on one port).

Flags:
  --attestation-variant <v>        qemu-vtpm or dummy (required; dummy is insecure, for development)
  --key-service-endpoint <h:p>     key service, e.g. key-service.kube-system:9000 (required)
  --api-server-endpoint <h:p>      API server endpoint handed to nodes, e.g. 10.0.0.1:6443
  --metadata-url <url>             QEMU-style metadata API; the endpoint is <VPCIP of GET /self>:6443
                                   (one of --api-server-endpoint and --metadata-url is required)
  --kubeconfig <file>              kubeconfig for the API server (default: in-cluster service account)
  --service-cluster-ip-range <cidr>
                                   the cluster's service network, as kube-apiserver's flag (default
                                   10.96.0.0/12, kubeadm's); kubelet certificates may not carry its
                                   first address, the API server's Service
  --config-dir <dir>               attestationConfig and measurementSalt (default /var/config)
  --kubernetes-dir <dir>           admin.conf and pki/ (default /etc/kubernetes)
  --port <port>                    join.API port (default 9090)
  --listen-address <addr>          IP address to bind (default 0.0.0.0)
  --metrics-port <port>            Prometheus /metrics and /healthz port (default 9091)
  --metrics-address <addr>         IP address for metrics (default 0.0.0.0)
  --tls-cert <file>, --tls-key <file>
                                   serving certificate (default: self-signed, generated at start)
  --rate-per-peer <n>, --burst-per-peer <n>
                                   tickets per second per peer address (default 2, burst 10)
  --rate-global <n>, --burst-global <n>
                                   tickets per second overall (default 200, burst 400)
  --verify-concurrency <n>         attestation verifications at once (default 16)
  --verify-queue <n>               verifications waiting at most (default 512)
  --nonce-lifetime <seconds>       how long a challenge stays valid (default 120); only at the
                                   replica that issued it, and only until it restarts
  --bootstrap-token-ttl <seconds>  how long a ticket's kubeadm bootstrap token is valid (default 900,
                                   the original's 15 minutes; 10 to 86400): a token whose ticket was
                                   lost lives this long at most
  --log-level <level>              debug, info, warn or error (default info)
  --help                           show this help

The browser port (for the browser console's dashboard):
${browserListenerUsage("join.API/GetStatus")}
Connection limits of the join.API port:
${CONNECTION_LIMITS_USAGE}`;

/**
 * Parses the command line. Returns "help" when `--help` is given.
 *
 * @throws {UsageError} for a bad command line.
 */
export function parseJoinServiceFlags(args: string[]): JoinServiceFlags | "help" {
  const values = parseFlags(args, {
    "attestation-variant": { type: "string" },
    "key-service-endpoint": { type: "string" },
    "api-server-endpoint": { type: "string" },
    "metadata-url": { type: "string" },
    kubeconfig: { type: "string" },
    "service-cluster-ip-range": { type: "string", default: "10.96.0.0/12" },
    "config-dir": { type: "string", default: "/var/config" },
    "kubernetes-dir": { type: "string", default: "/etc/kubernetes" },
    port: { type: "string", default: "9090" },
    "listen-address": { type: "string", default: "0.0.0.0" },
    "metrics-port": { type: "string", default: "9091" },
    "metrics-address": { type: "string", default: "0.0.0.0" },
    "tls-cert": { type: "string" },
    "tls-key": { type: "string" },
    "rate-per-peer": { type: "string", default: "2" },
    "burst-per-peer": { type: "string", default: "10" },
    "rate-global": { type: "string", default: "200" },
    "burst-global": { type: "string", default: "400" },
    "verify-concurrency": { type: "string", default: "16" },
    "verify-queue": { type: "string", default: "512" },
    "nonce-lifetime": { type: "string", default: "120" },
    "bootstrap-token-ttl": { type: "string", default: String(BOOTSTRAP_TOKEN_TTL_MS / 1000) },
    "log-level": { type: "string", default: "info" },
    help: { type: "boolean", default: false },
    ...CONNECTION_LIMIT_OPTIONS,
    ...BROWSER_LISTENER_OPTIONS,
  }, "join service");
  if (values.help) return "help";

  const variant = values["attestation-variant"];
  if (!variant) {
    throw new UsageError("--attestation-variant is required (qemu-vtpm, or dummy for development)");
  }
  const keyService = values["key-service-endpoint"];
  if (!keyService) {
    throw new UsageError("--key-service-endpoint is required, e.g. key-service.kube-system:9000");
  }
  const endpoint = values["api-server-endpoint"];
  if (!endpoint && !values["metadata-url"]) {
    throw new UsageError("one of --api-server-endpoint and --metadata-url is required");
  }
  if (endpoint && values["metadata-url"]) {
    throw new UsageError("give only one of --api-server-endpoint and --metadata-url");
  }
  if (endpoint) parseEndpointFlag(endpoint, "--api-server-endpoint", "10.0.0.1:6443");
  const metadataUrl = values["metadata-url"] === undefined
    ? undefined
    : parseHttpUrlFlag(values["metadata-url"], "--metadata-url");
  const serviceNetwork = parseCidr(values["service-cluster-ip-range"]);
  if (!serviceNetwork) {
    throw new UsageError(
      `invalid --service-cluster-ip-range "${
        values["service-cluster-ip-range"]
      }": want a CIDR like 10.96.0.0/12`,
    );
  }
  for (const [given, missing] of [["tls-cert", "tls-key"], ["tls-key", "tls-cert"]] as const) {
    if (values[given] && !values[missing]) {
      throw new UsageError(
        `--${given} needs --${missing} (give both, or neither for a self-signed certificate)`,
      );
    }
  }

  const logLevel = parseLogLevelFlag(values["log-level"]);
  const listenAddress = parseListenAddress(values["listen-address"], "--listen-address");
  return {
    port: parsePort(values.port),
    listenAddress,
    metricsPort: parsePort(values["metrics-port"], "--metrics-port"),
    metricsAddress: parseListenAddress(values["metrics-address"], "--metrics-address"),
    keyServiceEndpoint: parseEndpointFlag(
      keyService,
      "--key-service-endpoint",
      "key-service.kube-system:9000",
    ),
    attestationVariant: variant,
    configDir: values["config-dir"],
    kubernetesDir: values["kubernetes-dir"],
    apiServerEndpoint: endpoint,
    metadataUrl,
    kubeconfig: values.kubeconfig,
    serviceNetwork,
    tlsCert: values["tls-cert"],
    tlsKey: values["tls-key"],
    ratePerPeer: parsePositive(values["rate-per-peer"], "--rate-per-peer"),
    burstPerPeer: parseCount(values["burst-per-peer"], "--burst-per-peer"),
    rateGlobal: parsePositive(values["rate-global"], "--rate-global"),
    burstGlobal: parseCount(values["burst-global"], "--burst-global"),
    verifyConcurrency: parseCount(values["verify-concurrency"], "--verify-concurrency"),
    verifyQueue: parseCount(values["verify-queue"], "--verify-queue"),
    nonceLifetimeMs: nonceLifetimeMs(values["nonce-lifetime"]),
    bootstrapTokenTtlMs: secondsInRange(values["bootstrap-token-ttl"], "--bootstrap-token-ttl", 10, 86_400),
    logLevel,
    limits: parseConnectionLimits(values),
    browser: parseBrowserListener(values, listenAddress),
  };
}

function nonceLifetimeMs(value: string): number {
  return secondsInRange(value, "--nonce-lifetime", 1, 3600);
}

/** A number of seconds from `min` to `max`, as milliseconds. */
function secondsInRange(value: string, flag: string, min: number, max: number): number {
  const ms = parseSeconds(value, flag);
  if (ms < min * 1000 || ms > max * 1000) {
    throw new UsageError(`invalid ${flag} "${value}": want ${min} to ${max} seconds`);
  }
  return ms;
}
