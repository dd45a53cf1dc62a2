/**
 * The local cluster view: when the console is pointed at a local cluster
 * (`--local-cluster`), each node's phase from the cluster's status file
 * (`/api/cluster`, see `src/console/cluster_summary.ts`), every 2 s, with a
 * button to verify a node whose bootstrapper still serves its attestation
 * and one to watch a control plane's join service.
 *
 * @module
 */
import type { ClusterSummary, NodeSummary } from "../cluster_summary.ts";
import { badge, button, byId, cell, setStatus } from "./dom.ts";

const REFRESH_INTERVAL_MS = 2_000;

/** What the cluster view's buttons open. */
export interface ClusterActions {
  /** Verify the node at this browser port (`host:port`). */
  inspect(address: string): void;
  /** Watch the join service at this browser port (`host:port`). */
  watch(address: string): void;
}

/**
 * Starts the cluster view; resolves to false (and stays quiet) when the
 * console is not pointed at a local cluster.
 */
export async function setUpClusterView(actions: ClusterActions): Promise<boolean> {
  const first = await fetch("/api/cluster", { cache: "no-store" }).catch(() => undefined);
  if (first?.status === 404 && (await first.text()).includes("not pointed at a local cluster")) {
    setStatus(
      byId("cluster-status"),
      "The console is not pointed at a local cluster: start it with --local-cluster <state-dir> (e.g. .dev/cluster).",
    );
    return false;
  }
  const refresh = async () => {
    try {
      const response = await fetch("/api/cluster", { cache: "no-store" });
      if (!response.ok) throw new Error(`${response.status}: ${(await response.text()).trim()}`);
      show(await response.json() as ClusterSummary, actions);
      setStatus(byId("cluster-status"), "");
    } catch (error) {
      setStatus(
        byId("cluster-status"),
        `Cannot read the cluster's status: ${(error as Error).message}`,
        "error",
      );
    }
    setTimeout(refresh, REFRESH_INTERVAL_MS);
  };
  await refresh();
  return true;
}

function show(cluster: ClusterSummary, actions: ClusterActions): void {
  byId("cluster-facts").hidden = false;
  byId("cluster-state").textContent = cluster.reason ? `${cluster.state} (${cluster.reason})` : cluster.state;
  byId("cluster-id").textContent = cluster.clusterId ?? "not initialized yet";
  byId("cluster-network").textContent = cluster.network === "netns"
    ? "a network namespace per node"
    : "loopback (shared by every node)";
  const table = byId("nodes-table");
  table.hidden = false;
  const focused = document.activeElement?.closest("tr")?.dataset.node;
  const focusedText = document.activeElement instanceof HTMLButtonElement
    ? document.activeElement.textContent
    : undefined;
  table.querySelector("tbody")!.replaceChildren(...cluster.nodes.map((node) => nodeRow(node, actions)));
  // Redrawing must not take the keyboard focus away from a node's button.
  if (focused !== undefined && focusedText) {
    const row = table.querySelector(`tr[data-node="${CSS.escape(focused)}"]`);
    [...row?.querySelectorAll("button") ?? []].find((b) => b.textContent === focusedText)?.focus();
  }
}

function nodeRow(node: NodeSummary, actions: ClusterActions): HTMLTableRowElement {
  const tr = document.createElement("tr");
  tr.dataset.node = node.name;
  tr.dataset.phase = node.phase;
  const phaseKind = node.phase === "joined"
    ? "ok"
    : node.phase === "refused" || node.phase === "failed"
    ? "bad"
    : "unknown";
  const phase = document.createElement("span");
  phase.append(badge(node.phase, phaseKind));
  if (node.reason) phase.append(` ${node.reason}`);
  const open = document.createElement("span");
  open.className = "row";
  if (node.attestationEndpoint) {
    const address = node.attestationEndpoint;
    open.append(button("Verify attestation", () => actions.inspect(address)));
  }
  if (node.statusEndpoint) {
    const address = node.statusEndpoint;
    open.append(button("Join service", () => actions.watch(address)));
  }
  if (open.childElementCount === 0) {
    open.append(node.phase === "joined" ? "joined: its bootstrapper has exited" : "–");
  }
  tr.append(
    cell(node.name, { label: "Node" }),
    cell(node.role, { label: "Role" }),
    cell(node.address, { label: "Address" }),
    cell(phase, { label: "Phase" }),
    cell(open, { label: "Open" }),
  );
  return tr;
}
