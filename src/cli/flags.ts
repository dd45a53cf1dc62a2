/**
 * The CLI's command line: `cli <command> [flags]` with the commands `init`,
 * `verify` and `recover`. A bad command line is a {@linkcode UsageError}
 * (one line, exit status 2).
 *
 * @module
 */
import { basename, dirname, join, resolve } from "node:path";
import { parseEndpointFlag, parseFlags, parseSeconds, UsageError } from "../flags/flags.ts";
import { initParameterProblem } from "../init/parameters.ts";
import type { InitCommand } from "./init.ts";
import type { RecoverCommand, RecoverNodeCommand } from "./recover.ts";
import type { VerifyOutput } from "./verify_report.ts";

/** A parsed command line. */
export type CliCommand =
  | { command: "init"; init: InitCommand }
  | {
    command: "verify";
    /** A node to ask (`--node`), or evidence saved to a file (`--evidence`). */
    source: { node: string } | { evidenceFile: string };
    attestationConfig: string;
    output: VerifyOutput;
    timeoutMs: number;
  }
  | { command: "recover"; recover: RecoverCommand }
  | { command: "recover-node"; recover: RecoverNodeCommand };

/** Defaults of `cli init`. */
export const INIT_DEFAULTS = {
  clusterName: "constell",
  kubeconfigOut: "constellation-admin.conf",
  logsOut: "constellation-init.log",
  timeoutSeconds: 300,
  initTimeoutSeconds: 1800,
};

/** Default of `cli verify --timeout`: how long to wait for the node's evidence. */
const VERIFY_TIMEOUT_SECONDS = 30;

/** Usage text for `--help`. */
export const CLI_USAGE = `Usage: cli <command> [flags]

The operator's CLI of a confidential Kubernetes cluster.

Commands:
  init      initialize the cluster on its first control-plane node
  verify    check a node's attestation against the attestation config
  recover   bring back a control-plane node that no join service can rejoin (--node),
            or derive a node's state disk key from the master secret (--disk-uuid)

cli init --node HOST:PORT --attestation-config FILE --master-secret FILE
         --init-secret-file FILE --kubernetes-version V [flags]
  --node <host:port>            the first node's init server (port 9000 by default on nodes)
  --attestation-config <file>   variant, measurements and trusted attestation keys (JSON)
  --master-secret <file>        {"key": "<base64>", "salt": "<base64>"}; created (mode 0600)
                                when absent, never overwritten. Keep it: it recovers every disk
  --init-secret-file <file>     the init secret whose bcrypt hash the nodes' metadata serves
                                (one trailing newline is ignored)
  --kubernetes-version <v>      e.g. v1.30.2
  --kubernetes-components <file>
                                what every node installs: a JSON array of {"url": "https://…" or
                                "data:…", "hash": "sha256:<64 hex>", "installPath": "/opt/cni/bin",
                                "extract": true} (default: none)
  --cluster-name <name>         (default ${INIT_DEFAULTS.clusterName})
  --kubeconfig-out <file>       admin kubeconfig, written 0600, never overwritten
                                (default ${INIT_DEFAULTS.kubeconfigOut})
  --logs-out <file>             the node's logs after a failure (default ${INIT_DEFAULTS.logsOut})
  --timeout <seconds>           how long to retry an unreachable node (default ${INIT_DEFAULTS.timeoutSeconds})
  --init-timeout <seconds>      how long the node may take to initialize (default ${INIT_DEFAULTS.initTimeoutSeconds})

cli verify (--node HOST:PORT | --evidence FILE) --attestation-config FILE [--output table|json]
           [--timeout <seconds>]   (default table, ${VERIFY_TIMEOUT_SECONDS} s)
  Fresh nonce, the node's evidence, validated; every PCR of the config with the node's
  value. Exit status 0 only when the attestation passes. --evidence checks evidence saved
  to a file instead (the browser console's "Download evidence"), for the nonce in it.

cli recover --node HOST:PORT [--node HOST:PORT …] --master-secret FILE --attestation-config FILE
            [--timeout <seconds>]
  The node's rejoin serves the recovery on port 9999 while no join service answers it.
  Its attestation is verified against the config, then the master secret is sent sealed to
  it; the node derives its disk key and cluster ID and boots on. Every --node is tried in
  order (all control planes after a full power-off), also after one failed. --timeout: how
  long to wait for each node (default ${VERIFY_TIMEOUT_SECONDS} s).

cli recover --master-secret FILE --disk-uuid UUID (--out FILE | --print-hex)
  The disk key (raw 32 bytes) to a new 0600 file, for cryptsetup open --key-file FILE;
  or as hex on stdout with --print-hex.

Exit status: 0 success, 1 failure (the message says what to fix), 2 bad command line.
`;

