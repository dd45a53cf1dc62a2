/**
 * `cli init`: the operator's side of the init (docs/attested-exchange.md
 * §7), on the init client library (`src/init/client.ts`).
 *
 * 1. reads and validates the attestation config, the Kubernetes components
 *    file (when given) and the init secret file, and checks the kubeconfig
 *    can be written, before anything else;
 * 2. reads the master secret file, or creates it (0600, never overwritten);
 * 3. chooses a fresh 32-byte measurement salt and builds the
 *    `kms://cluster-kms?key=…&salt=…` URI (the master secret travels only
 *    inside the request sealed to the attested key);
 * 4. runs the exchange: the node's evidence for a fresh nonce is validated
 *    against the config, and its attestation key must be a control plane's
 *    (`akTrust.controlPlaneKeyDigests`), then the sealed `Init` is sent.
 *    While the node does not answer (connection refused, `Unavailable`) and
 *    the Init has not been sent, it retries every {@linkcode RETRY_INTERVAL_MS}
 *    until `--timeout`;
 * 5. on success names each warn-only mismatch the evidence passed with,
 *    writes the admin kubeconfig (0600, never over an existing file) and
 *    prints the cluster ID (a stream that failed after the kubeconfig
 *    arrived is a warning: the node has finished); on failure writes the
 *    node's logs (those after its failure, else the last it streamed, at
 *    most `MAX_KEPT_LOG_BYTES`) to `--logs-out` and says why in words the
 *    operator can act on.
 *
 * Progress phases come from the exchange itself: the transport reports
 * which call is under way (`GetAttestation`: verifying the node; `Init`: the
 * node works), and the log stream what the node sends.
 *
 * @module
 */
import { Code } from "@connectrpc/connect";
import type { Transport } from "@connectrpc/connect";
import { initCluster, type InitParameters, type InitResult, LogBuffer } from "../init/client.ts";
import { NodeExchangeError } from "../init/node_exchange.ts";
import { MEASUREMENT_SALT_LENGTH } from "../init/protocol.ts";
import type { Logger } from "../log/logger.ts";
import { encodeMasterSecretUri, NO_STORE_URI } from "../kms/uri.ts";
import { readSecretFile, SecretFileError } from "../secrets/secret_file.ts";
import { nodeAttestation, readAttestationConfigFile } from "./attestation_config_file.ts";
import { readComponentsFile } from "./components_file.ts";
import { CliError, errorLine } from "./errors.ts";
import { loadOrCreateMasterSecretFile } from "./master_secret_file.ts";
import { connectNode } from "./node_connection.ts";
import { attestationRejectedHint, INIT_SERVER, wrongServerHint } from "./node_errors.ts";
import { saveKubeconfig } from "./kubeconfig_out.ts";
import { checkCreatable, describeFsError, writePrivateFile } from "./output_file.ts";
import type { Progress } from "./progress.ts";
import { warnAcceptedMismatches } from "./warning_logger.ts";

/** Pause between attempts while the node is unreachable. */
export const RETRY_INTERVAL_MS = 2_000;

/** What `cli init` is asked to do (its flags, parsed). */
export interface InitCommand {
  /** The node's init server, "host:port". */
  node: string;
  /** The attestation config file. */
  attestationConfig: string;
  /** The master secret file (read, or created when absent). */
  masterSecret: string;
  /** The file holding the init secret (its bcrypt hash is in the node's metadata). */
  initSecretFile: string;
  /** The Kubernetes version, e.g. "v1.30.2". */
  kubernetesVersion: string;
  /** The Kubernetes components file (`components_file.ts`); none are sent when absent. */
  kubernetesComponentsFile?: string;
  /** The cluster's name. */
  clusterName: string;
  /** Where the admin kubeconfig goes. */
  kubeconfigOut: string;
  /** Where the node's logs go after a failure. */
  logsOut: string;
  /** How long to wait for the node to answer, in ms. */
  timeoutMs: number;
  /** How long the node may take once it has the Init, in ms. */
  initTimeoutMs: number;
}

