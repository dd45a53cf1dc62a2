/**
 * The bootstrapper: baked into every node image, it turns the node into a
 * member of a confidential Kubernetes cluster (see run.ts for the flow,
 * flags.ts for the command line).
 *
 * A bad command line ends the process with status 2; a bad configuration
 * (unknown variant, unreachable TPM, missing state disk or passphrase file)
 * with status 1 and one log line naming it, before anything listens.
 *
 * Permissions: the `bootstrapper` permission set of deno.json (the node's
 * paths under `/`, its tools, net). The state disk is not among its paths:
 * only cryptsetup opens it (Deno 2.9.6 refuses every /dev path without
 * `--allow-all`), so it is checked at start by cryptsetup too. A node root elsewhere (tests, the local
 * cluster) needs `--allow-read`/`--allow-write` naming it, and a kubeadm
 * elsewhere an `--allow-run` naming every tool (Deno replaces the set's
 * lists with the flags given):
 *
 * ```sh
 * deno task bootstrapper --attestation-variant qemu-vtpm
 * deno run -P=bootstrapper --allow-read=/srv/node-1 --allow-write=/srv/node-1 \
 *   --allow-run=/srv/node-1/run/state/bin/kubeadm,cryptsetup,ln,tpm2_createprimary,tpm2_quote,tpm2_flushcontext,tpm2_pcrread,tpm2_pcrevent \
 *   src/bootstrapper/main.ts --root /srv/node-1 --attestation-variant qemu-vtpm --tpm swtpm:host=127.0.0.1,port=2321 ...
 * ```
 *
 * @module
 */
import { errorFirstLine } from "../error_message.ts";
import { errorMessage } from "../error_message.ts";
import { createIssuer } from "../attestation/issuers.ts";
import { knownVariants } from "../attestation/registry.ts";
import type { Issuer } from "../attestation/attestation.ts";
import type { TpmConnection } from "../attestation/tpm/tools.ts";
import { systemClock } from "../clock.ts";
import { commandLine } from "../flags/flags.ts";
import { removeIfExists, writeFileAtomic } from "../fs/atomic_write.ts";
import { API } from "../gen/init/init_pb.ts";
import { API as RecoverAPI } from "../gen/recoverproto/recover_pb.ts";
import { createLogger, type Logger } from "../log/logger.ts";
import { MetadataClient } from "../metadata/client.ts";
import { serveBrowserRpc } from "../rpc/browser_server.ts";
import { type RpcServer, serveRpc } from "../rpc/server.ts";
import { terminationSignal } from "../rpc/signals.ts";
import { readSecretFile } from "../secrets/secret_file.ts";
import { createSelfSignedCertificate } from "../x509/selfsigned.ts";
import { JoinTicketApplier } from "./apply_ticket.ts";
import { KubeadmClusterInitializer } from "./cluster_init.ts";
import { ComponentInstaller } from "./components.ts";
import { FileClusterMarker, filePcr15Path } from "./file_marker.ts";
import { BOOTSTRAPPER_USAGE, type BootstrapperFlags, parseBootstrapperFlags } from "./flags.ts";
import { INIT_CALL_TIMEOUT_MS, InitServer } from "./initserver.ts";
import { JoinClient } from "./joinclient.ts";
import { AttestedTicketSource } from "./join_ticket_source.ts";
import { Kubeadm } from "./kubeadm.ts";
import { JournalLogs } from "./logs.ts";
import { type ClusterMarker, NodeLock } from "./nodelock.ts";
import { type NodePaths, nodePaths } from "./node_paths.ts";
import { readNodeState, writeNodeState } from "./node_state.ts";
import { isNodeBound, TpmClusterMarker } from "./pcr15.ts";
import { RecoveryServer } from "./recoveryserver.ts";
import { type Recovery, rejoin } from "./rejoin.ts";
import {
  type ClusterBinding,
  EXIT_FAILURE,
  type KubeletStarter,
  type Outcome,
  runBootstrapper,
  type RunDependencies,
} from "./run.ts";
import { LuksStateDisk } from "./state_disk.ts";
import { Systemctl } from "./systemd.ts";

