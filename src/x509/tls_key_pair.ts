/**
 * A TLS serving certificate and its private key, read from PEM files and
 * checked before a server uses them. Deno's TLS accepts any bytes when a
 * server starts and then fails every handshake without a word, so a wrong
 * file has to stop the service at start, with a line naming it.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import { createPrivateKey, type KeyObject, X509Certificate } from "node:crypto";
import { readSecretFile } from "../secrets/secret_file.ts";
import { decodePemBlocks, type PemBlock } from "./pem.ts";

/** Options for {@linkcode readTlsKeyPair}. */
export interface ReadTlsKeyPairOptions {
  /** PEM file of the certificate chain, the serving certificate first. */
  certFile: string;
  /** PEM file of the serving certificate's private key: PKCS#8, SEC1 (EC) or PKCS#1 (RSA), unencrypted. */
  keyFile: string;
  /** How errors name the certificate file, e.g. "--tls-cert"; default "TLS certificate". */
  certName?: string;
  /** How errors name the key file, e.g. "--tls-key"; default "TLS key". */
  keyName?: string;
}

/** The PEM texts, ready for a TLS server. */
export interface TlsKeyPair {
  /** The certificate chain, PEM, leaf first. */
  cert: string;
  /** The leaf's private key, unencrypted PEM. */
  key: string;
}

/** The certificate or key cannot serve TLS. The message names the file and the problem, never key bytes. */
export class TlsKeyPairError extends Error {
  /** Creates the error; `message` names the file and the problem. */
  constructor(message: string) {
    super(message);
    this.name = "TlsKeyPairError";
  }
}

/** Private-key PEM labels Deno's TLS reads, and the node:crypto DER type of each. */
const KEY_TYPES: Record<string, "pkcs8" | "sec1" | "pkcs1"> = {
  "PRIVATE KEY": "pkcs8",
  "EC PRIVATE KEY": "sec1",
  "RSA PRIVATE KEY": "pkcs1",
};

/** Elliptic curves Deno's TLS signs with (node:crypto's names). */
const TLS_CURVES = new Set(["prime256v1", "secp384r1", "secp521r1"]);

/**
 * Reads and checks a serving certificate and key: the certificate file's
 * first `CERTIFICATE` block must be an X.509 certificate, the key file's
 * first private-key block a key Deno's TLS can sign with (ECDSA P-256,
 * P-384 or P-521, RSA, or Ed25519), and that key must be the certificate's.
 *
 * @throws {TlsKeyPairError} or {@linkcode SecretFileError} (a missing,
 * unreadable or not permitted file), each naming the file.
 */
export async function readTlsKeyPair(options: ReadTlsKeyPairOptions): Promise<TlsKeyPair> {
  const certLabel = `${options.certName ?? "TLS certificate"} file ${options.certFile}`;
  const keyLabel = `${options.keyName ?? "TLS key"} file ${options.keyFile}`;
  const decoder = new TextDecoder();
  const certBytes = await readSecretFile(options.certFile, {
    description: options.certName ?? "TLS certificate",
    minLength: 0,
  });
  const keyBytes = await readSecretFile(options.keyFile, {
    description: options.keyName ?? "TLS key",
    minLength: 0,
  });
  const pair = { cert: decoder.decode(certBytes), key: decoder.decode(keyBytes) };
  keyBytes.fill(0);
  checkTlsKeyPair(pair, { cert: certLabel, key: keyLabel });
  return pair;
}

/**
 * Checks PEM texts as {@linkcode readTlsKeyPair} checks its files' content;
 * `labels` name the certificate and the key in errors.
 *
 * @throws {TlsKeyPairError}
 */
export function checkTlsKeyPair(pair: TlsKeyPair, labels: { cert: string; key: string }): void {
  const certificate = parseCertificate(pair.cert, labels.cert);
  const privateKey = parsePrivateKey(pair.key, labels.key);
  if (!certificate.checkPrivateKey(privateKey)) {
    throw new TlsKeyPairError(`${labels.key} is not the key of the certificate in ${labels.cert}`);
  }
}

function parseCertificate(pem: string, label: string): X509Certificate {
  const block = pemBlocks(pem).find((b) => b.type === "CERTIFICATE");
  if (!block) throw new TlsKeyPairError(`${label}: no PEM CERTIFICATE block`);
  try {
    return new X509Certificate(new Uint8Array(block.rawData));
  } catch {
    throw new TlsKeyPairError(`${label}: the CERTIFICATE block is not a valid X.509 certificate`);
  }
}

function parsePrivateKey(pem: string, label: string): KeyObject {
  const blocks = pemBlocks(pem);
  const block = blocks.find((b) => b.type in KEY_TYPES);
  if (!block) {
    if (blocks.some((b) => b.type === "ENCRYPTED PRIVATE KEY")) {
      throw new TlsKeyPairError(`${label}: the key is encrypted; give it unencrypted`);
    }
    throw new TlsKeyPairError(
      `${label}: no PEM private key block (want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)`,
    );
  }
  if (block.headers.length > 0) {
    throw new TlsKeyPairError(`${label}: PEM headers are not supported (is the key encrypted?)`);
  }
  let key: KeyObject;
  try {
    key = createPrivateKey({
      key: Buffer.from(block.rawData),
      format: "der",
      type: KEY_TYPES[block.type],
    });
  } catch {
    throw new TlsKeyPairError(`${label}: the ${block.type} block is not a valid private key`);
  }
  const type = key.asymmetricKeyType;
  const curve = key.asymmetricKeyDetails?.namedCurve;
  if (type === "ec" ? !TLS_CURVES.has(curve ?? "") : type !== "rsa" && type !== "ed25519") {
    throw new TlsKeyPairError(
      `${label}: unsupported key type ${type === "ec" ? `EC ${curve}` : type} ` +
        "(TLS here takes ECDSA P-256, P-384 or P-521, RSA, or Ed25519)",
    );
  }
  return key;
}

function pemBlocks(pem: string): PemBlock[] {
  try {
    return decodePemBlocks(pem);
  } catch {
    return [];
  }
}
