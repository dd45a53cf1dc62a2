/**
 * The certificates kubeadm creates: self-signed CAs (10 years) and leaf
 * certificates they sign (1 year), with kubeadm's subjects, key usages and
 * subject alternative names. Keys are ECDSA P-256 in PKCS#8 PEM (`PRIVATE
 * KEY`), as kubeadm writes with `encryptionAlgorithm: ECDSA-P256`; real
 * kubeadm's default is RSA 2048.
 *
 * @module
 */
import { parseKubeletCa } from "../joinservice/kubeletca.ts";
import { encodePem } from "../x509/pem.ts";
import * as x509 from "../x509/x509.ts";

const ECDSA_P256 = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
const CA_VALIDITY_MS = 10 * 365 * 24 * 3600_000;
const LEAF_VALIDITY_MS = 365 * 24 * 3600_000;
/** kubeadm backdates certificates a little against clock skew. */
const BACKDATE_MS = 5 * 60_000;

/** A CA that can sign, with its certificate as PEM. */
export interface Authority {
  /** The CA certificate. */
  certificate: x509.X509Certificate;
  /** The CA's private key. */
  privateKey: CryptoKey;
  /** Signature algorithm for what it issues. */
  signingAlgorithm: EcdsaParams | Algorithm;
  /** `certificate` as PEM. */
  certPem: string;
}

/** A certificate and its key as the files kubeadm writes. */
export interface CertificateFiles {
  /** PEM `CERTIFICATE`. */
  certPem: string;
  /** PEM `PRIVATE KEY` (PKCS#8). */
  keyPem: string;
}

/** What a leaf certificate is for. */
export interface LeafProfile {
  /** Subject common name. */
  commonName: string;
  /** Subject organizations (Kubernetes groups of a client certificate). */
  organizations?: string[];
  /** DNS subject alternative names. */
  dnsNames?: string[];
  /** IP subject alternative names. */
  ips?: string[];
  /** Extended key usages. */
  usages: ("serverAuth" | "clientAuth")[];
}

function subject(commonName: string, organizations: string[] = []): x509.JsonName {
  return [...organizations.map((o) => ({ O: [o] })), { CN: [commonName] }];
}

async function keyPem(key: CryptoKey): Promise<string> {
  return encodePem(await crypto.subtle.exportKey("pkcs8", key), "PRIVATE KEY");
}

/** A fresh self-signed CA named `commonName` (CA:TRUE, keyCertSign, digitalSignature, keyEncipherment). */
export async function createAuthority(
  commonName: string,
): Promise<{ authority: Authority; files: CertificateFiles }> {
  const keys = await crypto.subtle.generateKey(ECDSA_P256, true, ["sign", "verify"]);
  const notBefore = new Date(Date.now() - BACKDATE_MS);
  const certificate = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    name: subject(commonName),
    keys,
    signingAlgorithm: ECDSA_P256,
    notBefore,
    notAfter: new Date(notBefore.getTime() + CA_VALIDITY_MS),
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.digitalSignature |
          x509.KeyUsageFlags.keyEncipherment,
        true,
      ),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  const certPem = encodePem(certificate.rawData, "CERTIFICATE");
  return {
    authority: { certificate, privateKey: keys.privateKey, signingAlgorithm: ECDSA_P256, certPem },
    files: { certPem, keyPem: await keyPem(keys.privateKey) },
  };
}

/** The CA of existing files (`ca.crt`, `ca.key`); throws `KubeletCaError` when they do not form a CA. */
export async function loadAuthority(certPem: string, keyPemText: string, source: string): Promise<Authority> {
  const loaded = await parseKubeletCa(certPem, keyPemText, {
    certSource: `${source}.crt`,
    keySource: `${source}.key`,
  });
  // The simulator issues with @peculiar/x509; the CA is read without it (kubeletca.ts).
  return { ...loaded, certificate: new x509.X509Certificate(loaded.certificate.der), certPem };
}

/** A leaf certificate for a fresh key, signed by `authority`. */
export async function issueLeaf(authority: Authority, profile: LeafProfile): Promise<CertificateFiles> {
  const keys = await crypto.subtle.generateKey(ECDSA_P256, true, ["sign", "verify"]);
  const notBefore = new Date(Date.now() - BACKDATE_MS);
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(
      x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment,
      true,
    ),
    new x509.ExtendedKeyUsageExtension(profile.usages.map((usage) => x509.ExtendedKeyUsage[usage])),
    await x509.AuthorityKeyIdentifierExtension.create(authority.certificate),
  ];
  const names = [
    ...(profile.dnsNames ?? []).map((value) => ({ type: "dns" as const, value })),
    ...(profile.ips ?? []).map((value) => ({ type: "ip" as const, value })),
  ];
  if (names.length > 0) extensions.push(new x509.SubjectAlternativeNameExtension(names));
  const certificate = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: subject(profile.commonName, profile.organizations),
    issuer: authority.certificate.subject,
    publicKey: keys.publicKey,
    signingKey: authority.privateKey,
    signingAlgorithm: authority.signingAlgorithm,
    notBefore,
    notAfter: new Date(notBefore.getTime() + LEAF_VALIDITY_MS),
    extensions,
  });
  return { certPem: encodePem(certificate.rawData, "CERTIFICATE"), keyPem: await keyPem(keys.privateKey) };
}

/** A fresh key pair for service-account tokens: `sa.key` (PKCS#8) and `sa.pub` (SPKI `PUBLIC KEY`). */
export async function createServiceAccountKey(): Promise<{ keyPem: string; publicPem: string }> {
  const keys = await crypto.subtle.generateKey(ECDSA_P256, true, ["sign", "verify"]);
  return {
    keyPem: await keyPem(keys.privateKey),
    publicPem: encodePem(await crypto.subtle.exportKey("spki", keys.publicKey), "PUBLIC KEY"),
  };
}

/** A random positive 128-bit serial number, as hex. */
function randomSerial(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[0] &= 0x7f;
  return bytes.toHex();
}
