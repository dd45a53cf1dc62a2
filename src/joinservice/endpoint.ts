/**
 * The API server endpoint handed to joining nodes: fixed by a flag, or, as
 * in the original, this control plane's VPC IP from a QEMU-style metadata
 * API (`GET /self` → `VPCIP`) with port 6443.
 *
 * @module
 */
import { SharedLoad } from "../async/shared_load.ts";
import type { ApiServerEndpointSource } from "./dependencies.ts";
import { reject } from "./rejections.ts";

/** The port of the API server on a control plane. */
export const API_SERVER_PORT = 6443;
/** How long a metadata API call may take. */
const METADATA_TIMEOUT_MS = 10_000;

/** Where the endpoint comes from. */
export type EndpointOrigin = { fixed: string } | { metadataUrl: string };

/**
 * The endpoint source: a fixed endpoint as it is, or the metadata API's,
 * asked once (and again after a failure) for all requests.
 */
export function apiServerEndpointSource(origin: EndpointOrigin): ApiServerEndpointSource {
  if ("fixed" in origin) return { current: () => Promise.resolve(origin.fixed) };
  const endpoint = new SharedLoad(() => endpointFromMetadata(origin.metadataUrl));
  return { current: ({ signal }) => endpoint.get({ signal }) };
}

/** "<VPCIP>:6443" from a QEMU-style metadata API's GET /self. */
async function endpointFromMetadata(metadataUrl: string): Promise<string> {
  const url = new URL("/self", metadataUrl);
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(METADATA_TIMEOUT_MS) });
  } catch (error) {
    throw reject(
      "metadata-unavailable",
      `metadata API ${url} unavailable: ${error instanceof Error ? error.message : error}`,
    );
  }
  if (!response.ok) {
    await response.body?.cancel();
    throw reject("metadata-unavailable", `metadata API ${url} answered ${response.status}`);
  }
  const self: unknown = await response.json().catch(() => undefined);
  const vpcIp = typeof self === "object" && self !== null && "VPCIP" in self ? self.VPCIP : undefined;
  if (typeof vpcIp !== "string" || vpcIp === "") {
    throw reject("misconfigured", `metadata API ${url} returned no VPCIP`);
  }
  return vpcIp.includes(":") ? `[${vpcIp}]:${API_SERVER_PORT}` : `${vpcIp}:${API_SERVER_PORT}`;
}
