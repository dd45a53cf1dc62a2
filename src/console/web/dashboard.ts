/**
 * The join service dashboard: `join.API/GetStatus` from a join service's
 * browser port, every 2 s while live: the attestation variant, the
 * measurements in force and their digest (compared with the config loaded
 * in the inspector), the config generation, tickets issued and requests
 * refused by reason, and the most recent decisions from its audit trail.
 * When a refresh fails the last answer stays, marked with the time it is
 * from, and the failure is said in words.
 *
 * @module
 */
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { API as JoinAPI, type GetStatusResponse } from "../../gen/join/join_pb.ts";
import { currentConfig, onConfigChange } from "./attestation_config.ts";
import { baseUrlOf, describeCallError } from "./call_errors.ts";
import { badge, byId, cell, formatTime, setStatus } from "./dom.ts";

/** Time between refreshes while live. */
export const REFRESH_INTERVAL_MS = 2_000;
/** How many of the join service's recent decisions the page shows. */
const DECISIONS_SHOWN = 10;
const CALL_TIMEOUT_MS = 5_000;
const ENDPOINT_EXAMPLE = "10.42.0.2:30092";

/** The join service being watched. */
interface Watch {
  baseUrl: string;
  client: ReturnType<typeof createClient<typeof JoinAPI>>;
  /** The next refresh, while one is waiting. */
  timer?: ReturnType<typeof setTimeout>;
  /** Whether a refresh is running: it schedules the next itself when it ends, if live then. */
  refreshing?: boolean;
  last?: { status: GetStatusResponse; at: number };
}

let watch: Watch | undefined;

/** Wires the dashboard's form and live switch. */
export function setUpDashboard(): void {
  const form = byId<HTMLFormElement>("dashboard-form");
  const live = byId<HTMLInputElement>("dashboard-live");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    startWatching(byId<HTMLInputElement>("dashboard-endpoint").value);
  });
  live.addEventListener("change", () => {
    if (!watch) return;
    clearTimeout(watch.timer);
    // A refresh still running goes on when it ends (the box is checked then): one started here as well
    // would be a second loop, each polling every 2 s.
    if (live.checked && !watch.refreshing) void refresh(watch);
  });
  onConfigChange(() => {
    if (watch?.last) showDigestComparison(watch.last.status);
  });
}

/** Fills the endpoint field and watches it (from the cluster view). */
export function watchJoinService(address: string): void {
  const input = byId<HTMLInputElement>("dashboard-endpoint");
  input.value = address;
  input.focus(); // the button pressed in the cluster view is hidden now: keep the keyboard in this view
  startWatching(address);
}

function startWatching(address: string): void {
  if (watch) clearTimeout(watch.timer);
  watch = undefined;
  byId("dashboard-body").hidden = true;
  let baseUrl: string;
  try {
    baseUrl = baseUrlOf(address, ENDPOINT_EXAMPLE);
  } catch (error) {
    setStatus(byId("dashboard-status"), (error as Error).message, "error");
    return;
  }
  setStatus(byId("dashboard-status"), `Asking ${new URL(baseUrl).host} for its status…`);
  watch = { baseUrl, client: createClient(JoinAPI, createConnectTransport({ baseUrl })) };
  void refresh(watch);
}

async function refresh(current: Watch): Promise<void> {
  const status = byId("dashboard-status");
  current.refreshing = true;
  try {
    const answer = await current.client.getStatus({}, { timeoutMs: CALL_TIMEOUT_MS });
    if (watch !== current) return;
    current.last = { status: answer, at: Date.now() };
    show(answer, current.last.at);
    setStatus(status, "");
  } catch (error) {
    if (watch !== current) return;
    const described = await describeCallError(error, {
      what: "join service",
      baseUrl: current.baseUrl,
      rpc: "join.API/GetStatus",
      component: "the join service",
    });
    const stale = current.last ? ` Showing its status from ${formatTime(current.last.at)}.` : "";
    setStatus(status, `${described.message}${stale}`, "error");
  } finally {
    current.refreshing = false;
  }
  if (watch === current && byId<HTMLInputElement>("dashboard-live").checked) {
    clearTimeout(current.timer);
    current.timer = setTimeout(() => void refresh(current), REFRESH_INTERVAL_MS);
  }
}

