/**
 * The key service: derives data keys from the cluster's master secret
 * (`kms.API/GetDataKey`), serving gRPC, gRPC-Web and the Connect protocol on
 * one plaintext HTTP/2 (h2c) port. It is cluster-internal: only the join
 * service calls it.
 *
 * Startup reads the master secret (at least 16 bytes) and the salt (at least
 * 32 bytes) as raw bytes. A missing, unreadable, too short, or not permitted
 * file ends the process with status 1 and one log line naming the file and
 * the problem, before anything listens. A bad command line ends it with
 * status 2. Once listening it logs (JSON on stderr, component "key-service")
 * a "listening" line with the bound `address` and `port`. SIGTERM or SIGINT
 * stops accepting connections, lets calls in flight finish, and exits 0.
 *
 * Permissions: the `key-service` permission set of deno.json, i.e. read
 * `/var/config` and bind on the listed local addresses:
 *
 * ```sh
 * deno run -P=key-service --no-prompt src/keyservice/main.ts          # /var/config/{mastersecret,salt}, port 9000
 * deno task key-service --port 9000 --log-level debug                 # the same, as a task
 * ```
 *
 * To read secrets from elsewhere, add `--allow-read=<paths>`; Deno replaces
 * the set's read list with it, so name both files:
 *
 * ```sh
 * deno run -P=key-service --no-prompt --allow-read=/tmp/ks/mastersecret,/tmp/ks/salt \
 *   src/keyservice/main.ts --master-secret /tmp/ks/mastersecret --salt /tmp/ks/salt \
 *   --listen-address 127.0.0.1 --port 9000
 * ```
 *
 * @module
 */
import { ClusterKms } from "../kms/cluster_kms.ts";
import { MASTER_SALT_MIN_LENGTH, MASTER_SECRET_MIN_LENGTH } from "../kms/keys.ts";
import { createLogger } from "../log/logger.ts";
import { serveRpc } from "../rpc/server.ts";
import { terminationSignal } from "../rpc/signals.ts";
import { commandLine } from "../flags/flags.ts";
import { KEY_SERVICE_USAGE, parseKeyServiceFlags } from "./flags.ts";
import { readSecretFile } from "../secrets/secret_file.ts";
import { keyServiceRoutes } from "./server.ts";

/** Largest request message accepted: a data key ID and a length. */
const READ_MAX_BYTES = 4096;

/** Exit status of a startup failure. */
const EXIT_FAILURE = 1;

/** Runs the key service with command-line `args`; resolves to the exit status. */
export async function main(args: string[]): Promise<number> {
  const flags = commandLine(args, {
    component: "key-service",
    usage: KEY_SERVICE_USAGE,
    parse: parseKeyServiceFlags,
  });
  if (typeof flags === "number") return flags;

  const logger = createLogger({ level: flags.logLevel, fields: { component: "key-service" } });
  // Listen for signals before serving, so a SIGTERM right after "listening" is a graceful stop.
  const stopSignal = terminationSignal();
  let server;
  try {
    const masterSecret = await readSecretFile(flags.masterSecretPath, {
      description: "master secret",
      minLength: MASTER_SECRET_MIN_LENGTH,
    });
    const salt = await readSecretFile(flags.saltPath, {
      description: "salt",
      minLength: MASTER_SALT_MIN_LENGTH,
    });
    const refuse = (message: string): never => {
      masterSecret.fill(0);
      salt.fill(0);
      throw new Error(message);
    };
    for (const [path, bytes] of [[flags.masterSecretPath, masterSecret], [flags.saltPath, salt]] as const) {
      if (isCliMasterSecretFile(bytes)) {
        refuse(
          `${path} is the CLI's master secret file (JSON with "key" and "salt"); the key service reads raw bytes: --master-secret and --salt as the constellation-mastersecret Secret's mastersecret and salt`,
        );
      }
      if (isBase64Line(bytes)) {
        refuse(
          `${path} holds a line of base64 text, not raw bytes: decode it first (base64 -d), as Kubernetes does when it mounts the constellation-mastersecret Secret`,
        );
      }
    }
    // Equal bytes may be meant (the original's test vectors use zeros for both); one file for both is a slip.
    if (await Deno.realPath(flags.masterSecretPath) === await Deno.realPath(flags.saltPath)) {
      refuse(`--master-secret ${flags.masterSecretPath} and --salt ${flags.saltPath} are the same file`);
    }
    const kms = new ClusterKms(masterSecret, salt);
    masterSecret.fill(0);
    salt.fill(0);
    server = await serveRpc({
      routes: keyServiceRoutes({ kms, logger }),
      hostname: flags.listenAddress,
      port: flags.port,
      readMaxBytes: READ_MAX_BYTES,
      limits: flags.limits,
    });
  } catch (err) {
    logger.error(`cannot start: ${(err as Error).message.split("\n")[0]}`);
    return EXIT_FAILURE;
  }
  logger.info("listening", { address: server.address.hostname, port: server.address.port });

  const signal = await stopSignal;
  logger.info("shutting down", { signal });
  await server.shutdown();
  logger.info("stopped");
  return 0;
}

/**
 * Whether `bytes` is the CLI's master secret file (`{"key": …, "salt": …}`),
 * a common slip where raw bytes go: its text would silently become the key,
 * and every derived key differ from the cluster's.
 */
function isCliMasterSecretFile(bytes: Uint8Array): boolean {
  if (bytes[0] !== 0x7b) return false; // "{"
  try {
    const value = JSON.parse(new TextDecoder().decode(bytes));
    return typeof value === "object" && value !== null && typeof value.key === "string";
  } catch {
    return false;
  }
}

/**
 * Whether `bytes` is one line of base64 text (the Secret's value as `kubectl get -o yaml` shows it, saved
 * with a line break): its text would silently become the key. No random secret is refused in practice:
 * base64 text is a multiple of 4 characters, so 16 or 32 random bytes never match (with the line break
 * they are one over), 17 bytes about once in 10¹², longer ones far less often.
 */
function isBase64Line(bytes: Uint8Array): boolean {
  const text = new TextDecoder().decode(bytes);
  return /^[A-Za-z0-9+/]+={0,2}\r?\n$/.test(text) && text.trimEnd().length % 4 === 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
