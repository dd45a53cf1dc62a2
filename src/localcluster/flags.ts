/**
 * The local cluster's command line: `cluster up|down|status|recover [flags]`.
 *
 * @module
 */
import { consoleOrigin } from "../console/address.ts";
import { parseCount, parseFlags, parseSeconds, UsageError } from "../flags/flags.ts";
import { OriginError, parseOrigin } from "../rpc/cors.ts";
import type { NetworkKind } from "./network.ts";

/** The state directory when none is given (relative to the working directory). */
export const DEFAULT_STATE_DIR = ".dev/cluster";
/** Most nodes of one local cluster (each is a few processes and a swtpm). */
const MAX_NODES = 64;

/** A parsed command line. */
export type ClusterCommand =
  | {
    command: "up";
    stateDir: string;
    controlPlanes: number;
    workers: number;
    network: NetworkKind | "auto";
    timeoutMs: number;
    corsAllowOrigins: string[];
  }
  | { command: "recover"; stateDir: string; timeoutMs: number; corsAllowOrigins: string[] }
  | { command: "down"; stateDir: string }
  | { command: "status"; stateDir: string; output: "table" | "json" };

/** Usage text for `--help`. */
export const CLUSTER_USAGE = `Usage: cluster <command> [flags]

A confidential cluster on this machine: a QEMU-style metadata API, one
bootstrapper per node with its own swtpm and LUKS2 state disk (in its own
network namespace when run as root), the recording kubeadm, a local
Kubernetes API, the operator's cli init, and the key and join services on
every control plane.

Commands:
  up       start a cluster and show each node's phase; stays in the
           foreground until Ctrl-C (or cluster down), then stops everything
  status   show the nodes' phases and where everything is
  down     stop everything cluster up started (by PID) and remove its network
  recover  bring a stopped cluster back from its state directory, as after
           a power cut: every node that had joined boots again, the control
           planes are recovered with the master secret (cli recover), the
           workers rejoin; then as up

Flags:
  --state-dir <dir>        where the cluster lives (default ${DEFAULT_STATE_DIR});
                           up replaces a stopped cluster's state there
  --control-planes <n>     up: control-plane nodes (default 1)
  --workers <n>            up: worker nodes (default 2)
  --network <kind>         up: netns (root: a namespace and address per node),
                           loopback, or auto (default: netns when root)
  --timeout <seconds>      up, recover: how long nodes may take to join (default 300)
  --cors-allow-origin <o>  up, recover: a web origin whose pages may call the nodes' and join
                           services' browser ports; repeatable (default ${consoleOrigin()},
                           the browser console's: npx deno task console --local-cluster <state-dir>)
  --output <table|json>    status: output format (default table)
  --help                   show this help

Exit status: 0 success, 1 failure (the message says what failed), 2 bad command line.
`;

const COMMANDS = ["up", "down", "status", "recover"];
/** The flags each command takes (besides --state-dir). */
const COMMAND_FLAGS: Record<string, string[]> = {
  up: ["control-planes", "workers", "network", "timeout", "cors-allow-origin"],
  status: ["output"],
  down: [],
  recover: ["timeout", "cors-allow-origin"],
};

/** Parses the arguments; "help" for `--help`. */
export function parseClusterArgs(args: string[]): ClusterCommand | "help" {
  if (args.includes("--help") || args.includes("-h")) return "help";
  const [command, ...rest] = args;
  if (command === undefined) throw new UsageError(`missing command: one of ${COMMANDS.join(", ")}`);
  if (!COMMANDS.includes(command)) {
    throw new UsageError(`unknown command "${command}": one of ${COMMANDS.join(", ")}`);
  }
  const flags = parseFlags(
    rest,
    {
      "state-dir": { type: "string", default: DEFAULT_STATE_DIR },
      "control-planes": { type: "string", default: "1" },
      workers: { type: "string", default: "2" },
      network: { type: "string", default: "auto" },
      timeout: { type: "string", default: "300" },
      output: { type: "string", default: "table" },
      "cors-allow-origin": { type: "string", multiple: true },
    },
    `cluster ${command}`,
    { repeated: "refuse" },
  );
  for (const arg of rest) {
    const name = /^--([a-z-]+)/.exec(arg)?.[1];
    if (name !== undefined && name !== "state-dir" && !COMMAND_FLAGS[command].includes(name)) {
      throw new UsageError(`--${name} is not a flag of cluster ${command}`);
    }
  }
  const stateDir = flags["state-dir"];
  if (stateDir === "") throw new UsageError("--state-dir must not be empty");
  const timeoutMs = () => parseSeconds(flags.timeout, "--timeout");
  const corsAllowOrigins = () =>
    (flags["cors-allow-origin"] ?? [consoleOrigin()]).map((origin) => {
      try {
        return parseOrigin(origin);
      } catch (error) {
        if (error instanceof OriginError) throw new UsageError(`--cors-allow-origin: ${error.message}`);
        throw error;
      }
    });
  switch (command) {
    case "up": {
      const controlPlanes = parseCount(flags["control-planes"], "--control-planes");
      const workers = flags.workers === "0" ? 0 : parseCount(flags.workers, "--workers");
      if (controlPlanes + workers > MAX_NODES) {
        throw new UsageError(`at most ${MAX_NODES} nodes: got ${controlPlanes + workers}`);
      }
      const network = flags.network;
      if (network !== "auto" && network !== "netns" && network !== "loopback") {
        throw new UsageError(`invalid --network "${network}": want netns, loopback or auto`);
      }
      return {
        command,
        stateDir,
        controlPlanes,
        workers,
        network,
        timeoutMs: timeoutMs(),
        corsAllowOrigins: corsAllowOrigins(),
      };
    }
    case "recover":
      return { command, stateDir, timeoutMs: timeoutMs(), corsAllowOrigins: corsAllowOrigins() };
    case "status": {
      const output = flags.output;
      if (output !== "table" && output !== "json") {
        throw new UsageError(`invalid --output "${output}": want table or json`);
      }
      return { command, stateDir, output };
    }
    default:
      return { command: "down", stateDir };
  }
}
