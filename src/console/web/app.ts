/**
 * The browser console's page: three views, one shown at a time and named in
 * the URL's fragment (`#inspector`, `#dashboard`, `#cluster`):
 *
 * - `inspector.ts`: a node's attestation, verified in the browser;
 * - `dashboard.ts`: a join service's status, live;
 * - `cluster.ts`: the local cluster's nodes, when the console serves one.
 *
 * Anything that fails at start is said on the page, never a blank screen.
 *
 * @module
 */
import { errorMessage } from "../../error_message.ts";
import { setUpClusterView } from "./cluster.ts";
import { setUpDashboard, watchJoinService } from "./dashboard.ts";
import { byId } from "./dom.ts";
import { inspectNode, loadClusterConfig, setUpInspector } from "./inspector.ts";

/** The views, by fragment. */
const VIEWS = ["inspector", "dashboard", "cluster"] as const;
type View = typeof VIEWS[number];

function isView(name: string): name is View {
  return (VIEWS as readonly string[]).includes(name);
}

/** Shows `view` and marks its link as current. */
function show(view: View): void {
  for (const section of document.querySelectorAll<HTMLElement>("[data-view-section]")) {
    section.hidden = section.dataset.viewSection !== view;
  }
  for (const link of document.querySelectorAll<HTMLAnchorElement>("nav a[data-view]")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

/** Switches to `view` (the fragment changes, so the browser's back button works). */
function open(view: View): void {
  if (location.hash === `#${view}`) show(view);
  else location.hash = view;
}

function currentView(fallback: View): View {
  const name = location.hash.slice(1);
  return isView(name) ? name : fallback;
}

/** Says on the page that something failed (`what`), so a failure never leaves a blank or silent page. */
function pageError(what: string, error: unknown): void {
  const box = byId("startup-error");
  box.textContent = `${what}: ${errorMessage(error)}`;
  box.hidden = false;
}

async function main(): Promise<void> {
  setUpInspector();
  setUpDashboard();
  const hasCluster = await setUpClusterView({
    inspect: (address) => {
      open("inspector");
      inspectNode(address);
    },
    watch: (address) => {
      open("dashboard");
      watchJoinService(address);
    },
  });
  addEventListener("hashchange", () => show(currentView("inspector")));
  show(currentView(hasCluster ? "cluster" : "inspector"));
  if (hasCluster) await loadClusterConfig();
}

addEventListener("error", (event) => pageError("Something went wrong", event.error ?? event.message));
addEventListener("unhandledrejection", (event) => pageError("Something went wrong", event.reason));
main().catch((error) => pageError("The console could not start", error));
