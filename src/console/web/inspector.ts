/**
 * The node attestation inspector: the operator names a node's browser port;
 * the page draws a fresh nonce, asks the node for its evidence
 * (`init.API/GetAttestation` with connect-web), verifies it here with the
 * validators and the verification report `cli verify` uses
 * (`src/verification/report.ts`), and shows every PCR of the loaded config:
 * expected, actual, enforced or warn-only, and whether it matches. The raw
 * evidence can be downloaded, and `cli verify --evidence` reaches the same
 * verdict for it.
 *
 * @module
 */
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { API as InitAPI } from "../../gen/init/init_pb.ts";
import { encodeEvidenceFile } from "../../verification/evidence_file.ts";
import {
  EvidenceAnswerError,
  evidenceFromAnswer,
  matchText,
  mismatchSummary,
  newAttestationNonce,
  type NodeEvidence,
  type PcrRow,
  policyText,
  renderVerifyJson,
  verdictText,
  verifyNodeEvidence,
  type VerifyResult,
  whyText,
} from "../../verification/report.ts";
import { currentConfig, loadConfig, onConfigChange } from "./attestation_config.ts";
import { baseUrlOf, describeCallError } from "./call_errors.ts";
import { badge, byId, cell, download, setStatus } from "./dom.ts";
import { collectingLogger } from "./page_logger.ts";

/** How long the node may take to answer (a TPM quote takes a moment). */
const CALL_TIMEOUT_MS = 15_000;
const NODE_EXAMPLE = "10.42.0.3:9001";

/** The last verification, for the downloads. */
interface Inspection {
  evidence: NodeEvidence;
  fetchedAt: number;
  result: VerifyResult;
}

/** Wires the inspector's form, config loaders and downloads. */
export function setUpInspector(): void {
  const form = byId<HTMLFormElement>("inspect-form");
  const nodeInput = byId<HTMLInputElement>("inspect-node");
  const submit = byId<HTMLButtonElement>("inspect-button");
  const status = byId("inspect-status");
  let last: Inspection | undefined;
  // The inspection under way. A new one aborts it: the disabled button stops only clicks, and the cluster
  // view's buttons submit the form while one runs, so without this a slow node answering last would show
  // its verdict (and give its evidence to the downloads) in place of the node asked last.
  let current: AbortController | undefined;

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    current?.abort();
    const inspection = new AbortController();
    current = inspection;
    last = undefined;
    submit.disabled = true;
    try {
      last = await inspect(nodeInput.value, status, inspection.signal);
    } catch (error) {
      if (!inspection.signal.aborted) throw error; // else a newer inspection took over: this one stopped
    } finally {
      if (current === inspection) submit.disabled = false;
    }
  });
  byId("download-evidence").addEventListener("click", () => {
    if (!last) return;
    download(evidenceFileName(last), encodeEvidenceFile(last.evidence, last.fetchedAt));
  });
  byId("download-report").addEventListener("click", () => {
    if (!last) return;
    download(evidenceFileName(last).replace(/^evidence-/, "result-"), renderVerifyJson(last.result));
  });
  setUpConfigLoaders();
  onConfigChange(showConfigSummary);
}

/** Fills the node field and verifies it at once (from the cluster view). */
export function inspectNode(address: string): void {
  const input = byId<HTMLInputElement>("inspect-node");
  input.value = address;
  input.focus(); // the button pressed in the cluster view is hidden now: keep the keyboard in this view
  byId<HTMLFormElement>("inspect-form").requestSubmit();
}

/** Where a config loaded from the local cluster came from, in words. */
const CLUSTER_CONFIG_SOURCE = "the local cluster's attestation config";

/**
 * Loads the local cluster's attestation config, when the console serves one
 * (again when it changed: the cluster adds each new node's key to it).
 */
export async function loadClusterConfig(signal?: AbortSignal): Promise<void> {
  const response = await fetch("/api/attestation-config", { cache: "no-store", signal });
  if (response.status === 404) return; // not pointed at a local cluster
  if (!response.ok) {
    throw new Error(`the console could not read the cluster's attestation config (${response.status})`);
  }
  const text = await response.text();
  if (text !== currentConfig()?.text) await loadConfig(text, CLUSTER_CONFIG_SOURCE);
}

/**
 * Verifies the node at `address` and shows how it went. Once `signal`
 * aborts (a newer inspection started) it shows nothing more: its next step
 * throws the abort's reason instead, so only the newest inspection ever
 * writes the status line or the result.
 */
