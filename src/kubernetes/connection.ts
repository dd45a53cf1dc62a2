/**
 * Where and how to reach a Kubernetes API server: the result of loading a
 * kubeconfig or the in-cluster service account, and the input of
 * {@linkcode KubernetesClient}.
 *
 * @module
 */
import type { TokenSource } from "./token.ts";

/** A client certificate and its private key, PEM. */
export interface ClientCertificate {
  /** PEM `CERTIFICATE` (chain). */
  certPem: string;
  /** PEM private key (PKCS#8, SEC1 or PKCS#1). */
  keyPem: string;
}

/** Connection settings for one API server and one identity. */
export interface ConnectionConfig {
  /** Base URL of the API server, e.g. `https://10.0.0.1:6443`, without a trailing slash. */
  server: string;
  /**
   * PEM CA certificates the server certificate must chain to. Deno adds them
   * to its default roots (it cannot trust only these); absent: default roots only.
   */
  caPem?: string;
  /** Client-certificate authentication. */
  clientCertificate?: ClientCertificate;
  /** Bearer-token authentication, read before each request. */
  token?: TokenSource;
  /** Default namespace of the context or service account; "default" when unset. */
  namespace: string;
}
