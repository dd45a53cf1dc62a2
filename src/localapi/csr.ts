/**
 * Kubelet client certificates for the local API server, as kube-controller-
 * manager issues them during a kubelet's TLS bootstrap: a
 * CertificateSigningRequest for `kubernetes.io/kube-apiserver-client-kubelet`
 * from a bootstrap token user, with subject `O=system:nodes,
 * CN=system:node:<name>` and client usages only, is approved (as the
 * `nodeclient` auto-approver does) and signed with the cluster CA at once.
 * Any other request stays pending, as it would without an approver.
 *
 * @module
 */
import { type KubeletCa, signKubeletCertificate } from "../joinservice/kubeletca.ts";
import { decodePemBlocks } from "../x509/pem.ts";
import { BOOTSTRAPPERS_GROUP, type Identity } from "./bootstrap.ts";

import type { JsonObject as Json } from "./json.ts";

/** The resource type the local API serves for certificate requests. */
export const CERTIFICATE_SIGNING_REQUESTS = {
  group: "certificates.k8s.io",
  version: "v1",
  plural: "certificatesigningrequests",
  kind: "CertificateSigningRequest",
  namespaced: false,
};

/** The signer of kubelet client certificates. */
export const KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet";

const allowedUsages = new Set(["digital signature", "key encipherment", "client auth"]);

/**
 * Records who asked (`spec.username`, `spec.groups`, as the API server does
 * on create) and, for a kubelet client request from a bootstrap token,
 * approves and signs it with `ca`. Mutates and returns `csr`.
 */
export async function approveAndSign(csr: Json, requester: Identity, ca: KubeletCa): Promise<Json> {
  const spec = (csr.spec ?? {}) as Json;
  spec.username = requester.user;
  spec.groups = requester.groups;
  csr.spec = spec;
  const usages = Array.isArray(spec.usages) ? spec.usages as unknown[] : [];
  const recognized = spec.signerName === KUBELET_CLIENT_SIGNER &&
    requester.groups.includes(BOOTSTRAPPERS_GROUP) &&
    usages.includes("client auth") && usages.every((usage) => allowedUsages.has(String(usage)));
  if (!recognized || typeof spec.request !== "string") return csr;
  let der: Uint8Array;
  try {
    const pem = new TextDecoder().decode(Uint8Array.fromBase64(spec.request));
    der = new Uint8Array(decodePemBlocks(pem)[0]?.rawData ?? new ArrayBuffer(0));
  } catch {
    der = new Uint8Array(0);
  }
  const approved = {
    type: "Approved",
    status: "True",
    reason: "AutoApproved",
    message: "Auto approving kubelet client certificate after SubjectAccessReview.",
  };
  try {
    const certificatePem = await signKubeletCertificate(der, ca);
    csr.status = {
      conditions: [approved],
      certificate: new TextEncoder().encode(certificatePem).toBase64(),
    };
  } catch (error) {
    csr.status = {
      conditions: [approved, {
        type: "Failed",
        status: "True",
        reason: "SignerValidationFailure",
        message: (error as Error).message,
      }],
    };
  }
  return csr;
}
