/**
 * In-cluster connection: the API server from `KUBERNETES_SERVICE_HOST` and
 * `KUBERNETES_SERVICE_PORT`, the CA and the bound service-account token from
 * the pod's service-account directory, as client-go's `InClusterConfig`.
 *
 * @module
 */
import { join } from "node:path";
import { type Clock, systemClock } from "../clock.ts";
import type { ConnectionConfig } from "./connection.ts";
import { KubeconfigError } from "./kubeconfig.ts";
import { fileTokenSource, type ReadTextFile, TokenFileError, tokenFromFile } from "./token.ts";

/** Where a pod's service-account credentials are mounted. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/** Options for {@linkcode inClusterConfig}; the defaults are the real pod environment. */
export interface InClusterOptions {
  /** Reads an environment variable; default `Deno.env.get`. */
  env?: (name: string) => string | undefined;
  /** Service-account directory holding `token`, `ca.crt` and `namespace`; default {@linkcode SERVICE_ACCOUNT_DIR}. */
  serviceAccountDir?: string;
  /** Reads the credential files; default `Deno.readTextFile`. */
  readTextFile?: ReadTextFile;
  /** How often the rotating token file is re-read; default 60 s. */
  tokenRefreshMs?: number;
  /** Time source for the token refresh; default the system clock. */
  clock?: Clock;
}

/**
 * Builds the connection of a pod's service account. Reads the token and CA
 * now, so a missing mount fails at startup; the token is re-read every
 * `tokenRefreshMs` afterwards (the kubelet rotates bound tokens).
 */
export async function inClusterConfig(options: InClusterOptions = {}): Promise<ConnectionConfig> {
  const env = options.env ?? ((name: string) => Deno.env.get(name));
  const readTextFile = options.readTextFile ?? Deno.readTextFile;
  const dir = options.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;

  const host = env("KUBERNETES_SERVICE_HOST");
  const port = env("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    throw new KubeconfigError(
      "missing",
      "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set",
    );
  }
  if (!/^[0-9]{1,5}$/.test(port)) {
    throw new KubeconfigError("malformed", `KUBERNETES_SERVICE_PORT is not a port number: "${port}"`);
  }
  const server = `https://${host.includes(":") ? `[${host}]` : host}:${port}`;
  try {
    new URL(server);
  } catch {
    throw new KubeconfigError(
      "malformed",
      `KUBERNETES_SERVICE_HOST is not a host name or address: "${host}"`,
    );
  }

  const read = async (name: string): Promise<string> => {
    try {
      return await readTextFile(join(dir, name));
    } catch (error) {
      throw new KubeconfigError("unreadable", `reading service-account ${name}: ${(error as Error).message}`);
    }
  };
  const caPem = await read("ca.crt");
  const tokenPath = join(dir, "token");
  let initialToken: string;
  try {
    initialToken = tokenFromFile(await read("token"), tokenPath);
  } catch (error) {
    if (!(error instanceof TokenFileError)) throw error;
    throw new KubeconfigError(error.reason, `service-account ${error.message}`);
  }
  const clock = options.clock ?? systemClock;
  const token = fileTokenSource(tokenPath, {
    readTextFile,
    refreshMs: options.tokenRefreshMs,
    clock,
    initial: { token: initialToken, readAtMs: clock.now() },
  });
  let namespace = "default";
  try {
    namespace = (await readTextFile(join(dir, "namespace"))).trim() || "default";
  } catch {
    // The namespace file is optional (client-go falls back to "default" as well).
  }
  return { server, caPem, token, namespace };
}