/** The kubelet's systemd unit. */
const KUBELET_UNIT = "kubelet.service";
/** The state disk's key file after a rejoin: read-only for root, as the original's disk-mapper wrote it. */
const DISK_KEY_FILE_MODE = 0o400;
/** How long the init server lets calls in flight finish when it stops. */
const SHUTDOWN_GRACE_MS = 5_000;

/** Runs the bootstrapper with command-line `args`; resolves to the exit status. */
export async function main(args: string[]): Promise<number> {
  const flags = commandLine(args, {
    component: "bootstrapper",
    usage: BOOTSTRAPPER_USAGE,
    parse: (a) =>
      parseBootstrapperFlags(a, { attestationVariant: Deno.env.get("CONSTEL_ATTESTATION_VARIANT") }),
  });
  if (typeof flags === "number") return flags;

  const paths = nodePaths(flags.root);
  const logger = createLogger({
    level: flags.logLevel,
    fields: { component: "bootstrapper" },
    write: logFileWriter(paths.bootstrapperLog),
  });
  const stop = new AbortController();
  terminationSignal().then((signal) => {
    logger.info("stopping", { signal });
    stop.abort(new Error(`stopped by ${signal}`));
  });
  let node: Node;
  try {
    node = await prepare(flags, paths, logger, stop.signal);
  } catch (err) {
    logger.error(`cannot start: ${errorFirstLine(err)}`);
    return EXIT_FAILURE;
  }
  try {
    if (flags.command === "rejoin") return await runRejoin(flags, node, stop.signal);
    return await runBootstrapper(node.runDependencies, { signal: stop.signal });
  } catch (err) {
    logger.error(`bootstrapper failed: ${errorMessage(err)}`);
    return EXIT_FAILURE;
  } finally {
    await closeIssuer(node.issuer, logger);
  }
}

/** Closes the issuer (its temporary directory would outlive the process); a failure is only logged. */
async function closeIssuer(issuer: Issuer, logger: Logger): Promise<void> {
  try {
    await issuer.close?.();
  } catch (error) {
    logger.warn("closing the attestation issuer failed", { error: (error as Error).message });
  }
}

/** The node's adapters, wired. */
interface Node {
  paths: NodePaths;
  logger: Logger;
  issuer: Issuer;
  lock: NodeLock;
  disk: LuksStateDisk;
  metadata: MetadataClient;
  tickets: AttestedTicketSource;
  runDependencies: RunDependencies;
}

/** Checks the configuration and builds every adapter; throws naming the first problem. */
async function prepare(
  flags: BootstrapperFlags,
  paths: NodePaths,
  logger: Logger,
  signal: AbortSignal,
): Promise<Node> {
  if (!knownVariants().includes(flags.attestationVariant)) {
    throw new Error(
      `unknown attestation variant "${flags.attestationVariant}"; known: ${knownVariants().join(", ")}`,
    );
  }
  // Read once to check it, then forgotten: cryptsetup reads it itself. After a reboot it is gone (/run is
  // a tmpfs) until the rejoin writes the disk key there.
  if (flags.command !== "rejoin") {
    (await readSecretFile(flags.stateDiskPassphraseFile, {
      description: "first-boot passphrase",
      minLength: 1,
    }))
      .fill(0);
  }
  const tpm: TpmConnection | undefined = flags.tpm === "none" ? undefined : { tcti: flags.tpm.tcti };
  const fileMarker = tpm ? undefined : new FileClusterMarker(filePcr15Path(flags.root));
  if (fileMarker) {
    logger.warn("no TPM (--tpm none): PCR 15 is a file; the node's cluster binding is not measured");
  }
  const marker: ClusterMarker = tpm ? new TpmClusterMarker(tpm) : fileMarker!;
  const binding = {
    isBound: (o?: { signal?: AbortSignal }) => tpm ? isNodeBound(tpm, o) : fileMarker!.isBound(),
  };
  // Reads PCR 15 once now, so an unreachable TPM stops the process before it listens; a TPM that does not
  // answer ends it at the tools' deadline (TPM_TOOL_TIMEOUT_MS), after this line said what it waited for.
  if (tpm) logger.info("reading the node's binding (PCR 15) from the TPM", { tcti: tpm.tcti });
  await binding.isBound({ signal });

  const issuer = await createIssuer(flags.attestationVariant, {
    tcti: tpm?.tcti,
    logger,
    signal,
    tempDir: paths.tmpDir,
  });
  try {
    return await prepareWithIssuer(flags, paths, logger, signal, { marker, binding, issuer });
  } catch (error) {
    await closeIssuer(issuer, logger);
    throw error;
  }
}

