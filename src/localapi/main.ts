/**
 * The local Kubernetes API as a process: the API server of a local cluster,
 * serving kubeadm's PKI from `--pki-dir` (waiting for it if kubeadm has not
 * written it yet) and persisting objects under `--state-dir` (or, with
 * `--in-memory`, keeping them in memory only, as the join service load
 * benchmark does).
 *
 * It logs JSON lines on stderr (component "local-api"): "listening" with
 * the bound `address` and `port` once the port is bound, "serving" once the
 * PKI is loaded and TLS is served. A bad command line ends it with status 2,
 * a state it cannot load or a port it cannot bind with status 1. SIGTERM or
 * SIGINT stops it (pending writes finish) and it exits 0.
 *
 * ```sh
 * deno task local-api --pki-dir /tmp/c/etc/kubernetes/pki --state-dir /tmp/c/local-api --port 6443
 * kubectl --kubeconfig /tmp/c/etc/kubernetes/admin.conf get secrets -n kube-system
 * ```
 *
 * Permissions: the `local-api` permission set of deno.json (read and write
 * under `/etc/kubernetes`, `/var/lib/constellation` and `/tmp`, bind any
 * address).
 *
 * @module
 */
import { commandLine } from "../flags/flags.ts";
import { createLogger } from "../log/logger.ts";
import { terminationSignal } from "../rpc/signals.ts";
import { LOCAL_API_USAGE, parseLocalApiFlags } from "./flags.ts";
import { type LocalApi, startLocalApi } from "./server.ts";

/** Exit status of a startup failure. */
const EXIT_FAILURE = 1;

/** Runs the local API with command-line `args`; resolves to the exit status. */
export async function main(args: string[]): Promise<number> {
  const flags = commandLine(args, {
    component: "local-api",
    usage: LOCAL_API_USAGE,
    parse: parseLocalApiFlags,
  });
  if (typeof flags === "number") return flags;
  const logger = createLogger({ level: flags.logLevel, fields: { component: "local-api" } });
  const stopSignal = terminationSignal();
  let api: LocalApi;
  try {
    api = await startLocalApi({
      pkiDir: flags.pkiDir,
      stateDir: flags.stateDir,
      hostname: flags.listenAddress,
      port: flags.port,
      tokenCleanupIntervalMs: flags.tokenCleanupIntervalMs,
      logger,
    });
  } catch (err) {
    logger.error(`cannot start: ${(err as Error).message.split("\n")[0]}`);
    return EXIT_FAILURE;
  }
  logger.info("listening", { address: flags.listenAddress, port: api.port, pkiDir: flags.pkiDir });
  api.whenServing().then(
    () => logger.info("serving", { url: api.url }),
    () => {},
  );
  const signal = await stopSignal;
  logger.info("shutting down", { signal });
  await api.close();
  logger.info("stopped");
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