const COMMANDS = ["init", "verify", "recover"];

/** Parses the CLI's arguments; "help" for `--help` anywhere. */
export function parseCliArgs(args: string[]): CliCommand | "help" {
  if (args.includes("--help") || args.includes("-h")) return "help";
  const [command, ...rest] = args;
  if (command === undefined) throw new UsageError(`missing command: one of ${COMMANDS.join(", ")}`);
  switch (command) {
    case "init":
      return { command, init: parseInitFlags(rest) };
    case "verify":
      return parseVerifyFlags(rest);
    case "recover":
      return parseRecoverFlags(rest);
    default:
      throw new UsageError(`unknown command "${command}": one of ${COMMANDS.join(", ")}`);
  }
}

function required(value: string | undefined, flag: string): string {
  if (value === undefined || value === "") throw new UsageError(`missing ${flag}`);
  return value;
}

/** A flag's value, undefined when not given; given empty, a usage error (a default must not stand in silently). */
function nonEmpty(value: string | undefined, flag: string): string | undefined {
  if (value === "") throw new UsageError(`${flag} must not be empty`);
  return value;
}

/**
 * Refuses `output` (the file of flag `outputFlag`) when it is the file of
 * one of `others` ([path, flag]; an absent optional file is undefined).
 */
function refuseSameFile(output: string, outputFlag: string, others: [string | undefined, string][]): void {
  const names = namesOfFile(output);
  for (const [other, flag] of others) {
    if (other === undefined) continue;
    const same = [...namesOfFile(other)].find((name) => names.has(name));
    if (same !== undefined) {
      throw new UsageError(`${outputFlag} must not be the file of ${flag} (both name ${same})`);
    }
  }
}

/**
 * The absolute paths by which `path` reaches its file: as written; through
 * its directory's real path (a symlinked directory); and the file's own
 * real path when it exists (a symlink to it). Two paths that share one name
 * the same file.
 */
function namesOfFile(path: string): Set<string> {
  const absolute = resolve(path);
  const names = new Set([absolute]);
  const directory = realPathOrUndefined(dirname(absolute));
  if (directory !== undefined) names.add(join(directory, basename(absolute)));
  const file = realPathOrUndefined(absolute);
  if (file !== undefined) names.add(file);
  return names;
}

/**
 * `path`'s real path, or undefined when it cannot be had (it does not exist,
 * or lies outside the CLI's read permissions): the command reports that
 * file's problem itself when it gets to it.
 */
function realPathOrUndefined(path: string): string | undefined {
  try {
    return Deno.realPathSync(path);
  } catch {
    return undefined;
  }
}

function seconds(value: string | undefined, flag: string, fallback: number): number {
  return value === undefined ? fallback * 1000 : parseSeconds(value, flag);
}

const NODE_EXAMPLE = "10.0.0.5:9000";
const RECOVER_NODE_EXAMPLE = "10.0.0.5:9999";
/** A disk UUID as cryptsetup and the bootstrapper report it (either case). */
const DISK_UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

function parseInitFlags(args: string[]): InitCommand {
  const flags = parseFlags(
    args,
    {
      node: { type: "string" },
      "attestation-config": { type: "string" },
      "master-secret": { type: "string" },
      "init-secret-file": { type: "string" },
      "kubernetes-version": { type: "string" },
      "kubernetes-components": { type: "string" },
      "cluster-name": { type: "string" },
      "kubeconfig-out": { type: "string" },
      "logs-out": { type: "string" },
      timeout: { type: "string" },
      "init-timeout": { type: "string" },
    },
    "cli init",
    { repeated: "refuse" },
  );
  const command: InitCommand = {
    node: parseEndpointFlag(required(flags.node, "--node"), "--node", NODE_EXAMPLE),
    attestationConfig: required(flags["attestation-config"], "--attestation-config"),
    masterSecret: required(flags["master-secret"], "--master-secret"),
    initSecretFile: required(flags["init-secret-file"], "--init-secret-file"),
    kubernetesVersion: required(flags["kubernetes-version"], "--kubernetes-version"),
    kubernetesComponentsFile: flags["kubernetes-components"] === undefined
      ? undefined
      : required(flags["kubernetes-components"], "--kubernetes-components"),
    clusterName: flags["cluster-name"] ?? INIT_DEFAULTS.clusterName,
    kubeconfigOut: nonEmpty(flags["kubeconfig-out"], "--kubeconfig-out") ?? INIT_DEFAULTS.kubeconfigOut,
    logsOut: nonEmpty(flags["logs-out"], "--logs-out") ?? INIT_DEFAULTS.logsOut,
    timeoutMs: seconds(flags.timeout, "--timeout", INIT_DEFAULTS.timeoutSeconds),
    initTimeoutMs: seconds(flags["init-timeout"], "--init-timeout", INIT_DEFAULTS.initTimeoutSeconds),
  };
  const problem = initParameterProblem(
    command,
    (parameter) => parameter === "kubernetesVersion" ? "--kubernetes-version" : "--cluster-name",
  );
  if (problem !== undefined) throw new UsageError(problem);
  const inputs: [string | undefined, string][] = [
    [command.attestationConfig, "--attestation-config"],
    [command.masterSecret, "--master-secret"],
    [command.initSecretFile, "--init-secret-file"],
    [command.kubernetesComponentsFile, "--kubernetes-components"],
  ];
  // The kubeconfig is written after the init, which cannot be had again: it must have a file of its own.
  refuseSameFile(command.kubeconfigOut, "--kubeconfig-out", inputs);
  // The logs file is replaced after a failed init: the input files (the init secret among them, without
  // which no node can be initialized) and the kubeconfig must not be it.
  refuseSameFile(command.logsOut, "--logs-out", [...inputs, [command.kubeconfigOut, "--kubeconfig-out"]]);
  return command;
}

