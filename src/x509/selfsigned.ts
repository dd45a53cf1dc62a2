/**
 * A self-signed serving certificate (ECDSA P-256), for services that run
 * TLS without a configured certificate. The certificate is an end-entity
 * (CA:FALSE): rustls clients reject a CA certificate used as a server's.
 *
 * @module
 */
import { encodePem } from "./pem.ts";
import * as x509 from "./x509.ts";

/** Options for {@linkcode createSelfSignedCertificate}. */
export interface SelfSignedOptions {
  /** Subject common name. */
  commonName: string;
  /** DNS names for the subjectAltName. */
  dnsNames?: string[];
  /** IP addresses for the subjectAltName. */
  ipAddresses?: string[];
  /** Validity from now; default one year. */
  validityMs?: number;
}

/** Creates a self-signed certificate; resolves to PEM certificate and PKCS#8 key. */
export async function createSelfSignedCertificate(
  options: SelfSignedOptions,
): Promise<{ cert: string; key: string }> {
  const algorithm = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
  const keys = await crypto.subtle.generateKey(algorithm, true, ["sign", "verify"]) as CryptoKeyPair;
  const names = [
    ...(options.dnsNames ?? []).map((value) => ({ type: "dns" as const, value })),
    ...(options.ipAddresses ?? []).map((value) => ({ type: "ip" as const, value })),
  ];
  const serial = crypto.getRandomValues(new Uint8Array(16));
  serial[0] &= 0x7f; // positive
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial.toHex(),
    name: `CN=${options.commonName}`,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + (options.validityMs ?? 365 * 24 * 3600_000)),
    keys,
    signingAlgorithm: algorithm,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      ...(names.length > 0 ? [new x509.SubjectAlternativeNameExtension(names)] : []),
    ],
  });
  const key = encodePem(await crypto.subtle.exportKey("pkcs8", keys.privateKey), "PRIVATE KEY");
  return { cert: encodePem(cert.rawData, "CERTIFICATE"), key };
}
