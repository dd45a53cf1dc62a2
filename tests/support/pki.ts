/**
 * Test PKI: a CA and certificates it issues, ECDSA P-256, as PEM ready for
 * `node:https`, `Deno.createHttpClient` and kubeconfigs.
 *
 * CA certificates carry `CA:TRUE` and leaves `CA:FALSE`: rustls (Deno's TLS)
 * rejects a CA certificate presented as an end entity, so servers always get
 * a leaf.
 *
 * @module
 */
import { stringify as stringifyYaml } from "yaml";
import { encodePem } from "../../src/x509/pem.ts";
import * as x509 from "../../src/x509/x509.ts";

const ecdsa = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
const validityMs = 24 * 60 * 60 * 1000;

/** A key pair and its certificate, with PEM forms. */
export interface TestCert {
  cert: x509.X509Certificate;
  keys: CryptoKeyPair;
  /** PEM `CERTIFICATE`. */
  certPem: string;
  /** PEM `PRIVATE KEY` (PKCS#8). */
  keyPem: string;
}

/** A test certificate authority. */
export type TestCa = TestCert;

/** What a certificate is for (extended key usage). */
export type CertUsage = "serverAuth" | "clientAuth";

/** Options for {@linkcode issueCert}. */
export interface IssueCertOptions {
  /** Distinguished name, e.g. `"CN=system:node:worker-1, O=system:nodes"`. */
  subject: string;
  /** Subject alternative names. */
  sans?: { ips?: string[]; dns?: string[] };
  /** Extended key usages; default none. */
  usages?: CertUsage[];
  /** Issue an intermediate CA (CA:TRUE) instead of a leaf; default false. */
  isCa?: boolean;
  /** Validity start; default one hour ago. */
  notBefore?: Date;
  /** Validity end; default one day after `notBefore`. */
  notAfter?: Date;
}

/** Generates an ECDSA P-256 key pair (extractable, so it can be exported as PEM). */
export async function generateKeyPair(): Promise<CryptoKeyPair> {
  return await crypto.subtle.generateKey(ecdsa, true, ["sign", "verify"]);
}

/** Exports a private key as PEM `PRIVATE KEY` (PKCS#8). */
export async function privateKeyToPem(key: CryptoKey): Promise<string> {
  return encodePem(await crypto.subtle.exportKey("pkcs8", key), "PRIVATE KEY");
}

/** Creates a self-signed CA (`CA:TRUE`, keyCertSign + cRLSign) named `subject`. */
export async function createTestCa(subject = "CN=test-ca"): Promise<TestCa> {
  const keys = await generateKeyPair();
  const notBefore = new Date(Date.now() - 60 * 60 * 1000);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: subject,
    keys,
    signingAlgorithm: ecdsa,
    notBefore,
    notAfter: new Date(notBefore.getTime() + validityMs),
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return {
    cert,
    keys,
    certPem: encodePem(cert.rawData, "CERTIFICATE"),
    keyPem: await privateKeyToPem(keys.privateKey),
  };
}

/** Issues a certificate for a fresh key pair, signed by `ca`. */
export async function issueCert(ca: TestCa, options: IssueCertOptions): Promise<TestCert> {
  const keys = await generateKeyPair();
  const notBefore = options.notBefore ?? new Date(Date.now() - 60 * 60 * 1000);
  const isCa = options.isCa ?? false;
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(isCa, undefined, true),
    new x509.KeyUsagesExtension(
      isCa
        ? x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign
        : x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment,
      true,
    ),
    await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
  ];
  if (isCa) extensions.push(await x509.SubjectKeyIdentifierExtension.create(keys.publicKey));
  if (options.usages?.length) {
    extensions.push(new x509.ExtendedKeyUsageExtension(options.usages.map((u) => x509.ExtendedKeyUsage[u])));
  }
  const names = [
    ...(options.sans?.dns ?? []).map((value) => ({ type: "dns" as const, value })),
    ...(options.sans?.ips ?? []).map((value) => ({ type: "ip" as const, value })),
  ];
  if (names.length) extensions.push(new x509.SubjectAlternativeNameExtension(names));
  const cert = await x509.X509CertificateGenerator.create({
    subject: options.subject,
    issuer: ca.cert.subject,
    publicKey: keys.publicKey,
    signingKey: ca.keys.privateKey,
    signingAlgorithm: ecdsa,
    notBefore,
    notAfter: options.notAfter ?? new Date(notBefore.getTime() + validityMs),
    extensions,
  });
  return {
    cert,
    keys,
    certPem: encodePem(cert.rawData, "CERTIFICATE"),
    keyPem: await privateKeyToPem(keys.privateKey),
  };
}

/** Issues a TLS server leaf for loopback: SAN IP 127.0.0.1 and DNS localhost, serverAuth. */
export async function issueLoopbackServerCert(ca: TestCa, subject = "CN=localhost"): Promise<TestCert> {
  return await issueCert(ca, {
    subject,
    sans: { ips: ["127.0.0.1"], dns: ["localhost"] },
    usages: ["serverAuth"],
  });
}

/** A kubeconfig (YAML) for the API server at `url`, trusting `caPem`, authenticating with client certificate `cert`. */
export function kubeconfigFor(url: string, caPem: string, cert: TestCert): string {
  return stringifyYaml({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "local", cluster: { server: url, "certificate-authority-data": btoa(caPem) } }],
    contexts: [{ name: "local", context: { cluster: "local", user: "admin" } }],
    "current-context": "local",
    users: [{
      name: "admin",
      user: { "client-certificate-data": btoa(cert.certPem), "client-key-data": btoa(cert.keyPem) },
    }],
  });
}
