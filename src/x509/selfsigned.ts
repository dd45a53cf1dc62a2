/**
 * A self-signed serving certificate (ECDSA P-256), for services that run
 * TLS without a configured certificate. The certificate is an end-entity
 * (CA:FALSE): rustls clients reject a CA certificate used as a server's.
 *
 * Built as DER and signed once with node:crypto, without a certificate
 * library: the bootstrapper and the join service make one before they
 * listen, and evaluating @peculiar/x509 alone took longer than the rest of
 * their start; and not with WebCrypto, whose first ECDSA key generation in a
 * process costs 35–45 ms (every later one under 1 ms).
 *
 * @module
 */
import { generateKeyPairSync, sign } from "node:crypto";
import { parseIp } from "../net/ip.ts";
import {
  derBitString,
  derContextTag,
  derElement,
  derExtension,
  derOid,
  derSequence,
  DerTag,
  derTime,
  derUnsignedInteger,
} from "./der.ts";
import { encodePem } from "./pem.ts";

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

/** ecdsa-with-SHA256 (RFC 5758), without parameters. */
const ECDSA_WITH_SHA256 = derSequence(derOid("1.2.840.10045.4.3.2"));
/** UTF8String. */
const UTF8_STRING = 0x0c;
/** GeneralName choices (IMPLICIT): dNSName [2] IA5String, iPAddress [7] OCTET STRING. */
const DNS_NAME = derContextTag(2, false);
const IP_ADDRESS = derContextTag(7, false);

/**
 * Creates a self-signed certificate: its PEM certificate and PKCS#8
 * key. Its extensions: basicConstraints CA:FALSE and keyUsage
 * digitalSignature (both critical), extKeyUsage serverAuth, and the names
 * as subjectAltName. Throws a TypeError for an IP address it cannot parse.
 */
export function createSelfSignedCertificate(
  options: SelfSignedOptions,
): { cert: string; key: string } {
  const names = [
    ...(options.dnsNames ?? []).map((name) => derElement(DNS_NAME, new TextEncoder().encode(name))),
    ...(options.ipAddresses ?? []).map((text) => {
      const address = parseIp(text);
      if (!address) throw new TypeError(`not an IP address: ${JSON.stringify(text)}`);
      return derElement(IP_ADDRESS, address);
    }),
  ];
  const keys = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const serial = crypto.getRandomValues(new Uint8Array(16));
  serial[0] &= 0x7f; // positive
  const now = Date.now();
  // Name ::= SEQUENCE OF RelativeDistinguishedName: one RDN with the common name (2.5.4.3).
  const name = derSequence(
    derElement(
      DerTag.set,
      derSequence(derOid("2.5.4.3"), derElement(UTF8_STRING, new TextEncoder().encode(options.commonName))),
    ),
  );
  const extensions = [
    derExtension("2.5.29.19", true, derSequence()), // basicConstraints: cA FALSE, the default, is left out
    derExtension("2.5.29.15", true, derElement(DerTag.bitString, Uint8Array.of(7, 0x80))), // digitalSignature
    derExtension("2.5.29.37", false, derSequence(derOid("1.3.6.1.5.5.7.3.1"))), // serverAuth
    ...(names.length > 0 ? [derExtension("2.5.29.17", false, derSequence(...names))] : []),
  ];
  const tbsCertificate = derSequence(
    derElement(derContextTag(0, true), derUnsignedInteger(Uint8Array.of(2))), // version v3
    derUnsignedInteger(serial),
    ECDSA_WITH_SHA256,
    name,
    derSequence(
      derTime(new Date(now - 60_000)),
      derTime(new Date(now + (options.validityMs ?? 365 * 24 * 3600_000))),
    ),
    name,
    new Uint8Array(keys.publicKey.export({ type: "spki", format: "der" })),
    derElement(derContextTag(3, true), derSequence(...extensions)),
  );
  // node:crypto's ECDSA signature is DER already, as X.509 wants it.
  const signature = new Uint8Array(sign("sha256", tbsCertificate, keys.privateKey));
  const cert = derSequence(tbsCertificate, ECDSA_WITH_SHA256, derBitString(signature));
  const pkcs8 = keys.privateKey.export({ type: "pkcs8", format: "der" });
  try {
    return { cert: encodePem(cert, "CERTIFICATE"), key: encodePem(pkcs8, "PRIVATE KEY") };
  } finally {
    pkcs8.fill(0);
  }
}