/** What {@linkcode runInit} needs besides the command. */
export interface InitEnvironment {
  /** Phases for the operator. */
  progress: Progress;
  /** Warnings: the validator's, each warn-only mismatch, a stream that failed after the kubeconfig arrived. */
  logger: Logger;
  /** Results (cluster ID, kubeconfig path) for stdout. */
  print(line: string): void;
  /** Interrupts (Ctrl-C). */
  signal?: AbortSignal;
}

/** Runs `cli init`. Resolves on success; throws {@linkcode CliError} naming what to fix. */
export async function runInit(command: InitCommand, env: InitEnvironment): Promise<InitResult> {
  const { progress } = env;
  const loaded = await readAttestationConfigFile(command.attestationConfig);
  const attestation = nodeAttestation(loaded, env.logger);
  const components = command.kubernetesComponentsFile === undefined
    ? []
    : await readComponentsFile(command.kubernetesComponentsFile);
  const initSecret = await readInitSecret(command.initSecretFile);
  await checkCreatable(command.kubeconfigOut, "kubeconfig");
  const { secret, created } = await loadOrCreateMasterSecretFile(command.masterSecret);
  // A line of its own, not a passing phase: a mistyped --master-secret makes a new secret, and the operator
  // must see that and back it up.
  if (created) {
    env.print(`created the master secret file ${command.masterSecret} (mode 0600): back it up`);
  }

  const parameters: InitParameters = {
    kmsUri: encodeMasterSecretUri(secret),
    storageUri: NO_STORE_URI,
    initSecret,
    measurementSalt: crypto.getRandomValues(new Uint8Array(MEASUREMENT_SALT_LENGTH)),
    attestationConfig: loaded.text,
    kubernetesVersion: command.kubernetesVersion,
    kubernetesComponents: components,
    clusterName: command.clusterName,
  };
  let result: InitResult;
  try {
    result = await initWithRetry(command, parameters, attestation, env);
  } catch (error) {
    progress.done();
    if (!(error instanceof InitFailure)) throw error;
    throw await describeFailure(error, command);
  } finally {
    initSecret.fill(0);
  }
  progress.done();
  warnAcceptedMismatches(env.logger, command.node, result.warnings);
  const saved = await saveKubeconfig(command.kubeconfigOut, result.kubeconfig, result.clusterId);
  for (const failure of saved.failures) env.print(`warning: ${failure}`);
  if (saved.failures.length > 0) env.print(`warning: the kubeconfig went to ${saved.path} instead`);
  env.print("cluster initialized");
  env.print(`cluster ID: ${result.clusterId.toHex()}`);
  env.print(`kubeconfig: ${saved.path} (mode 0600; kubectl --kubeconfig ${saved.path} get nodes)`);
  return result;
}

/**
 * Writes a failed init's node logs to `path` (0600); returns the note for
 * the failure's message. Logs that cannot be written are a note on the
 * failure, never its replacement: the operator still reads why it failed.
 */
export async function saveNodeLogs(path: string, logs: Uint8Array): Promise<string> {
  try {
    await writePrivateFile(path, logs, "node logs");
    return `; the node's logs are in ${path}`;
  } catch (error) {
    return `; the node's logs were not saved: ${errorLine(error)}`;
  }
}

/** An {@linkcode NodeExchangeError} with what the CLI knows about the attempt. */
class InitFailure extends Error {
  constructor(
    readonly error: NodeExchangeError,
    readonly timedOut: "connect" | "init" | undefined,
    readonly attempts: number,
    /** The last of the logs the node streamed (a bounded tail). */
    readonly streamed: LogBuffer,
    /** Whether the Init itself reached the node (not only the attestation). */
    readonly initSent = false,
  ) {
    super(error.message, { cause: error });
  }
}

