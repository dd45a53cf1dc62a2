/**
 * The join service: verifies joining nodes' remote attestation and hands out
 * their join tickets (`join.API` over TLS; gRPC, gRPC-Web and Connect on one
 * port), with Prometheus metrics and `/healthz` on a second port, and with
 * `--browser-port` a third that serves `join.API/GetStatus` alone to web
 * pages (plain HTTP, CORS for `--cors-allow-origin`; `src/rpc/browser_server.ts`).
 *
 * Startup checks every input before listening, and a missing or malformed
 * one ends the process with status 1 and one log line naming it: the
 * attestation config (`<config-dir>/attestationConfig`, reloaded on change
 * afterwards), the measurement salt (`<config-dir>/measurementSalt`), the
 * kubeconfig (or in-cluster service account), `<kubernetes-dir>/admin.conf`,
 * the cluster CA in `<kubernetes-dir>/pki/`, and the serving certificate
 * and key (`--tls-cert`, `--tls-key`: parsed, and the key must be the
 * certificate's). A bad command line ends it
 * with status 2. The key service need not be up at start: calls that need it
 * fail with Unavailable until it is, and the service recovers by itself.
 * SIGTERM or SIGINT stops accepting connections, lets calls in flight
 * finish, and exits 0.
 *
 * Permissions: the `join-service` permission set of deno.json (read
 * `/var/config`, `/etc/kubernetes` and the service-account directory; net;
 * the in-cluster environment variables and `DENO_TLS_CA_STORE`, which the
 * service wants empty: see `SERVICE_ENV` in src/os/service_runtime.ts, and
 * a warning says when it is not):
 *
 * ```sh
 * deno task join-service --attestation-variant qemu-vtpm \
 *   --key-service-endpoint key-service.kube-system:9000 --api-server-endpoint 10.0.0.1:6443
 * ```
 *
 * Moving the inputs elsewhere needs an `--allow-read` naming all of them,
 * given to `deno run` (Deno replaces the set's read list with it):
 *
 * ```sh
 * deno run -P=join-service --allow-read=/srv/join src/joinservice/main.ts --config-dir /srv/join/config \
 *   --kubernetes-dir /srv/join/kubernetes --kubeconfig /srv/join/admin.conf ...
 * ```
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { knownVariants } from "../attestation/registry.ts";
import { AttestationConfigWatcher } from "../attestation/watcher.ts";
import { systemClock } from "../clock.ts";
import { commandLine } from "../flags/flags.ts";
import { createKeyServiceClient } from "../keyservice/client.ts";
import { KubernetesClient } from "../kubernetes/client.ts";
import { inClusterConfig } from "../kubernetes/in_cluster.ts";
import { loadKubeconfig } from "../kubernetes/kubeconfig.ts";
import { WorkPool } from "../limits/pool.ts";
import { PeerRateLimiter, TokenBucket } from "../limits/ratelimiter.ts";
import { createLogger, type Logger } from "../log/logger.ts";
import { MetricsRegistry, serveMetrics } from "../metrics/registry.ts";
import { serveBrowserRpc } from "../rpc/browser_server.ts";
import { type RpcServer, serveRpc } from "../rpc/server.ts";
import { terminationSignal } from "../rpc/signals.ts";
import { readSecretFile } from "../secrets/secret_file.ts";
import { createSelfSignedCertificate } from "../x509/selfsigned.ts";
import { readTlsKeyPair } from "../x509/tls_key_pair.ts";
import { API } from "../gen/join/join_pb.ts";
import { auditLog } from "./audit.ts";
import { bootstrapTokens } from "./bootstraptoken.ts";
import { discoveryHashSource } from "./cahash.ts";
import { componentsSource } from "./components.ts";
import { controlPlaneFilesSource } from "./controlplanefiles.ts";
import type { JoinServiceMetrics } from "./dependencies.ts";
import { apiServerEndpointSource } from "./endpoint.ts";
import { createAttestedExchange } from "./exchange.ts";
import { JOIN_SERVICE_USAGE, type JoinServiceFlags, parseJoinServiceFlags } from "./flags.ts";
import { joiningNodes } from "./joiningnodes.ts";
import { keySource } from "./keysource.ts";
import { kubeletSigner } from "./kubeletca.ts";
import { JoinService, TICKET_METHODS } from "./service.ts";
import { sshHostCertifier } from "./sshca.ts";

const EXIT_FAILURE = 1;
/** Largest request message accepted: evidence (64 KiB cap) plus a CSR fit comfortably. */
const READ_MAX_BYTES = 256 * 1024;
/** Fewest bytes of measurement salt accepted. */
const MEASUREMENT_SALT_MIN_LENGTH = 32;

