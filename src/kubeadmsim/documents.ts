/**
 * The YAML documents of a kubeadm configuration file: split, typed by their
 * apiVersion and kind, and refused where kubeadm refuses them (YAML that
 * does not parse, a document without apiVersion or kind, a kind kubeadm
 * does not know, an old kubeadm API, a kind given twice). Documents of
 * other API groups are ignored with kubeadm's warning.
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import { KubeadmSimError } from "./errors.ts";

/** A JSON object. */
export type Json = Record<string, unknown>;

/** kubeadm's configuration API. */
export const KUBEADM_API_VERSION = "kubeadm.k8s.io/v1beta3";
/** The kubelet's configuration API. */
export const KUBELET_API_VERSION = "kubelet.config.k8s.io/v1beta1";
/** kube-proxy's configuration API (accepted, and otherwise ignored). */
export const KUBE_PROXY_API_VERSION = "kubeproxy.config.k8s.io/v1alpha1";

/** The kinds the simulator reads. */
export type Kind =
  | "InitConfiguration"
  | "ClusterConfiguration"
  | "JoinConfiguration"
  | "KubeletConfiguration"
  | "KubeProxyConfiguration";

const registered: Record<string, Kind[]> = {
  [KUBEADM_API_VERSION]: ["InitConfiguration", "ClusterConfiguration", "JoinConfiguration"],
  [KUBELET_API_VERSION]: ["KubeletConfiguration"],
  [KUBE_PROXY_API_VERSION]: ["KubeProxyConfiguration"],
};

/** The documents of one file by kind, and kubeadm's warnings about the rest. */
export interface Documents {
  /** The documents the simulator reads, by kind. */
  byKind: Partial<Record<Kind, Json>>;
  /** Every document as parsed, in file order (for the invocation record). */
  all: Json[];
  /** kubeadm's warnings about ignored documents. */
  warnings: string[];
}

/** Splits and types a configuration file; throws {@linkcode KubeadmSimError} for what kubeadm refuses. */
export function splitDocuments(text: string): Documents {
  const result: Documents = { byKind: {}, all: [], warnings: [] };
  for (const document of parseAllDocuments(text)) {
    if (document.errors.length > 0) {
      // The parser's message quotes the offending line, which may hold a token: keep its first line only.
      const detail = document.errors[0].message.split("\n")[0].replace(/:$/, "");
      throw new KubeadmSimError("config", `error converting YAML to JSON: yaml: ${detail}`);
    }
    const value = document.toJSON();
    if (value === null || value === undefined) continue;
    if (typeof value !== "object" || Array.isArray(value)) {
      throw new KubeadmSimError(
        "config",
        "error unmarshaling JSON: json: cannot unmarshal a non-object document into a kubeadm configuration",
      );
    }
    const object = value as Json;
    result.all.push(object);
    const apiVersion = typeof object.apiVersion === "string" ? object.apiVersion : "";
    const kind = typeof object.kind === "string" ? object.kind : "";
    if (apiVersion === "" || kind === "") {
      throw new KubeadmSimError(
        "config",
        `invalid configuration for GroupVersionKind ${gvk(apiVersion, kind)}: ` +
          "kind and apiVersion is mandatory information that must be specified",
      );
    }
    const group = apiVersion.includes("/") ? apiVersion.split("/")[0] : "";
    const known = registered[apiVersion];
    if (!known) {
      if (group === "kubeadm.k8s.io" && ["v1beta1", "v1beta2"].includes(apiVersion.split("/")[1])) {
        throw new KubeadmSimError(
          "config",
          `your configuration file uses an old API spec: "${apiVersion}". Please use kubeadm v1.22 instead ` +
            "and run 'kubeadm config migrate --old-config old.yaml --new-config new.yaml', which will write " +
            "the new, similar spec using a newer API version.",
        );
      }
      if (Object.keys(registered).some((v) => v.split("/")[0] === group)) {
        throw notRegistered(kind, apiVersion);
      }
      result.warnings.push(
        `[config] WARNING: Ignored YAML document with GroupVersionKind ${gvk(apiVersion, kind)}`,
      );
      continue;
    }
    if (!known.includes(kind as Kind)) throw notRegistered(kind, apiVersion);
    if (result.byKind[kind as Kind]) {
      throw new KubeadmSimError(
        "config",
        `invalid configuration: kind "${kind}" is specified twice in YAML file`,
      );
    }
    result.byKind[kind as Kind] = object;
  }
  return result;
}

function gvk(apiVersion: string, kind: string): string {
  return `${apiVersion}, Kind=${kind}`;
}

function notRegistered(kind: string, apiVersion: string): KubeadmSimError {
  return new KubeadmSimError(
    "config",
    `no kind "${kind}" is registered for version "${apiVersion}" in scheme ` +
      `"k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/scheme/scheme.go:31"`,
  );
}