/** The rest of {@linkcode prepare}, once the TPM is reachable and the issuer made. */
async function prepareWithIssuer(
  flags: BootstrapperFlags,
  paths: NodePaths,
  logger: Logger,
  signal: AbortSignal,
  { marker, binding, issuer }: {
    marker: ClusterMarker;
    binding: ClusterBinding;
    issuer: Issuer;
  },
): Promise<Node> {
  const lock = new NodeLock(marker);
  const disk = new LuksStateDisk({
    device: flags.stateDisk,
    cryptsetup: flags.cryptsetup,
    initialPassphraseFile: flags.stateDiskPassphraseFile,
    pbkdf: flags.stateDiskPbkdf,
  });
  await disk.checkPresent({ signal });
  const metadata = new MetadataClient({
    baseUrl: `${flags.metadataUrl}/`,
    timeoutMs: flags.joinCallTimeoutMs,
  });
  const tickets = new AttestedTicketSource({ issuer });
  const kubeadm = new Kubeadm({
    binary: flags.kubeadm,
    tmpDir: paths.tmpDir,
    kubernetesDir: paths.kubernetesDir,
  });
  const leftovers = await kubeadm.removeLeftovers();
  if (leftovers > 0) {
    logger.warn(
      "removed kubeadm configuration files an earlier run left (killed mid-kubeadm; a join's held its token)",
      {
        count: leftovers,
      },
    );
  }
  const systemctl = flags.systemctl === "none" ? undefined : new Systemctl({ binary: flags.systemctl });
  const units = {
    start: async (unit: string, o?: { signal?: AbortSignal }) => {
      if (systemctl) return await systemctl.start(unit, o);
      logger.warn(`no systemd (--systemctl none): ${unit} not started`);
    },
  };
  const kubelet: KubeletStarter = { startKubelet: (o) => units.start(KUBELET_UNIT, o) };
  const logs = new JournalLogs({
    binary: flags.journalctl === "none" ? undefined : flags.journalctl,
    fallbackFile: paths.bootstrapperLog,
  });
  const components = new ComponentInstaller({ logger }, { root: paths.root, tmpDir: paths.tmpDir });

  const runDependencies: RunDependencies = {
    logger,
    binding,
    nodeState: { check: () => readNodeState(paths.nodeState).then(() => {}) },
    kubelet,
    startInitServer: async (hooks) => {
      const initServer = new InitServer({
        issuer,
        initSecretHash: metadata,
        lock,
        onLocked: hooks.onLocked,
        disk,
        nodeState: {
          write: (state, o) => writeNodeState(paths.nodeState, state, o),
          remove: () => removeIfExists(paths.nodeState).then(() => {}),
        },
        cluster: new KubeadmClusterInitializer({
          kubeadm,
          metadata,
          paths,
          components,
          logger,
          apiServer: flags.initApiServer,
        }),
        logs,
        clock: systemClock,
        logger,
      });
      const tls = createSelfSignedCertificate({ commonName: "bootstrapper", dnsNames: ["localhost"] });
      const server = await serveRpc({
        hostname: flags.listenAddress,
        port: flags.port,
        tls,
        limits: { requestTimeoutMs: INIT_CALL_TIMEOUT_MS },
        routes: (router) => router.service(API, initServer.handlers()),
      });
      // The browser port serves GetAttestation and nothing else: never Init.
      const browser = flags.browser &&
        await serveBrowserRpc({
          hostname: flags.browser.address,
          port: flags.browser.port,
          allowedOrigins: flags.browser.allowedOrigins,
          routes: (router) =>
            router.rpc(API.method.getAttestation, initServer.browserHandlers().getAttestation),
        }).catch(async (error) => {
          await server.shutdown(SHUTDOWN_GRACE_MS);
          throw error;
        });
      logger.info("listening", {
        address: flags.listenAddress,
        port: server.address.port,
        callTimeoutSeconds: INIT_CALL_TIMEOUT_MS / 1000,
        ...(browser && {
          browserAddress: flags.browser!.address,
          browserPort: browser.address.port,
          corsAllowOrigins: flags.browser!.allowedOrigins,
        }),
      });
      return {
        finished: initServer.outcome.then((o): Outcome =>
          o.ok ? { ok: true } : { ok: false, error: new Error(o.error) }
        ),
        // Calls in flight finish first (the Init that won sends its answer), then work left is cancelled.
        stop: async () => {
          initServer.stopAccepting();
          await browser?.shutdown(SHUTDOWN_GRACE_MS);
          await server.shutdown(SHUTDOWN_GRACE_MS);
          initServer.close();
        },
      };
    },
    runJoinClient: async (hooks, { signal }) => {
      const applier = new JoinTicketApplier({
        lock,
        onLocked: hooks.onLocked,
        disk,
        writeFile: writeFileAtomic,
        writeNodeState,
        removeFile: removeIfExists,
        components,
        kubeadm,
        systemd: units,
        paths,
        logger,
      });
      const joinClient = new JoinClient({ metadata, tickets, disk, applier, logger }, {
        retryIntervalMs: flags.joinRetryIntervalMs,
        callTimeoutMs: flags.joinCallTimeoutMs,
        joinServicePort: flags.joinServicePort,
      });
      const outcome = await joinClient.run({ signal });
      if (outcome.status !== "joined") throw signal.reason ?? new Error("join client stopped");
    },
  };
  return { paths, logger, issuer, lock, disk, metadata, tickets, runDependencies };
}

