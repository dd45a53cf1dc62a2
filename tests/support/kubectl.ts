/**
 * The real `kubectl` against a cluster's API, for checks that should not
 * go through the project's own Kubernetes client.
 *
 * @module
 */
import { runToExit } from "../../src/os/service_process.ts";

/** An object as `kubectl get -o json` lists it; only the fields the checks read. */
export interface KubeObject {
  kind?: string;
  metadata: { name: string; namespace?: string };
  type?: string;
  data?: Record<string, string>;
  spec?: Record<string, unknown>;
}

/**
 * The items of `kubectl get <args> -o json` with `kubeconfig` (e.g.
 * `["secrets", "-n", "kube-system"]`). Throws with kubectl's stderr when it fails.
 */
export async function kubectlItems(kubeconfig: string, args: readonly string[]): Promise<KubeObject[]> {
  return JSON.parse((await kubectlGet(kubeconfig, [...args, "-o", "json"])).join("\n")).items;
}

/** The kube-system bootstrap-token Secrets: token ID → token secret, decoded. */
export async function bootstrapTokenSecrets(kubeconfig: string): Promise<Map<string, string>> {
  const secrets = await kubectlItems(kubeconfig, ["secrets", "-n", "kube-system"]);
  const decode = (value: string | undefined) => new TextDecoder().decode(Uint8Array.fromBase64(value ?? ""));
  return new Map(
    secrets
      .filter((secret) => secret.type === "bootstrap.kubernetes.io/token")
      .map((secret) => [decode(secret.data?.["token-id"]), decode(secret.data?.["token-secret"])]),
  );
}

/** The names (`kind/name`) `kubectl get <args> -o name` prints with `kubeconfig`. */
export async function kubectlNames(kubeconfig: string, args: readonly string[]): Promise<string[]> {
  return (await kubectlGet(kubeconfig, [...args, "-o", "name"])).filter((line) => line !== "");
}

/** stdout lines of `kubectl get <args>`; throws with kubectl's stderr when it fails. */
async function kubectlGet(kubeconfig: string, args: readonly string[]): Promise<string[]> {
  const all = ["--kubeconfig", kubeconfig, "get", ...args];
  const result = await runToExit("kubectl", all, { timeoutMs: 60_000 });
  if (result.code !== 0) throw new Error(`kubectl ${all.join(" ")}: ${result.stderrLines.join("\n")}`);
  return result.stdoutLines;
}
