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

/** What {@linkcode loadClusterPki} found: the PKI, or why it is not usable yet. */
export type ClusterPkiLoad = { pki: ClusterPki; problem?: undefined } | { pki?: undefined; problem: string };

/**
 * Loads the cluster PKI from `pkiDir`, or says why it is not usable yet:
 * a file is missing, or does not hold a matching certificate and key, the
 * CA's or the server's (kubeadm is still writing them). A problem names
 * files, never key bytes.
 */
export async function loadClusterPki(pkiDir: string): Promise<ClusterPkiLoad> {
  let texts: string[];
  try {
    texts = await Promise.all(FILES.map((name) => Deno.readTextFile(`${pkiDir}/${name}`)));
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return { problem: `not all of ${FILES.join(", ")} exist yet` };
    return { problem: `cannot read the PKI in ${pkiDir}: ${(error as Error).message}` };
  }
  const [caPem, caKeyPem, serverPem, serverKeyPem] = texts;
  let loaded;
  try {
    loaded = await parseKubeletCa(caPem, caKeyPem);
  } catch (error) {
    return { problem: (error as Error).message };
  }
  // A serving pair Deno's TLS cannot use would fail every handshake from then on, without a word.
  try {
    checkTlsKeyPair({ cert: serverPem, key: serverKeyPem }, { cert: "apiserver.crt", key: "apiserver.key" });
  } catch (error) {
    if (error instanceof TlsKeyPairError) return { problem: error.message };
    throw error;
  }
  const { certificate, privateKey } = loaded;
  return {
    pki: {
      signer: loaded,
      ca: { cert: certificate, privateKey, certPem: caPem, keyPem: caKeyPem },
      serverChainPem: serverPem.trimEnd() + "\n" + caPem,
      serverKeyPem,
    },
  };
}