/** The init exchange, retried while the node is unreachable and the Init not yet sent. */
async function initWithRetry(
  command: InitCommand,
  parameters: InitParameters,
  attestation: ReturnType<typeof nodeAttestation>,
  env: InitEnvironment,
): Promise<InitResult> {
  const { progress } = env;
  const deadline = Date.now() + command.timeoutMs;
  for (let attempt = 1;; attempt++) {
    const attemptAbort = new AbortController();
    let timedOut: "connect" | "init" | undefined;
    let initSent = false;
    // Only their tail: a node may stream without end, and the newest lines say where it stopped.
    const streamed = new LogBuffer("tail");
    let streamedBytes = 0;
    let timer = setTimeout(() => {
      timedOut = "connect";
      attemptAbort.abort(new Error("deadline"));
    }, Math.max(0, deadline - Date.now()));
    const signal = env.signal ? AbortSignal.any([env.signal, attemptAbort.signal]) : attemptAbort.signal;
    using connection = connectNode(command.node);
    const transport = observedTransport(connection.transport, (method) => {
      if (method === "GetAttestation") {
        progress.phase(`verifying the attestation of node ${command.node}`);
      } else if (method === "Init") {
        initSent = true;
        clearTimeout(timer);
        timer = setTimeout(() => {
          timedOut = "init";
          attemptAbort.abort(new Error("init deadline"));
        }, command.initTimeoutMs);
        progress.phase(
          "attestation verified; the node initializes: state disk, node lock, kubeadm init, cluster objects",
        );
      }
    });
    try {
      return await untilAborted(
        signal,
        initCluster(parameters, {
          transport,
          ...attestation,
          signal,
          onLog: (chunk) => {
            streamed.add(chunk);
            streamedBytes += chunk.length;
            progress.phase(`receiving the node's logs (${Math.ceil(streamedBytes / 1024)} KiB)`);
          },
        }),
      );
    } catch (error) {
      if (!(error instanceof NodeExchangeError)) throw error;
      const retry = error.reason === "unavailable" && !initSent && !env.signal?.aborted &&
        Date.now() + RETRY_INTERVAL_MS < deadline;
      if (!retry) throw new InitFailure(error, timedOut, attempt, streamed, initSent);
      progress.phase(
        `waiting for node ${command.node} to answer (attempt ${attempt}: ${shorten(error.message)})`,
      );
      await delay(RETRY_INTERVAL_MS, env.signal);
      if (env.signal?.aborted) {
        throw new InitFailure(
          new NodeExchangeError("canceled", "canceled"),
          undefined,
          attempt,
          new LogBuffer("tail"),
        );
      }
    } finally {
      clearTimeout(timer);
    }
  }
}

/** The failure in the operator's words; the node's logs are written first when it sent any. */
async function describeFailure(failure: InitFailure, command: InitCommand): Promise<CliError> {
  const { error } = failure;
  let logsNote = "";
  const logs = error.logs.length > 0 ? error.logs : failure.streamed.kept();
  if (logs.length > 0) logsNote = await saveNodeLogs(command.logsOut, logs);
  switch (error.reason) {
    case "attestation-rejected":
      return new CliError(
        "attestation",
        `${error.message}${attestationRejectedHint(error, command.attestationConfig)}`,
        { cause: error },
      );
    case "refused":
      if (isInitSecretRefusal(error)) {
        return new CliError(
          "init-secret",
          `the node refused the init secret from ${command.initSecretFile}: it does not match the bcrypt hash the node reads from its metadata (/initsecrethash). Use the init secret the cluster's nodes were created with${logsNote}`,
          { cause: error },
        );
      }
      return new CliError(
        "refused",
        `${error.message}${wrongServerHint(error.code, INIT_SERVER)}${logsNote}`,
        {
          cause: error,
        },
      );
    case "unavailable":
      if (failure.initSent) {
        return new CliError(
          "unreachable",
          `node ${command.node}: ${error.message}${logsNote}${UNANSWERED_INIT}`,
          {
            cause: error,
          },
        );
      }
      return new CliError(
        "unreachable",
        failure.timedOut === "connect" || failure.attempts > 1
          ? `node ${command.node} did not answer within --timeout ${
            command.timeoutMs / 1000
          } s (${failure.attempts} attempts; last: ${
            shorten(error.message)
          }): check --node (host and init server port, default 9000) and that the node's bootstrapper is running`
          : `node ${command.node}: ${error.message}${logsNote}`,
        { cause: error },
      );
    case "canceled":
      if (failure.timedOut === "connect") {
        return new CliError(
          "unreachable",
          `node ${command.node} did not answer within --timeout ${
            command.timeoutMs / 1000
          } s: check --node and that the node's bootstrapper is running`,
          { cause: error },
        );
      }
      if (failure.timedOut === "init") {
        return new CliError(
          "refused",
          `the node did not finish the init within --init-timeout ${
            command.initTimeoutMs / 1000
          } s${logsNote}${UNANSWERED_INIT}`,
          { cause: error },
        );
      }
      return new CliError("canceled", `init canceled${logsNote}${failure.initSent ? UNANSWERED_INIT : ""}`, {
        cause: error,
      });
    default:
      return new CliError("protocol", `${error.message}${logsNote}`, { cause: error });
  }
}

