/**
 * Private keys from PEM for signing with WebCrypto: SEC1 `EC PRIVATE KEY`,
 * PKCS#1 `RSA PRIVATE KEY` and PKCS#8 `PRIVATE KEY` blocks (WebCrypto
 * imports only PKCS#8, so the others are rewrapped), and a check that a key
 * belongs to a certificate.
 *
 * Errors name the input and what is wrong with it, never key bytes.
 *
 * @module
 */
import { ReasonError } from "../reason_error.ts";
import { AsnConvert } from "@peculiar/asn1-schema";
import { ECParameters, ECPrivateKey, id_ecPublicKey, id_secp256r1, id_secp384r1 } from "@peculiar/asn1-ecc";
import { id_rsaEncryption, RSAPrivateKey } from "@peculiar/asn1-rsa";
import { PrivateKey, PrivateKeyInfo } from "@peculiar/asn1-pkcs8";
import { AlgorithmIdentifier } from "@peculiar/asn1-x509";
import { DerError, parseDer } from "./der.ts";
import { decodePem, type PemBlock, PemError } from "./pem.ts";
import type { X509Certificate } from "./x509.ts";

/** PEM label of a SEC1 elliptic-curve key. */
export const PEM_EC_PRIVATE_KEY = "EC PRIVATE KEY";
/** PEM label of a PKCS#1 RSA key. */
export const PEM_RSA_PRIVATE_KEY = "RSA PRIVATE KEY";
/** PEM label of a PKCS#8 key. */
export const PEM_PRIVATE_KEY = "PRIVATE KEY";

/** Why a private key was refused. */
export type PrivateKeyFailure =
  | "invalid" // not PEM, malformed DER, or a key WebCrypto cannot use
  | "unsupported" // a key type, curve or PEM feature (encryption) this module does not sign with
  | "mismatch"; // the key is not the key of the certificate it should belong to

/** A private key was refused. Never carries key material. */
export class PrivateKeyError extends ReasonError<PrivateKeyFailure> {}

/** A private key ready to sign, with the algorithms to sign and verify with. */
export interface SigningKey {
  /** The non-extractable private key. */
  privateKey: CryptoKey;
  /** Signature algorithm: ECDSA with the curve's hash (SHA-256 for P-256, SHA-384 for P-384), or RSASSA-PKCS1-v1_5. */
  signingAlgorithm: EcdsaParams | Algorithm;
  /** Import parameters of the matching public key. */
  verifyAlgorithm: EcKeyImportParams | RsaHashedImportParams;
}

/** ECDSA curves WebCrypto signs with, by curve OID, with the hash Go's x509 pairs with each. */
const ecCurves: Record<string, { namedCurve: string; hash: string }> = {
  [id_secp256r1]: { namedCurve: "P-256", hash: "SHA-256" },
  [id_secp384r1]: { namedCurve: "P-384", hash: "SHA-384" },
};

/** Readable names of key algorithms that are refused. */
const keyAlgorithmNames: Record<string, string> = {
  "1.3.101.112": "Ed25519",
  "1.3.101.113": "Ed448",
  "1.2.840.113549.1.1.10": "RSASSA-PSS",
  "1.2.840.10040.4.1": "DSA",
};

/**
 * Imports the first PEM block of `pem` as a signing key: a P-256, P-384 or
 * RSA key in SEC1, PKCS#1 or PKCS#8 form, unencrypted. `source` names the
 * input in errors. Throws {@linkcode PrivateKeyError}.
 */