/** Runs the join service with command-line `args`; resolves to the exit status. */
export async function main(args: string[]): Promise<number> {
  const flags = commandLine(args, {
    component: "join-service",
    usage: JOIN_SERVICE_USAGE,
    parse: parseJoinServiceFlags,
  });
  if (typeof flags === "number") return flags;

  const logger = createLogger({ level: flags.logLevel, fields: { component: "join-service" } });
  // Its launcher, task and manifest leave Deno's root store empty (SERVICE_ENV, src/os/service_runtime.ts).
  if (Deno.env.get("DENO_TLS_CA_STORE") !== "") {
    logger.warn(
      "Deno's root certificates are trusted besides the API server's CA: start the service with " +
        "DENO_TLS_CA_STORE set to nothing, as its launcher does",
    );
  }
  const stopSignal = terminationSignal();
  let running: Running;
  try {
    running = await start(flags, logger);
  } catch (err) {
    const message = errorMessage(err);
    logger.error(`cannot start: ${message.split("\n")[0]}`);
    return EXIT_FAILURE;
  }
  logger.info("listening", {
    address: flags.listenAddress,
    port: running.port,
    metricsPort: running.metricsPort,
    ...(running.browserPort === undefined ? {} : {
      browserAddress: flags.browser?.address,
      browserPort: running.browserPort,
      corsAllowOrigins: flags.browser?.allowedOrigins,
    }),
    variant: flags.attestationVariant,
  });

  const signal = await stopSignal;
  logger.info("shutting down", { signal });
  await running.stop();
  logger.info("stopped");
  return 0;
}

interface Running {
  port: number;
  metricsPort: number;
  /** The browser listener's port, when it runs. */
  browserPort?: number;
  stop(): Promise<void>;
}

