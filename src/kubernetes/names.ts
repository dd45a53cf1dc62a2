/**
 * Names Kubernetes itself fixes.
 *
 * @module
 */

/** The namespace of the cluster's system objects (bootstrap tokens, kubeadm's ConfigMaps). */
export const KUBE_SYSTEM_NAMESPACE = "kube-system";
