/**
 * What `cluster up` and `cluster status` print: the nodes' phases (a block
 * redrawn in place on a terminal, one line per change otherwise) and the
 * summary with where everything is and how to look inside.
 *
 * @module
 */
import { consoleOrigin } from "../console/address.ts";
import { DEFAULT_STATE_DIR } from "./flags.ts";
import type { ClusterStatus, NodeStatus } from "./status.ts";

/** Shows phase changes as they happen. */
export interface LiveView {
  /** Shows `status` (only what changed, off a terminal). */
  update(status: ClusterStatus): void;
  /** Ends the live part (a terminal's block stays as it was last drawn). */
  done(): void;
}

/** Options of {@linkcode createLiveView}. */
export interface LiveViewOptions {
  /** Where text goes; default stderr. */
  write?: (text: string) => void;
  /** A terminal redraws the node table in place; default: stderr is one. */
  terminal?: boolean;
  /** The clock, in ms; default `Date.now`. */
  now?: () => number;
}

/** Creates the live view of `cluster up`. */
export function createLiveView(options: LiveViewOptions = {}): LiveView {
  const encoder = new TextEncoder();
  const write = options.write ?? ((text: string) => Deno.stderr.writeSync(encoder.encode(text)));
  const terminal = options.terminal ?? Deno.stderr.isTerminal();
  const now = options.now ?? Date.now;
  const start = now();
  const seen = new Map<string, string>();
  let drawnLines = 0;
  let last: ClusterStatus | undefined;
  let timer: ReturnType<typeof setInterval> | undefined;
  const elapsed = () => `${((now() - start) / 1000).toFixed(1)}s`;

  const redraw = () => {
    if (last === undefined) return;
    const lines = [`[${elapsed()}] cluster ${last.state}`, ...nodeTable(last.nodes)];
    const up = drawnLines > 0 ? `\x1b[${drawnLines}A` : "";
    write(`${up}${lines.map((line) => `\r\x1b[2K${line}\n`).join("")}`);
    drawnLines = lines.length;
  };

  return {
    update(status) {
      last = status;
      if (terminal) {
        timer ??= setInterval(redraw, 1000);
        redraw();
        return;
      }
      for (const node of status.nodes) {
        const shown = describePhase(node);
        if (seen.get(node.name) === shown) continue;
        seen.set(node.name, shown);
        write(`[${elapsed()}] ${node.name}: ${shown}\n`);
      }
    },
    done() {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
      if (terminal) redraw();
    },
  };
}

/** A node's phase with its reason, e.g. "refused (PCR[4] mismatch …)". */
export function describePhase(node: NodeStatus): string {
  return node.reason === undefined ? node.phase : `${node.phase} (${node.reason})`;
}

/** The node table: name, role, address, phase. */
export function nodeTable(nodes: readonly NodeStatus[]): string[] {
  const rows = [
    ["NODE", "ROLE", "ADDRESS", "PHASE"],
    ...nodes.map((node) => [node.name, node.role, node.address, describePhase(node)]),
  ];
  const widths = [0, 1, 2].map((column) => Math.max(...rows.map((row) => row[column].length)));
  return rows.map((row) => row.map((cell, i) => i < 3 ? cell.padEnd(widths[i]) : cell).join("  ").trimEnd());
}

/** Shortens `path` to be relative to `cwd` when it lies below it. */
function shown(path: string, cwd: string): string {
  return path.startsWith(`${cwd}/`) ? path.slice(cwd.length + 1) : path;
}

/**
 * The summary after `up` (and in `status`): nodes joined and the time taken,
 * where the API, kubeconfig, secrets, logs and state are, and the commands to
 * look inside, verify or recover a node, and stop (or, once stopped, recover
 * the cluster).
 */
export function summary(status: ClusterStatus, cwd: string): string {
  const joined = status.nodes.filter((node) => node.phase === "joined").length;
  const path = (p: string) => shown(p, cwd);
  // A node's attestation RPC serves while its bootstrapper runs, i.e. until it has joined.
  const waiting = status.nodes.find((node) => node.phase !== "joined" && node.initEndpoint !== undefined);
  const network = status.network.kind === "netns"
    ? `netns, bridge ${status.network.bridge} at ${status.network.hostAddress}`
    : "loopback";
  const time = status.upSeconds === undefined ? "" : ` in ${status.upSeconds} s`;
  const lines = [
    `Cluster ${status.state}: ${joined} of ${status.nodes.length} nodes joined${time} (network: ${network}).`,
    ...(status.reason === undefined ? [] : [`  reason           ${status.reason}`]),
    ...(status.clusterId === undefined ? [] : [`  cluster ID       ${status.clusterId}`]),
    ...(status.apiServer === undefined ? [] : [`  Kubernetes API   ${status.apiServer}`]),
    `  kubeconfig       ${path(status.kubeconfig)}`,
    `  master secret    ${path(`${status.stateDir}/secrets/master-secret.json`)} (recovers every disk)`,
    `  logs             ${path(status.logs)}/`,
    `  state            ${path(status.stateDir)}/`,
    "",
    "Look inside:",
    `  kubectl --kubeconfig ${path(status.kubeconfig)} get joiningnodes,secrets -n kube-system`,
    `  npx deno task console --local-cluster ${
      path(status.stateDir)
    }   (the browser console, ${consoleOrigin()}/)`,
  ];
  const attestationConfig = path(`${status.stateDir}/attestation-config.json`);
  if (waiting !== undefined) {
    lines.push(
      `Why has ${waiting.name} not joined? Check its attestation:`,
      `  npx deno task cli verify --node ${waiting.initEndpoint} --attestation-config ${attestationConfig}`,
    );
  }
  for (const node of status.nodes.filter((node) => node.recoveryEndpoint !== undefined)) {
    lines.push(
      `${node.name} waits for a join service or the operator's recovery:`,
      `  npx deno task cli recover --node ${node.recoveryEndpoint} --master-secret ${
        path(`${status.stateDir}/secrets/master-secret.json`)
      } --attestation-config ${attestationConfig}`,
    );
  }
  // The commands work from the working directory as shown: another state directory must be named.
  const stateDirFlag = path(status.stateDir) === DEFAULT_STATE_DIR
    ? ""
    : ` --state-dir ${path(status.stateDir)}`;
  if (status.state === "running" || status.state === "starting") {
    lines.push(
      `Stop: Ctrl-C in the terminal of \`cluster up\`, or \`npx deno task cluster down${stateDirFlag}\`.`,
    );
  } else if (status.clusterId !== undefined) {
    lines.push(`Bring it back: npx deno task cluster recover${stateDirFlag}`);
  }
  return lines.join("\n") + "\n";
}