function parseVerifyFlags(args: string[]): CliCommand {
  const flags = parseFlags(
    args,
    {
      node: { type: "string" },
      evidence: { type: "string" },
      "attestation-config": { type: "string" },
      output: { type: "string" },
      timeout: { type: "string" },
    },
    "cli verify",
    { repeated: "refuse" },
  );
  if (flags.node !== undefined && flags.evidence !== undefined) {
    throw new UsageError("give --node or --evidence, not both");
  }
  const output = flags.output ?? "table";
  if (output !== "table" && output !== "json") {
    throw new UsageError(`invalid --output "${output}": want table or json`);
  }
  return {
    command: "verify",
    source: flags.evidence !== undefined
      ? { evidenceFile: required(flags.evidence, "--evidence") }
      : { node: parseEndpointFlag(required(flags.node, "--node (or --evidence)"), "--node", NODE_EXAMPLE) },
    attestationConfig: required(flags["attestation-config"], "--attestation-config"),
    output,
    timeoutMs: seconds(flags.timeout, "--timeout", VERIFY_TIMEOUT_SECONDS),
  };
}

/** The `--node` values of `cli recover`: endpoints, none twice. */
function recoverNodes(values: string[]): string[] {
  const nodes = values.map((value) =>
    parseEndpointFlag(required(value, "--node"), "--node", RECOVER_NODE_EXAMPLE)
  );
  const twice = nodes.find((node, i) => nodes.indexOf(node) !== i);
  if (twice !== undefined) throw new UsageError(`--node ${twice} is given twice`);
  return nodes;
}

function parseRecoverFlags(args: string[]): CliCommand {
  const flags = parseFlags(
    args,
    {
      node: { type: "string", multiple: true },
      "master-secret": { type: "string" },
      "attestation-config": { type: "string" },
      timeout: { type: "string" },
      "disk-uuid": { type: "string" },
      out: { type: "string" },
      "print-hex": { type: "boolean" },
    },
    "cli recover",
    { repeated: "refuse" },
  );
  const masterSecret = required(flags["master-secret"], "--master-secret");
  if (flags.node !== undefined) {
    for (const offline of ["disk-uuid", "out", "print-hex"] as const) {
      if (flags[offline] !== undefined) throw new UsageError(`give --node or --${offline}, not both`);
    }
    return {
      command: "recover-node",
      recover: {
        nodes: recoverNodes(flags.node),
        masterSecret,
        attestationConfig: required(flags["attestation-config"], "--attestation-config"),
        timeoutMs: seconds(flags.timeout, "--timeout", VERIFY_TIMEOUT_SECONDS),
      },
    };
  }
  for (const online of ["attestation-config", "timeout"] as const) {
    if (flags[online] !== undefined) throw new UsageError(`--${online} needs --node`);
  }
  const diskUuid = required(flags["disk-uuid"], "--disk-uuid (or --node)");
  if (!DISK_UUID.test(diskUuid)) {
    throw new UsageError(
      `invalid --disk-uuid "${diskUuid}": want a UUID like 0123abcd-0000-4000-8000-00000000cafe`,
    );
  }
  if (flags.out !== undefined && flags["print-hex"]) {
    throw new UsageError("give --out or --print-hex, not both");
  }
  if (flags.out === undefined && !flags["print-hex"]) {
    throw new UsageError("give --out FILE (a new 0600 key file) or --print-hex (the key as hex on stdout)");
  }
  return {
    command: "recover",
    recover: {
      masterSecret,
      diskUuid,
      output: flags.out !== undefined ? { file: required(flags.out, "--out") } : "stdout-hex",
    },
  };
}