/** Checks every input, wires the service and starts listening. */
async function start(flags: JoinServiceFlags, logger: Logger): Promise<Running> {
  if (!knownVariants().includes(flags.attestationVariant)) {
    throw new Error(
      `unknown attestation variant "${flags.attestationVariant}"; known: ${knownVariants().join(", ")}`,
    );
  }
  const clock = systemClock;
  const measurementSalt = await readSecretFile(`${flags.configDir}/measurementSalt`, {
    description: "measurement salt",
    minLength: MEASUREMENT_SALT_MIN_LENGTH,
  });
  const tls = flags.tlsCert
    ? await readTlsKeyPair({
      certFile: flags.tlsCert,
      keyFile: flags.tlsKey!,
      certName: "--tls-cert",
      keyName: "--tls-key",
    })
    : createSelfSignedCertificate({ commonName: "join-service", dnsNames: ["localhost"] });
  const connection = flags.kubeconfig ? await loadKubeconfig(flags.kubeconfig) : await inClusterConfig();
  const client = new KubernetesClient(connection, { logger });
  const pkiDir = `${flags.kubernetesDir}/pki`;
  const apiServerEndpoint = apiServerEndpointSource(
    flags.apiServerEndpoint ? { fixed: flags.apiServerEndpoint } : { metadataUrl: flags.metadataUrl! },
  );
  const kubeletCa = kubeletSigner({ pkiDir, clock, serviceNetwork: flags.serviceNetwork, apiServerEndpoint });
  const discoveryHash = discoveryHashSource({ adminConf: `${flags.kubernetesDir}/admin.conf`, clock });
  // Fail at start, not on the first node, when the control plane's files are unusable.
  await discoveryHash.current({});
  await kubeletCa.checkCa();

  const keyService = createKeyServiceClient({ endpoint: flags.keyServiceEndpoint });
  const keys = keySource(keyService);
  const watcher = await AttestationConfigWatcher.start({
    path: `${flags.configDir}/attestationConfig`,
    variant: flags.attestationVariant,
    logger,
  });

  const registry = new MetricsRegistry();
  const metrics: JoinServiceMetrics = {
    decisions: registry.counter(
      "join_ticket_decisions_total",
      "Ticket decisions by method, outcome and reason.",
    ),
    verificationSeconds: registry.histogram(
      "join_attestation_verification_seconds",
      "Attested-request verification latency by variant.",
    ),
    keyServiceSeconds: registry.histogram(
      "join_key_service_seconds",
      "Key service call latency by operation.",
    ),
    apiServerSeconds: registry.histogram("join_api_server_seconds", "API server call latency by operation."),
  };

  const service = new JoinService({
    exchange: createAttestedExchange({ keys, clock, nonceLifetimeMs: flags.nonceLifetimeMs }),
    attestation: watcher,
    keys,
    kubeletSigner: kubeletCa,
    components: componentsSource({ client, clock }),
    discoveryHash,
    apiServerEndpoint,
    controlPlaneFiles: controlPlaneFilesSource({ pkiDir }),
    tokens: bootstrapTokens({ client, clock, ttlMs: flags.bootstrapTokenTtlMs }),
    joiningNodes: joiningNodes({ client, clock, logger }),
    ssh: sshHostCertifier({ keys, clock }),
    measurementSalt,
    peerLimiter: new PeerRateLimiter({
      perPeer: { perSecond: flags.ratePerPeer, burst: flags.burstPerPeer },
      clock,
    }),
    ticketBudget: new TokenBucket({ rate: { perSecond: flags.rateGlobal, burst: flags.burstGlobal }, clock }),
    verifierPool: new WorkPool({ concurrency: flags.verifyConcurrency, maxQueued: flags.verifyQueue }),
    metrics,
    audit: auditLog(logger.with({ log: "audit" })),
    logger,
    clock,
  });

  const metricsServer = await serveMetrics(registry, {
    hostname: flags.metricsAddress,
    port: flags.metricsPort,
  });
  const server = await serveRpc({
    routes: (router) => router.service(API, service.handlers()),
    hostname: flags.listenAddress,
    port: flags.port,
    tls,
    readMaxBytes: READ_MAX_BYTES,
    limits: flags.limits,
    overloadRefusedByService: TICKET_METHODS,
    httpHandler: (req, res) => {
      if (req.method !== "GET" || req.url !== "/healthz") return false;
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("ok\n");
      return true;
    },
  });
  // The browser port serves GetStatus and nothing else: no ticket, no challenge.
  let browserServer: RpcServer | undefined;
  if (flags.browser) {
    browserServer = await serveBrowserRpc({
      routes: (router) => router.rpc(API.method.getStatus, () => service.status()),
      hostname: flags.browser.address,
      port: flags.browser.port,
      allowedOrigins: flags.browser.allowedOrigins,
      limits: flags.limits,
    });
  }
  return {
    port: server.address.port,
    metricsPort: metricsServer.port,
    browserPort: browserServer?.address.port,
    async stop() {
      await browserServer?.shutdown();
      await server.shutdown();
      await metricsServer.close();
      await watcher.close();
      client.close();
      keyService.close();
    },
  };
}

if (import.meta.main) Deno.exit(await main(Deno.args));
