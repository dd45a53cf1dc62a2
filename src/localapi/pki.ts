/**
 * The cluster PKI a kubeadm init writes (`<pki>/ca.{crt,key}`,
 * `<pki>/apiserver.{crt,key}`), loaded for the local API server to serve as
 * kube-apiserver would: TLS with `apiserver.crt` (chain with the CA), client
 * certificates checked against `ca.crt`; `ca.key` is what kube-controller-
 * manager signs with.
 *
 * @module
 */
import { type KubeletCa, parseKubeletCa } from "../joinservice/kubeletca.ts";
import type { Certificate } from "../x509/certificate.ts";
import { checkTlsKeyPair, TlsKeyPairError } from "../x509/tls_key_pair.ts";

/** A certificate authority as PEM and as parsed objects. */
export interface CertificateAuthority {
  /** The CA certificate. */
  cert: Certificate;
  /** Its private key, not extractable. */
  privateKey: CryptoKey;
  /** PEM `CERTIFICATE`. */
  certPem: string;
  /** PEM private key, as read. */
  keyPem: string;
}

/** The TLS material of a cluster, ready for `node:https`. */
export interface ClusterPki {
  /** The cluster CA (key non-extractable; `keyPem` is the file's content). */
  ca: CertificateAuthority;
  /** The same CA, as kubelet certificates are signed with it. */
  signer: KubeletCa;
  /** `apiserver.crt` followed by `ca.crt`. */
  serverChainPem: string;
  /** `apiserver.key`. */
  serverKeyPem: string;
}

const FILES = ["ca.crt", "ca.key", "apiserver.crt", "apiserver.key"] as const;

/**
 * Loads the cluster PKI from `pkiDir`; undefined while any file is missing
 * or does not hold a matching certificate and key yet, the CA's or the
 * server's (kubeadm is still writing them).
 */
export async function loadClusterPki(pkiDir: string): Promise<ClusterPki | undefined> {
  let texts: string[];
  try {
    texts = await Promise.all(FILES.map((name) => Deno.readTextFile(`${pkiDir}/${name}`)));
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
  const [caPem, caKeyPem, serverPem, serverKeyPem] = texts;
  let loaded;
  try {
    loaded = await parseKubeletCa(caPem, caKeyPem);
  } catch {
    return undefined;
  }
  // A serving pair Deno's TLS cannot use would fail every handshake from then on, without a word.
  try {
    checkTlsKeyPair({ cert: serverPem, key: serverKeyPem }, { cert: "apiserver.crt", key: "apiserver.key" });
  } catch (error) {
    if (error instanceof TlsKeyPairError) return undefined;
    throw error;
  }
  const { certificate, privateKey } = loaded;
  return {
    signer: loaded,
    ca: { cert: certificate, privateKey, certPem: caPem, keyPem: caKeyPem },
    serverChainPem: serverPem.trimEnd() + "\n" + caPem,
    serverKeyPem,
  };
}
