/**
 * The shapes of the Init's plain parameters, checked by the CLI before it
 * sends them and by the node before its lock: a value kubeadm would refuse
 * after the lock leaves a node that must be wiped.
 *
 * @module
 */

/** An exact Kubernetes version, as kubeadm takes it without asking the internet: 1.30.2, v1.31.0-rc.1. */
export const KUBERNETES_VERSION: RegExp = /^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/;

/** A cluster name: a DNS label (kubeadm writes it into the cluster's kubeconfigs). */
export const CLUSTER_NAME: RegExp = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/**
 * What is wrong with an Init's Kubernetes version and cluster name (the
 * message names the parameter as `name` gives it), or undefined.
 */
export function initParameterProblem(
  values: { kubernetesVersion: string; clusterName: string },
  name: (parameter: "kubernetesVersion" | "clusterName") => string,
): string | undefined {
  if (!KUBERNETES_VERSION.test(values.kubernetesVersion)) {
    return `${name("kubernetesVersion")} must be an exact version such as v1.30.2, got ${
      JSON.stringify(values.kubernetesVersion.slice(0, 64))
    }`;
  }
  if (!CLUSTER_NAME.test(values.clusterName)) {
    return `${
      name("clusterName")
    } must be a DNS label (lower-case letters, digits and '-', at most 63), got ${
      JSON.stringify(values.clusterName.slice(0, 64))
    }`;
  }
  return undefined;
}
