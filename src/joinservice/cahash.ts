/**
 * The discovery-token CA certificate hash a joining node pins the API
 * server's CA with (kubeadm's `--discovery-token-ca-cert-hash`).
 *
 * @module
 */
import { parseCaCertificate } from "./kubeletca.ts";

/**
 * `"sha256:"` + lower-case hex SHA-256 of the DER SubjectPublicKeyInfo of
 * the first `CERTIFICATE` in `caPem` (kubeadm's public-key pin). `source`
 * names the input in errors (default "ca.crt"). Throws `KubeletCaError`
 * (kubeletca.ts) when there is no valid certificate.
 */
export async function discoveryTokenCaCertHash(caPem: string, source = "ca.crt"): Promise<string> {
  const certificate = parseCaCertificate(caPem, source);
  const digest = await crypto.subtle.digest("SHA-256", certificate.publicKey.rawData);
  return `sha256:${new Uint8Array(digest).toHex()}`;
}