async function inspect(
  address: string,
  status: HTMLElement,
  signal: AbortSignal,
): Promise<Inspection | undefined> {
  const say = (text: string, kind?: "info" | "error") => {
    signal.throwIfAborted();
    setStatus(status, text, kind);
  };
  const resultBox = byId("inspect-result");
  resultBox.hidden = true;
  let baseUrl: string;
  try {
    baseUrl = baseUrlOf(address, NODE_EXAMPLE);
  } catch (error) {
    say((error as Error).message, "error");
    return undefined;
  }
  // The cluster's config as it is now, unless the operator loaded another one.
  if (currentConfig()?.source === CLUSTER_CONFIG_SOURCE) {
    try {
      await loadClusterConfig(signal);
    } catch (error) {
      say(`Cannot reload ${CLUSTER_CONFIG_SOURCE}: ${(error as Error).message}`, "error");
      return undefined;
    }
  }
  const loaded = currentConfig();
  if (loaded === undefined) {
    say("Load an attestation config first: the evidence is verified against it.", "error");
    return undefined;
  }
  if (globalThis.crypto?.subtle === undefined) {
    say(
      "This page cannot verify: browsers give WebCrypto only to secure contexts. Open the console at http://127.0.0.1 (or https).",
      "error",
    );
    return undefined;
  }
  const node = new URL(baseUrl).host;
  say(`Asking ${node} for evidence over a fresh nonce…`);
  const client = createClient(InitAPI, createConnectTransport({ baseUrl }));
  const nonce = newAttestationNonce();
  let evidence: NodeEvidence;
  try {
    const answer = await client.getAttestation({ nonce }, { timeoutMs: CALL_TIMEOUT_MS, signal });
    evidence = evidenceFromAnswer(node, nonce, answer);
  } catch (error) {
    signal.throwIfAborted(); // the call was cancelled for a newer inspection: nothing to describe
    if (error instanceof EvidenceAnswerError) {
      say(`Verification failed: ${error.message}.`, "error");
      return undefined;
    }
    const described = await describeCallError(error, {
      what: "node",
      baseUrl,
      rpc: "init.API/GetAttestation",
      component: "its bootstrapper",
    });
    say(described.message, "error");
    return undefined;
  }
  const fetchedAt = Date.now();
  say(`Verifying the evidence of ${node} in this browser…`);
  const warnings: string[] = [];
  let result: VerifyResult;
  try {
    result = await verifyNodeEvidence(evidence, loaded.config, {
      logger: collectingLogger(warnings),
      signal,
    });
  } catch (error) {
    say(`Verification failed: the evidence could not be checked: ${(error as Error).message}`, "error");
    return undefined;
  }
  say(
    `${result.passed ? "Verified" : "Verification failed for"} ${node} against ${loaded.source}, at ${
      new Date(fetchedAt).toLocaleTimeString()
    }.`,
    result.passed ? "info" : "error",
  );
  showResult(result, warnings);
  return { evidence, fetchedAt, result };
}

function showResult(result: VerifyResult, warnings: string[]): void {
  const verdict = byId("verdict");
  // Named, so that a verdict can never pass for another node's.
  verdict.textContent = result.passed
    ? `Verified ${result.node}: ${verdictText(result)}`
    : `Verification failed for ${result.node}: ${verdictText(result)}`;
  verdict.className = `verdict ${result.passed ? "passed" : "failed"}`;
  showLine(byId("verdict-why"), whyText(result) && `Why: ${whyText(result)}`);
  showLine(byId("verdict-mismatches"), mismatchSummary(result));
  const warningList = byId("verdict-warnings");
  warningList.replaceChildren(...warnings.map((warning) => {
    const item = document.createElement("li");
    item.textContent = warning;
    return item;
  }));
  warningList.hidden = warnings.length === 0;
  byId("pcr-table").querySelector("tbody")!.replaceChildren(...result.pcrs.map(pcrRow));
  byId("result-json").textContent = renderVerifyJson(result);
  const box = byId("inspect-result");
  box.hidden = false;
}

function pcrRow(row: PcrRow): HTMLTableRowElement {
  const tr = document.createElement("tr");
  tr.dataset.pcr = String(row.index);
  if (row.match === false) tr.className = `mismatch ${row.enforced ? "enforced" : "warn-only"}`;
  const matchKind = row.match === null ? "unknown" : row.match ? "ok" : row.enforced ? "bad" : "warn";
  tr.append(
    cell(String(row.index), { label: "PCR" }),
    cell(policyText(row), { label: "Policy" }),
    cell(badge(matchText(row), matchKind), { label: "Match" }),
    cell(row.expected, { label: "Expected", className: "hex" }),
    cell(row.actual ?? "– (not proven)", { label: "Actual", className: "hex" }),
  );
  return tr;
}

function showLine(element: HTMLElement, text: string | undefined): void {
  element.textContent = text ?? "";
  element.hidden = text === undefined;
}

function evidenceFileName(inspection: Inspection): string {
  const node = inspection.evidence.node.replace(/[^A-Za-z0-9.-]+/g, "_");
  const time = new Date(inspection.fetchedAt).toISOString().replace(/[:.]/g, "-");
  return `evidence-${node}-${time}.json`;
}

function setUpConfigLoaders(): void {
  const error = byId("config-error");
  const load = async (text: string, source: string) => {
    try {
      await loadConfig(text, source);
      showLine(error, undefined);
    } catch (failure) {
      showLine(error, `Not loaded: ${(failure as Error).message}`);
    }
  };
  const fileInput = byId<HTMLInputElement>("config-file");
  fileInput.addEventListener("change", async () => {
    const file = fileInput.files?.[0];
    if (file) await load(await file.text(), `file ${file.name}`);
  });
  byId("config-use-text").addEventListener("click", () => {
    void load(byId<HTMLTextAreaElement>("config-text").value, "the pasted config");
  });
}

function showConfigSummary(): void {
  const loaded = currentConfig();
  if (!loaded) return;
  const { config } = loaded;
  const enforced = [...config.measurements.values()].filter((m) => !m.warnOnly).length;
  byId("config-line").textContent = `${loaded.source} (measurements digest ${loaded.digest.slice(0, 16)}…)`;
  byId("config-summary").textContent =
    `Loaded ${loaded.source}: variant ${config.variant}, ${config.measurements.size} PCR(s) (${enforced} enforced), measurements digest ${loaded.digest}.`;
  byId("cli-hint").textContent =
    "deno task cli verify --evidence <downloaded file> --attestation-config <this config> --output json";
}
