/**
 * Node names: how a joining node's name is read from its kubelet CSR and
 * normalized into a Kubernetes object name. The join service (CSR checks)
 * and the bootstrapper (kubeadm's node name) share this one rule.
 *
 * The original join service's regex rejected every name with a dot (a Go
 * raw-string escaping slip, reference §2.9); the design normalizes names the
 * same way everywhere and accepts dotted names, so this uses the Kubernetes
 * DNS-1123 subdomain rule as written.
 *
 * @module
 */
import { ReasonError } from "../reason_error.ts";

/** The common-name prefix of a kubelet certificate: `system:node:<nodeName>`. */
export const NODE_COMMON_NAME_PREFIX = "system:node:";

/** Longest Kubernetes object name (DNS-1123 subdomain). */
export const MAX_NODE_NAME_LENGTH = 253;

const dns1123Label = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const dns1123Subdomain = new RegExp(`^${dns1123Label}(\\.${dns1123Label})*$`);

/** Why a node name was rejected. */
export type NodeNameFailure = "missing-prefix" | "empty" | "too-long" | "invalid";

/** A node name cannot be used. The message names the offending value. */
export class NodeNameError extends ReasonError<NodeNameFailure> {}

/**
 * The node name in a kubelet certificate common name, i.e. what follows
 * `system:node:`. Throws {@linkcode NodeNameError} when the prefix is missing
 * or nothing follows it.
 */
export function nodeNameFromCommonName(commonName: string): string {
  if (!commonName.startsWith(NODE_COMMON_NAME_PREFIX)) {
    throw new NodeNameError(
      "missing-prefix",
      `certificate request must have common name prefix "${NODE_COMMON_NAME_PREFIX}" but is ${
        JSON.stringify(commonName)
      }`,
    );
  }
  const name = commonName.slice(NODE_COMMON_NAME_PREFIX.length);
  if (name === "") {
    throw new NodeNameError(
      "empty",
      `certificate request common name ${JSON.stringify(commonName)} does not name a node`,
    );
  }
  return name;
}

/**
 * Normalizes a node name into a Kubernetes-compliant object name: lower case,
 * `_` replaced by `-`, then it must be a DNS-1123 subdomain (dot-separated
 * labels of `[a-z0-9-]` that start and end with a letter or digit, at most
 * 253 characters). Throws {@linkcode NodeNameError} otherwise.
 *
 * @example
 * ```ts
 * k8sCompliantHostname("Worker_1.example"); // "worker-1.example"
 * ```
 */
export function k8sCompliantHostname(name: string): string {
  const fail = (reason: NodeNameFailure, why: string): never => {
    throw new NodeNameError(
      reason,
      `failed to generate a Kubernetes compliant hostname for ${JSON.stringify(name)}: ${why}`,
    );
  };
  const compliant = name.toLowerCase().replaceAll("_", "-");
  if (compliant === "") fail("empty", "the name is empty");
  if (compliant.length > MAX_NODE_NAME_LENGTH) {
    fail("too-long", `${compliant.length} characters is longer than ${MAX_NODE_NAME_LENGTH}`);
  }
  if (!dns1123Subdomain.test(compliant)) {
    const badCharacter = compliant.match(/[^-a-z0-9.]/);
    fail(
      "invalid",
      badCharacter
        ? `character ${JSON.stringify(badCharacter[0])} is not allowed`
        : `${JSON.stringify(compliant)} must consist of dot-separated labels of lower-case letters, ` +
          "digits and '-' that start and end with a letter or digit",
    );
  }
  return compliant;
}
