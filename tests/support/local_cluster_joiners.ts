/**
 * What joiners with forged evidence need from a running local cluster
 * (`src/localcluster/`): an issuer whose quotes claim the cluster's measured
 * boot chain, its software key trusted by the cluster as an operator trusts
 * a new node's, and where the join services are.
 *
 * @module
 */
import type { LocalCluster } from "../../src/localcluster/cluster.ts";
import { parseEndpoint } from "../../src/net/endpoint.ts";
import type { JoinTargets } from "./forged_joiner.ts";
import { SoftwareTpmIssuer } from "./software_tpm.ts";

/**
 * A software attestation key claiming the PCR values the cluster's
 * attestation config expects, added to the config's allowed keys (worker
 * only); resolves once every join service reloaded the config.
 */
export async function trustedForgedIssuer(
  cluster: Pick<LocalCluster, "attestationConfig" | "trustAttestationKey">,
): Promise<SoftwareTpmIssuer> {
  const { measurements } = JSON.parse(cluster.attestationConfig) as {
    measurements: Record<string, { expected: string }>;
  };
  const pcrs = new Map(
    Object.entries(measurements).map((
      [index, { expected }],
    ) => [Number(index), Uint8Array.fromHex(expected)]),
  );
  const issuer = await SoftwareTpmIssuer.create({ pcrs });
  await cluster.trustAttestationKey(issuer.keyDigest);
  return issuer;
}

/** The control planes that run a join service, as joiners' metadata lists them, and its port. */
export function joinTargets(cluster: Pick<LocalCluster, "nodes">): JoinTargets {
  const serving = cluster.nodes().filter((node) => node.status.joinServiceEndpoint !== undefined);
  if (serving.length === 0) throw new Error("no control plane of the cluster runs a join service");
  const endpoints = serving.map((node) => parseEndpoint(node.status.joinServiceEndpoint!));
  return {
    controlPlanes: serving.map((node, i) => ({
      name: node.name,
      providerId: "",
      role: "ControlPlane",
      vpcIp: endpoints[i].host,
    })),
    port: endpoints[0].port,
  };
}

/** The cluster CA certificate (PEM) that signs kubelet certificates: the first control plane's. */
export async function clusterCaPem(cluster: Pick<LocalCluster, "nodes">): Promise<string> {
  const first = cluster.nodes().find((node) => node.role === "ControlPlane");
  if (first === undefined) throw new Error("the cluster has no control plane");
  return await Deno.readTextFile(`${first.files.root}/etc/kubernetes/pki/ca.crt`);
}