/**
 * `bootstrapper rejoin`: writes an initialized disk's key where the image maps it from, re-binds PCR 15.
 * A control plane also offers the operator's recovery: its server starts when the rejoin offers it, and
 * stops (after the answer in flight) when the rejoin ends.
 */
async function runRejoin(flags: BootstrapperFlags, node: Node, signal: AbortSignal): Promise<number> {
  const { logger } = node;
  const recoveryServer = new RecoveryServer({
    issuer: node.issuer,
    disk: node.disk,
    clock: systemClock,
    logger,
  });
  let listening: Promise<RpcServer> | undefined;
  const recovery: Recovery = {
    accept: async (options) => {
      listening ??= serveRpc({
        hostname: flags.listenAddress,
        port: flags.recoveryPort,
        tls: createSelfSignedCertificate({ commonName: "bootstrapper-recovery", dnsNames: ["localhost"] }),
        routes: (router) => router.service(RecoverAPI, recoveryServer.handlers()),
      });
      const server = await listening;
      logger.info("recovery server listening", { address: flags.listenAddress, port: server.address.port });
      return await recoveryServer.accept(options);
    },
  };
  try {
    const outcome = await rejoin({
      disk: node.disk,
      metadata: node.metadata,
      tickets: node.tickets,
      diskKeyFile: {
        write: (key) => writeFileAtomic(flags.stateDiskPassphraseFile, key, { mode: DISK_KEY_FILE_MODE }),
      },
      lock: node.lock,
      recovery,
      logger,
    }, {
      retryIntervalMs: flags.joinRetryIntervalMs,
      callTimeoutMs: flags.joinCallTimeoutMs,
      joinServicePort: flags.joinServicePort,
      signal,
    });
    logger.info(
      outcome.status === "rebound"
        ? "rejoined: the state disk opens with the cluster's key and PCR 15 is bound again"
        : outcome.status === "not-initialized"
        ? "the state disk is not initialized: nothing to rejoin, run the bootstrapper"
        : "rejoin stopped",
    );
    return 0;
  } finally {
    await listening?.then((server) => server.shutdown(SHUTDOWN_GRACE_MS), () => {});
  }
}

/**
 * Writes each log line to stderr and appends it to the bootstrapper's own
 * log file, the source of the logs an init failure streams when the node
 * has no journal.
 */
function logFileWriter(path: string): (line: string) => void {
  const encoder = new TextEncoder();
  let file: Deno.FsFile | undefined;
  try {
    Deno.mkdirSync(path.slice(0, path.lastIndexOf("/")), { recursive: true });
    file = Deno.openSync(path, { append: true, create: true, mode: 0o600 });
  } catch {
    // No log file: stderr (and the journal, under systemd) still has every line.
  }
  return (line) => {
    const bytes = encoder.encode(line + "\n");
    Deno.stderr.writeSync(bytes);
    file?.writeSync(bytes);
  };
}

if (import.meta.main) Deno.exit(await main(Deno.args));
