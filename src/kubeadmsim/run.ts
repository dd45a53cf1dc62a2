/**
 * One invocation of the recording kubeadm: parse the command line, read
 * and validate the configuration file, apply injected failures, run the
 * command under the node root, and record it (tokens redacted) in
 * `<root>/var/lib/kubeadm-sim/invocations.jsonl`.
 *
 * The root comes from `--root` or, when that is absent, the environment
 * variable {@linkcode ROOT_ENV}.
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { REDACTED, redactTokens } from "../kubernetes/bootstrap_token.ts";
import { type Invocation, parseArgs, takeRoot } from "./args.ts";
import { type CommandOutcome, runInit, runJoin, runKubeconfigUser } from "./commands.ts";
import {
  type InitSettings,
  initSettings,
  type JoinSettings,
  joinSettings,
  redactDocuments,
  secretsIn,
} from "./config.ts";
import { type Documents, type Json, splitDocuments } from "./documents.ts";
import { KubeadmSimError } from "./errors.ts";
import { takeInjectedFailure } from "./inject.ts";
import { appendRecord, type InvocationRecord, recordTime } from "./record.ts";
import { SimRoot } from "./root.ts";

/** The environment variable naming the node root when `--root` is not given. */
export const ROOT_ENV = "KUBEADM_SIM_ROOT";

/** What an invocation printed and its exit code. */
export interface SimResult {
  /** The process exit code (0 on success). */
  exitCode: number;
  /** Standard output (for `kubeconfig user`: the kubeconfig). */
  stdout: string;
  /** Standard error (warnings, the error). Never holds a token. */
  stderr: string;
}

/** Options for {@linkcode runKubeadmSim}. */
export interface RunOptions {
  /** Reads an environment variable (default: none set). */
  env?: (name: string) => string | undefined;
  /** Cancels a waiting invocation (join discovery). */
  signal?: AbortSignal;
}

/** Runs one invocation with `argv` (the arguments after the program name). Never throws for kubeadm failures. */
export async function runKubeadmSim(argv: readonly string[], options: RunOptions = {}): Promise<SimResult> {
  const record: InvocationRecord = { time: recordTime(), argv: [...argv], phases: [], exitCode: 0 };
  let secrets: string[] = [];
  let root: SimRoot | undefined;
  let stderr = "";
  let stdout = "";
  try {
    const rootText = takeRoot(argv).root ?? options.env?.(ROOT_ENV);
    if (!rootText) {
      throw new KubeadmSimError("usage", `kubeadm-sim: no node root: pass --root DIR or set ${ROOT_ENV}`);
    }
    root = new SimRoot(rootText);
    const invocation = parseArgs(argv);
    record.command = invocation.command;
    record.configPath = invocation.configPath;
    const documents = await readDocuments(invocation.configPath!);
    secrets = secretsIn(documents);
    record.documents = redactDocuments(documents);
    for (const warning of documents.warnings) stderr += warning + "\n";
    const outcome = await execute(root, invocation, documents, record, options.signal);
    record.phases = outcome.phases;
    if (outcome.notSimulated.length > 0) {
      stderr += `[kubeadm-sim] not simulated (need a running control plane): ${
        outcome.notSimulated.join(", ")
      }\n`;
    }
    stdout = outcome.stdout;
  } catch (error) {
    const failure = error instanceof KubeadmSimError ? error : new KubeadmSimError("io", errorMessage(error));
    record.exitCode = failure.exitCode;
    record.error = { reason: failure.reason, message: redactTokens(failure.message, secrets) };
    stderr += `${record.error.message}\n`;
  }
  if (root) {
    try {
      await appendRecord(root, record, secrets);
    } catch (error) {
      stderr += `kubeadm-sim: recording the invocation failed: ${(error as Error).message}\n`;
      if (record.exitCode === 0) record.exitCode = 1;
    }
  }
  return { exitCode: record.exitCode, stdout, stderr: redactTokens(stderr, secrets) };
}

async function readDocuments(path: string): Promise<Documents> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (error) {
    const why = error instanceof Deno.errors.NotFound ? "no such file or directory" : (error as Error).name;
    throw new KubeadmSimError("config", `unable to read config from "${path}" [open ${path}: ${why}]`);
  }
  return splitDocuments(text);
}

async function execute(
  root: SimRoot,
  invocation: Invocation,
  documents: Documents,
  record: InvocationRecord,
  signal: AbortSignal | undefined,
): Promise<CommandOutcome> {
  if (invocation.command === "join") {
    const settings = joinSettings(documents);
    record.summary = joinSummary(settings);
    await failIfInjected(root, invocation);
    return await runJoin(root, invocation, settings, { signal });
  }
  const settings = initSettings(documents);
  record.summary = initSummary(settings, invocation);
  await failIfInjected(root, invocation);
  switch (invocation.command) {
    case "init phase preflight":
      return await runInit(root, invocation, settings, "preflight");
    case "init phase certs all":
      return await runInit(root, invocation, settings, "certs");
    case "kubeconfig user":
      return await runKubeconfigUser(root, invocation, settings);
    default:
      return await runInit(root, invocation, settings);
  }
}

async function failIfInjected(root: SimRoot, invocation: Invocation): Promise<void> {
  const failure = await takeInjectedFailure(root, invocation.command);
  if (failure) throw failure;
}

function initSummary(settings: InitSettings, invocation: Invocation): Json {
  return {
    nodeName: settings.node.name,
    advertiseAddress: settings.advertiseAddress,
    bindPort: settings.bindPort,
    kubeletExtraArgs: settings.node.kubeletExtraArgs,
    clusterName: settings.cluster.clusterName,
    kubernetesVersion: settings.cluster.kubernetesVersion,
    controlPlaneEndpoint: settings.cluster.controlPlaneEndpoint,
    certSANs: settings.cluster.certSANs,
    skipPhases: [...settings.skipPhases, ...invocation.skipPhases],
    ...(invocation.command === "kubeconfig user"
      ? { clientName: invocation.clientName, orgs: invocation.orgs }
      : {}),
  };
}

function joinSummary(settings: JoinSettings): Json {
  return {
    nodeName: settings.node.name,
    kubeletExtraArgs: settings.node.kubeletExtraArgs,
    apiServerEndpoint: settings.discovery.apiServerEndpoint,
    token: REDACTED,
    caCertHashes: settings.discovery.caCertHashes,
    controlPlane: settings.controlPlane ?? null,
    skipPhases: settings.skipPhases,
  };
}