/**
 * Said when the Init reached the node and no answer came back: the node may
 * be past its lock and go on, and its answer cannot be had again.
 */
const UNANSWERED_INIT =
  ". The Init reached the node: if it took its node lock it goes on initializing by itself (for at most 25 minutes), and a new cli init is refused; its kubeconfig is sent once, sealed to this run's key, and cannot be fetched again";

/** Whether the node refused because the init secret does not match its metadata's hash. */
function isInitSecretRefusal(error: NodeExchangeError): boolean {
  return error.code === Code.PermissionDenied && /invalid init secret/.test(error.serverMessage ?? "");
}

/**
 * Reads the init secret: the file's bytes, without one trailing newline (a
 * file written with `echo`). Throws {@linkcode CliError} "input".
 */
export async function readInitSecret(path: string): Promise<Uint8Array> {
  let bytes: Uint8Array;
  try {
    bytes = await readSecretFile(path, { description: "init secret", minLength: 1 });
  } catch (error) {
    if (error instanceof SecretFileError) {
      // An unreadable file is worded as the CLI's other input files are: the CLI's permissions are a
      // deno.json set, which has no --allow-read to add.
      const problem = error.reason === "too-short"
        ? error.message
        : `cannot read init secret file ${path}: ${describeFsError(error.cause, path, "read")}`;
      throw new CliError("input", `${problem} (--init-secret-file)`, { cause: error });
    }
    throw error;
  }
  let end = bytes.length;
  if (bytes[end - 1] === 0x0a) end--;
  if (bytes[end - 1] === 0x0d) end--;
  if (end === 0) throw new CliError("input", `init secret file ${path} is empty (--init-secret-file)`);
  const secret = bytes.slice(0, end);
  bytes.fill(0);
  return secret;
}

/**
 * A transport that reports each call's method name before making it.
 *
 * The exchange runs without an abort signal (one suspect of the
 * "Premature close" seen when the node exits right after its answer; not
 * confirmed): it is left instead by {@linkcode untilAborted}, and its
 * connection closed.
 */
function observedTransport(transport: Transport, onCall: (method: string) => void): Transport {
  return {
    unary(method, ...rest) {
      onCall(method.name);
      return transport.unary(method, ...rest);
    },
    stream(method, ...rest) {
      onCall(method.name);
      return transport.stream(method, ...rest);
    },
  };
}

/** How long an aborted exchange gets to hand over what it holds (it was given the same signal). */
const AFTER_ABORT_GRACE_MS = 2_000;

/**
 * `work`, or a "canceled" {@linkcode NodeExchangeError} once `signal`
 * aborts, unless `work` then ends with a value within
 * {@linkcode AFTER_ABORT_GRACE_MS}: the exchange ends at once on the same
 * signal, and one that holds the node's kubeconfig (sent once, never again)
 * returns it, as when a node keeps the stream open after its answer until
 * `--init-timeout` or Ctrl-C.
 */
function untilAborted<T>(signal: AbortSignal, work: Promise<T>): Promise<T> {
  const canceled = () => new NodeExchangeError("canceled", "canceled");
  if (signal.aborted) return Promise.reject(canceled());
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      const grace = setTimeout(() => reject(canceled()), AFTER_ABORT_GRACE_MS);
      work.then(resolve, () => reject(canceled())).finally(() => clearTimeout(grace));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(resolve, (error) => {
      if (!signal.aborted) reject(error);
    }).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

function shorten(text: string): string {
  const line = text.split("\n")[0];
  return line.length > 160 ? `${line.slice(0, 157)}...` : line;
}

function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