export async function importSigningKey(pem: string, source: string): Promise<SigningKey> {
  let block: PemBlock;
  try {
    block = decodePem(pem, source)[0];
  } catch (error) {
    if (error instanceof PemError) throw new PrivateKeyError("invalid", error.message);
    throw error;
  }
  if (block.headers.length > 0) {
    throw new PrivateKeyError(
      "unsupported",
      `${source}: PEM headers are not supported (is the key encrypted?)`,
    );
  }
  const pkcs8 = privateKeyInfo(block, source);
  const algorithm = pkcs8.privateKeyAlgorithm.algorithm;
  let verifyAlgorithm: EcKeyImportParams | RsaHashedImportParams;
  let signingAlgorithm: EcdsaParams | Algorithm;
  if (algorithm === id_rsaEncryption) {
    verifyAlgorithm = { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" };
    signingAlgorithm = { name: "RSASSA-PKCS1-v1_5" };
  } else if (algorithm === id_ecPublicKey) {
    const curveOid = namedCurveOf(pkcs8.privateKeyAlgorithm.parameters, source);
    const curve = ecCurves[curveOid];
    if (!curve) throw new PrivateKeyError("unsupported", `${source}: unsupported elliptic curve ${curveOid}`);
    verifyAlgorithm = { name: "ECDSA", namedCurve: curve.namedCurve };
    signingAlgorithm = { name: "ECDSA", hash: curve.hash };
  } else {
    const name = keyAlgorithmNames[algorithm] ?? algorithm;
    throw new PrivateKeyError("unsupported", `${source}: unsupported private key algorithm ${name}`);
  }
  const der = new Uint8Array(AsnConvert.serialize(pkcs8));
  try {
    const privateKey = await crypto.subtle.importKey("pkcs8", der, verifyAlgorithm, false, ["sign"]);
    return { privateKey, signingAlgorithm, verifyAlgorithm };
  } catch {
    throw new PrivateKeyError("invalid", `${source}: the ${block.type} is not a valid key`);
  } finally {
    der.fill(0);
  }
}

/**
 * Checks that `key` is the private key of `certificate`'s public key, by
 * signing a random probe and verifying it with the certificate's key.
 * `sources` name the inputs in errors. Throws {@linkcode PrivateKeyError}
 * ("mismatch", or "invalid" for a key that imports but cannot sign).
 */
export async function checkKeyMatchesCertificate(
  key: SigningKey,
  certificate: X509Certificate,
  sources: { cert: string; key: string },
): Promise<void> {
  const mismatch = () =>
    new PrivateKeyError("mismatch", `private key ${sources.key} does not match certificate ${sources.cert}`);
  let publicKey: CryptoKey;
  try {
    publicKey = await crypto.subtle.importKey(
      "spki",
      new Uint8Array(certificate.publicKey.rawData),
      key.verifyAlgorithm,
      false,
      ["verify"],
    );
  } catch {
    throw mismatch(); // the certificate's key is of another type or curve
  }
  const probe = crypto.getRandomValues(new Uint8Array(32));
  let signature: ArrayBuffer;
  try {
    signature = await crypto.subtle.sign(key.signingAlgorithm, key.privateKey, probe);
  } catch {
    // WebCrypto imports some invalid keys (e.g. a zero EC scalar) and only fails when signing.
    throw new PrivateKeyError("invalid", `${sources.key}: the key cannot sign (not a valid key)`);
  }
  if (!await crypto.subtle.verify(key.signingAlgorithm, publicKey, signature, probe)) throw mismatch();
}

/** The PKCS#8 form of a SEC1, PKCS#1 or PKCS#8 key block. */
function privateKeyInfo(block: PemBlock, source: string): PrivateKeyInfo {
  switch (block.type) {
    case PEM_EC_PRIVATE_KEY: {
      const key = parseKeyDer(block.rawData, ECPrivateKey, block.type, source);
      const namedCurve = key.parameters?.namedCurve;
      if (!namedCurve) throw unnamedCurve(source);
      return new PrivateKeyInfo({
        privateKeyAlgorithm: new AlgorithmIdentifier({
          algorithm: id_ecPublicKey,
          parameters: AsnConvert.serialize(new ECParameters({ namedCurve })),
        }),
        privateKey: new PrivateKey(block.rawData),
      });
    }
    case PEM_RSA_PRIVATE_KEY:
      parseKeyDer(block.rawData, RSAPrivateKey, block.type, source);
      return new PrivateKeyInfo({
        privateKeyAlgorithm: new AlgorithmIdentifier({ algorithm: id_rsaEncryption, parameters: null }),
        privateKey: new PrivateKey(block.rawData),
      });
    case PEM_PRIVATE_KEY:
      return parseKeyDer(block.rawData, PrivateKeyInfo, block.type, source);
    default:
      throw new PrivateKeyError(
        "unsupported",
        `unsupported key type ${JSON.stringify(block.type)} in ${source} ` +
          `(want "${PEM_EC_PRIVATE_KEY}", "${PEM_RSA_PRIVATE_KEY}" or "${PEM_PRIVATE_KEY}")`,
      );
  }
}

function namedCurveOf(parameters: ArrayBuffer | null | undefined, source: string): string {
  const namedCurve = parameters
    ? parseKeyDer(parameters, ECParameters, "elliptic curve parameters", source).namedCurve
    : undefined;
  if (!namedCurve) throw unnamedCurve(source);
  return namedCurve;
}

function parseKeyDer<T>(data: ArrayBuffer, schema: new () => T, what: string, source: string): T {
  try {
    return parseDer(data, schema, what);
  } catch (error) {
    if (error instanceof DerError) throw new PrivateKeyError("invalid", `${source}: ${error.message}`);
    throw error;
  }
}

function unnamedCurve(source: string): PrivateKeyError {
  return new PrivateKeyError("unsupported", `${source}: the EC private key does not name its curve`);
}
