/**
 * The local Kubernetes API's command line.
 *
 * @module
 */
import type { LogLevel } from "../log/logger.ts";
import {
  parseFlags,
  parseListenAddress,
  parseLogLevelFlag,
  parsePort,
  parseSeconds,
  UsageError,
} from "../flags/flags.ts";

/** The local API's settings. */
export interface LocalApiFlags {
  /** kubeadm's PKI directory (`ca.{crt,key}`, `apiserver.{crt,key}`). */
  pkiDir: string;
  /** Directory the objects persist in; undefined with `--in-memory`. */
  stateDir: string | undefined;
  /** Port to listen on; 0 picks a free one. */
  port: number;
  /** Address to bind. */
  listenAddress: string;
  /** How often expired bootstrap tokens are deleted (kube-controller-manager's token cleaner). */
  tokenCleanupIntervalMs: number;
  /** The lowest level logged. */
  logLevel: LogLevel;
}

/** Usage text for `--help`. */
export const LOCAL_API_USAGE = `Usage: local-api --pki-dir <dir> (--state-dir <dir> | --in-memory) [flags]

A local Kubernetes API: serves Secrets, ConfigMaps, NodeVersions, JoiningNodes
and kubelet CertificateSigningRequests over HTTPS with kubeadm's PKI, and
persists them under the state directory.

Flags:
  --pki-dir <dir>           kubeadm's PKI directory; waited for until it holds
                            ca.crt, ca.key, apiserver.crt and apiserver.key
  --state-dir <dir>         directory the objects persist in (created if missing)
  --in-memory               keep the objects in memory only, instead of --state-dir
                            (benchmarks: no disk writes, fsyncs or journal to measure)
  --port <port>             port to listen on, 0 for any free port (default 6443)
  --listen-address <addr>   IP address to bind (default 127.0.0.1)
  --token-cleanup-interval <seconds>
                            how often expired bootstrap tokens are deleted, as
                            kube-controller-manager's token cleaner does (default 10)
  --log-level <level>       debug, info, warn or error (default info)
  --help                    show this help
`;

/**
 * Parses the command line. Returns "help" when `--help` is given.
 *
 * @throws {UsageError} for an unknown or missing flag, both or neither of --state-dir and --in-memory, a
 *   bad port, listen address, token cleanup interval or log level
 */
export function parseLocalApiFlags(args: string[]): LocalApiFlags | "help" {
  const values = parseFlags(args, {
    "pki-dir": { type: "string", default: "" },
    "state-dir": { type: "string", default: "" },
    "in-memory": { type: "boolean", default: false },
    port: { type: "string", default: "6443" },
    "listen-address": { type: "string", default: "127.0.0.1" },
    "token-cleanup-interval": { type: "string", default: "10" },
    "log-level": { type: "string", default: "info" },
    help: { type: "boolean", default: false },
  }, "local API");
  if (values.help) return "help";
  if (values["pki-dir"] === "") throw new UsageError("--pki-dir is required");
  if ((values["state-dir"] === "") === !values["in-memory"]) {
    throw new UsageError("exactly one of --state-dir and --in-memory is required");
  }
  return {
    pkiDir: values["pki-dir"],
    stateDir: values["in-memory"] ? undefined : values["state-dir"],
    port: parsePort(values.port),
    listenAddress: parseListenAddress(values["listen-address"], "--listen-address"),
    tokenCleanupIntervalMs: parseSeconds(values["token-cleanup-interval"], "--token-cleanup-interval"),
    logLevel: parseLogLevelFlag(values["log-level"]),
  };
}