function show(status: GetStatusResponse, at: number): void {
  const issued = status.decisionCounts.filter((c) => c.outcome === "issued").reduce(
    (n, c) => n + c.count,
    0n,
  );
  const refused = status.decisionCounts.filter((c) => c.outcome === "rejected");
  byId("tickets-issued").textContent = String(issued);
  byId("tickets-refused").textContent = String(refused.reduce((n, c) => n + c.count, 0n));
  byId("config-generation").textContent = String(status.configGeneration);
  byId("status-variant").textContent = status.attestationVariant;
  byId("status-digest").textContent = status.measurementsDigest;
  showDigestComparison(status);
  byId("status-started").textContent = formatTime(Number(status.startedAtUnixMs));
  byId("status-updated").textContent = formatTime(at);

  const refusals = byId("refusals-table").querySelector("tbody")!;
  refusals.replaceChildren(
    ...(refused.length === 0 ? [emptyRow(3, "No request refused.")] : refused
      .toSorted((a, b) => Number(b.count - a.count))
      .map((count) => {
        const tr = document.createElement("tr");
        tr.dataset.reason = count.reason;
        tr.append(
          cell(count.reason, { label: "Reason" }),
          cell(count.method, { label: "Method" }),
          cell(String(count.count), { label: "Count" }),
        );
        return tr;
      })),
  );
  byId("measurements-table").querySelector("tbody")!.replaceChildren(...status.measurements.map((m) => {
    const tr = document.createElement("tr");
    tr.append(
      cell(String(m.index), { label: "PCR" }),
      cell(m.warnOnly ? "warn-only" : "enforced", { label: "Policy" }),
      cell(m.expected, { label: "Expected", className: "hex" }),
    );
    return tr;
  }));
  byId("decisions-table").querySelector("tbody")!.replaceChildren(
    ...(status.recentDecisions.length === 0
      ? [emptyRow(6, "No ticket decided yet.")]
      : status.recentDecisions.slice(0, DECISIONS_SHOWN).map((decision) => {
        const tr = document.createElement("tr");
        const issuedNow = decision.outcome === "issued";
        tr.append(
          cell(formatTime(Number(decision.timeUnixMs)), { label: "Time" }),
          cell(badge(issuedNow ? "issued" : "refused", issuedNow ? "ok" : "bad"), { label: "Outcome" }),
          cell(decision.role, { label: "Role" }),
          cell(decision.nodeName || "–", { label: "Node" }),
          cell(decision.peer, { label: "Peer" }),
          cell(issuedNow ? "–" : `${decision.reason}: ${decision.message}`, { label: "Reason" }),
        );
        return tr;
      })),
  );
  byId("decisions-caption").textContent = `The ${
    Math.min(DECISIONS_SHOWN, status.recentDecisions.length)
  } most recent of the ${status.recentDecisions.length} decisions the join service keeps (its audit log has them all).`;
  byId("dashboard-body").hidden = false;
}

function showDigestComparison(status: GetStatusResponse): void {
  const loaded = currentConfig();
  const compare = byId("status-digest-compare");
  if (!loaded) {
    compare.replaceChildren();
    return;
  }
  compare.replaceChildren(
    loaded.digest === status.measurementsDigest
      ? badge("same as the loaded config", "ok")
      : badge("differs from the loaded config", "warn"),
  );
}

function emptyRow(columns: number, text: string): HTMLTableRowElement {
  const tr = document.createElement("tr");
  const td = document.createElement("td");
  td.colSpan = columns;
  td.textContent = text;
  tr.append(td);
  return tr;
}
