/**
 * The shapes of the Init's plain parameters, checked by the CLI before it
 * sends them and by the node before its lock: a value kubeadm would refuse
 * after the lock leaves a node that must be wiped.
 *
 * @module
 */
import { quoted } from "../json/quoted.ts";
import { parseCidr, parseIp } from "../net/ip.ts";

/** An exact Kubernetes version, as kubeadm takes it without asking the internet: 1.30.2, v1.31.0-rc.1. */
export const KUBERNETES_VERSION: RegExp = /^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/;

/** A cluster name: a DNS label (kubeadm writes it into the cluster's kubeconfigs). */
export const CLUSTER_NAME: RegExp = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** A DNS-1123 subdomain, as kubeadm takes it for a certificate SAN (at most 253 characters, checked apart). */
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** kubeadm's bounds on a service subnet: at most 20 host bits (kept small in etcd), at least 10 addresses. */
const MAX_SERVICE_HOST_BITS = 20;
const MIN_SERVICE_HOST_BITS = 4;

/** The parameters {@linkcode initParameterProblem} checks. */
export type CheckedInitParameter = "kubernetesVersion" | "clusterName" | "serviceCidr" | "apiServerCertSans";

/**
 * What is wrong with an Init's Kubernetes version, cluster name, service
 * CIDR or API server certificate SANs (the message names the parameter as
 * `name` gives it), or undefined. The last two are checked as kubeadm
 * checks them; an empty service CIDR means kubeadm's default.
 */
export function initParameterProblem(
  values: {
    kubernetesVersion: string;
    clusterName: string;
    serviceCidr?: string;
    apiServerCertSans?: readonly string[];
  },
  name: (parameter: CheckedInitParameter) => string,
): string | undefined {
  if (!KUBERNETES_VERSION.test(values.kubernetesVersion)) {
    return `${name("kubernetesVersion")} must be an exact version such as v1.30.2, got ${
      quoted(values.kubernetesVersion)
    }`;
  }
  if (!CLUSTER_NAME.test(values.clusterName)) {
    return `${
      name("clusterName")
    } must be a DNS label (lower-case letters, digits and '-', at most 63), got ${
      quoted(values.clusterName)
    }`;
  }
  const serviceCidr = values.serviceCidr ? serviceCidrProblem(values.serviceCidr) : undefined;
  if (serviceCidr !== undefined) {
    return `${name("serviceCidr")} ${serviceCidr}, got ${quoted(values.serviceCidr!)}`;
  }
  for (const san of values.apiServerCertSans ?? []) {
    const wildcardless = san.startsWith("*.") ? san.slice(2) : san;
    if (parseIp(san) === undefined && (wildcardless.length > 253 || !DNS_SUBDOMAIN.test(wildcardless))) {
      return `${
        name("apiServerCertSans")
      } must hold IP addresses and DNS names (lower-case, optionally starting with "*."), got ${quoted(san)}`;
    }
  }
  return undefined;
}

/** kubeadm's networking.serviceSubnet rules: one CIDR, or one of each IP family (dual stack). */
function serviceCidrProblem(text: string): string | undefined {
  const parts = text.split(",");
  const networks = parts.map(parseCidr);
  if (networks.some((network) => network === undefined) || parts.length > 2) {
    return "must be a CIDR such as 10.96.0.0/12, or an IPv4 and an IPv6 CIDR separated by a comma";
  }
  if (networks.length === 2 && networks[0]!.address.length === networks[1]!.address.length) {
    return "must hold at most one CIDR of each IP family";
  }
  for (const { address, prefixLength } of networks as NonNullable<(typeof networks)[number]>[]) {
    const hostBits = address.length * 8 - prefixLength;
    if (hostBits > MAX_SERVICE_HOST_BITS) {
      return `is too large: a prefix of at least /${address.length * 8 - MAX_SERVICE_HOST_BITS} is needed`;
    }
    if (hostBits < MIN_SERVICE_HOST_BITS) return "is too small: it must hold at least 10 addresses";
  }
  return undefined;
}
