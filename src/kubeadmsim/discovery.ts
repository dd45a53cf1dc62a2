/**
 * kubeadm's token discovery (`kubeadm join`, discovery phase): fetch the
 * `kube-public/cluster-info` ConfigMap from the API server endpoint without
 * trusting its TLS certificate yet, check the bootstrap signer's JWS
 * signature for the token's ID (so the API server knows the token), take
 * the CA from the signed kubeconfig, check its public-key hash against
 * `caCertHashes`, then fetch cluster-info again over TLS pinned to that CA.
 *
 * An unknown token ID or an unreachable API server is retried every second
 * until the discovery timeout; a bad signature or an unpinned CA is final,
 * as in kubeadm.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import * as https from "node:https";
import { discoveryTokenCaCertHash } from "../joinservice/cahash.ts";
import { clusterInfoSignatureKey, verifyClusterInfo } from "../kubernetes/cluster_info_signature.ts";
import { parseKubeconfig, selectDiscoveryCluster } from "../kubernetes/kubeconfig.ts";
import { parseBootstrapToken } from "../kubernetes/bootstrap_token.ts";
import { KubeadmSimError } from "./errors.ts";
import { joinHostPort } from "../net/endpoint.ts";

const CLUSTER_INFO_PATH = "/api/v1/namespaces/kube-public/configmaps/cluster-info";
const RETRY_MS = 1000;
const REQUEST_TIMEOUT_MS = 5000;

/** Options for {@linkcode discoverClusterCa}. */
export interface DiscoveryOptions {
  /** The API server endpoint. */
  host: string;
  /** Its port. */
  port: number;
  /** The bootstrap token (a credential: never in an error). */
  token: string;
  /** Pinned CA public-key hashes (`sha256:<hex>`); empty only with `unsafeSkipCaVerification`. */
  caCertHashes: string[];
  /** Accept any CA (kubeadm's unsafeSkipCAVerification). */
  unsafeSkipCaVerification: boolean;
  /** How long to keep trying. */
  timeoutMs: number;
  /** Cancels discovery. */
  signal?: AbortSignal;
}

/** The cluster CA (PEM) the endpoint's cluster-info proves, or a "discovery" {@linkcode KubeadmSimError}. */
export async function discoverClusterCa(options: DiscoveryOptions): Promise<string> {
  const parts = parseBootstrapToken(options.token);
  if (!parts) throw new KubeadmSimError("invalid", "the bootstrap token is invalid");
  const endpoint = joinHostPort(options.host, options.port);
  const deadline = Date.now() + options.timeoutMs;
  let lastProblem = "no attempt";
  for (;;) {
    options.signal?.throwIfAborted();
    const attempt = await tryOnce(options, parts.id, parts.secret);
    if ("caPem" in attempt) return attempt.caPem;
    lastProblem = attempt.retry;
    if (Date.now() + RETRY_MS > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
  }
  throw new KubeadmSimError(
    "discovery",
    `couldn't validate the identity of the API Server: could not find a JWS signature in the cluster-info ` +
      `ConfigMap for token ID "${parts.id}" from ${endpoint} within ${options.timeoutMs} ms: ${lastProblem}`,
  );
}

/** One discovery attempt: the CA, or why to retry; final failures throw. */
async function tryOnce(
  options: DiscoveryOptions,
  tokenId: string,
  tokenSecret: string,
): Promise<{ caPem: string } | { retry: string }> {
  let insecure: Record<string, string>;
  try {
    insecure = await getClusterInfo(options.host, options.port, undefined, options.signal);
  } catch (error) {
    return { retry: `failed to request the cluster-info ConfigMap: ${(error as Error).message}` };
  }
  const kubeconfig = insecure.kubeconfig;
  const signature = insecure[clusterInfoSignatureKey(tokenId)];
  if (kubeconfig === undefined) return { retry: "there is no kubeconfig in the cluster-info ConfigMap" };
  if (signature === undefined) {
    return {
      retry: `token id "${tokenId}" is invalid for this cluster or it has expired. ` +
        `Use "kubeadm token create" on the control-plane node to create a new valid token`,
    };
  }
  if (!(await verifyClusterInfo(signature, kubeconfig, tokenId, tokenSecret))) {
    throw new KubeadmSimError(
      "discovery",
      "failed to verify JWS signature of received cluster info object, can't trust this API Server",
    );
  }
  let caPem: string;
  try {
    caPem = selectDiscoveryCluster(parseKubeconfig(kubeconfig)).join("");
  } catch (error) {
    throw new KubeadmSimError(
      "discovery",
      `couldn't parse the kubeconfig in cluster-info: ${(error as Error).message}`,
    );
  }
  if (!options.unsafeSkipCaVerification) {
    const hash = await discoveryTokenCaCertHash(caPem, "cluster-info");
    const pinned = options.caCertHashes.map((h) => h.toLowerCase());
    if (!pinned.includes(hash)) {
      throw new KubeadmSimError(
        "discovery",
        `cluster CA found in cluster-info ConfigMap is invalid: none of the public keys "${hash}" are pinned`,
      );
    }
  }
  // kubeadm asks once more, now trusting the CA, and wants the same kubeconfig back.
  let secure: Record<string, string>;
  try {
    secure = await getClusterInfo(options.host, options.port, caPem, options.signal);
  } catch (error) {
    return {
      retry: `failed to request the cluster-info ConfigMap with the pinned CA: ${(error as Error).message}`,
    };
  }
  if (secure.kubeconfig !== kubeconfig) {
    throw new KubeadmSimError(
      "discovery",
      "the second kubeconfig from the cluster-info ConfigMap did not match the first one",
    );
  }
  return { caPem };
}

/** The data of cluster-info, fetched anonymously; with `caPem` the server must prove that CA. */
function getClusterInfo(
  host: string,
  port: number,
  caPem: string | undefined,
  signal: AbortSignal | undefined,
): Promise<Record<string, string>> {
  return new Promise((resolve, reject) => {
    const request = https.get({
      host,
      port,
      path: CLUSTER_INFO_PATH,
      servername: /^[\d.]+$/.test(host) || host.includes(":") ? undefined : host,
      rejectUnauthorized: caPem !== undefined,
      ca: caPem,
      timeout: REQUEST_TIMEOUT_MS,
      signal,
      headers: { accept: "application/json" },
    }, (response) => {
      const chunks: Uint8Array[] = [];
      let size = 0;
      response.on("data", (chunk: Uint8Array) => {
        size += chunk.byteLength;
        if (size > 1024 * 1024) request.destroy(new Error("the answer is larger than 1 MiB"));
        else chunks.push(chunk);
      });
      response.on("end", () => {
        if (response.statusCode !== 200) {
          reject(new Error(`the API server answered ${response.statusCode}`));
          return;
        }
        try {
          const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
            data?: Record<string, string>;
          };
          resolve(body.data ?? {});
        } catch {
          reject(new Error("the answer is not a ConfigMap"));
        }
      });
      response.on("error", reject);
    });
    request.on("timeout", () => request.destroy(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms`)));
    request.on("error", reject);
  });
}
