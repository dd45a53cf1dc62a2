/**
 * Private keys from PEM for signing with WebCrypto: SEC1 `EC PRIVATE KEY`,
 * PKCS#1 `RSA PRIVATE KEY` and PKCS#8 `PRIVATE KEY` blocks (WebCrypto
 * imports only PKCS#8, so the others are rewrapped), and a check that a key
 * belongs to a certificate.
 *
 * Errors name the input and what is wrong with it, never key bytes. Read
 * with the small DER reader (`der.ts`), not a schema library: the join
 * service imports its CA key at start.
 *
 * @module
 */
import { ReasonError } from "../reason_error.ts";
import type { Certificate } from "./certificate.ts";
import {
  DER_NULL,
  DerError,
  type DerNode,
  derNodes,
  derOctetString,
  derOid,
  derOidString,
  derSequence,
  DerTag,
  derUnsignedInteger,
  readDer,
} from "./der.ts";
import {
  decodePem,
  PEM_EC_PRIVATE_KEY,
  PEM_PRIVATE_KEY,
  PEM_RSA_PRIVATE_KEY,
  type PemBlock,
  PemError,
} from "./pem.ts";

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

const OID_EC_PUBLIC_KEY = "1.2.840.10045.2.1";
const OID_RSA_ENCRYPTION = "1.2.840.113549.1.1.1";

/** ECDSA curves WebCrypto signs with, by curve OID, with the hash Go's x509 pairs with each. */
const ecCurves: Record<string, { namedCurve: string; hash: string }> = {
  "1.2.840.10045.3.1.7": { namedCurve: "P-256", hash: "SHA-256" }, // secp256r1
  "1.3.132.0.34": { namedCurve: "P-384", hash: "SHA-384" }, // secp384r1
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
  const { algorithm } = pkcs8;
  let verifyAlgorithm: EcKeyImportParams | RsaHashedImportParams;
  let signingAlgorithm: EcdsaParams | Algorithm;
  if (algorithm === OID_RSA_ENCRYPTION) {
    verifyAlgorithm = { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" };
    signingAlgorithm = { name: "RSASSA-PKCS1-v1_5" };
  } else if (algorithm === OID_EC_PUBLIC_KEY) {
    const curveOid = namedCurveOf(pkcs8.parameters, source);
    const curve = ecCurves[curveOid];
    if (!curve) throw new PrivateKeyError("unsupported", `${source}: unsupported elliptic curve ${curveOid}`);
    verifyAlgorithm = { name: "ECDSA", namedCurve: curve.namedCurve };
    signingAlgorithm = { name: "ECDSA", hash: curve.hash };
  } else {
    const name = keyAlgorithmNames[algorithm] ?? algorithm;
    throw new PrivateKeyError("unsupported", `${source}: unsupported private key algorithm ${name}`);
  }
  const der = pkcs8.der;
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
  certificate: Pick<Certificate, "subjectPublicKeyInfo">,
  sources: { cert: string; key: string },
): Promise<void> {
  const mismatch = () =>
    new PrivateKeyError("mismatch", `private key ${sources.key} does not match certificate ${sources.cert}`);
  let publicKey: CryptoKey;
  try {
    publicKey = await crypto.subtle.importKey(
      "spki",
      certificate.subjectPublicKeyInfo,
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

/** A key as PKCS#8, what WebCrypto imports: its DER, its algorithm's OID and the algorithm's parameters. */
interface Pkcs8Key {
  der: Uint8Array<ArrayBuffer>;
  algorithm: string;
  parameters: DerNode | undefined;
}

/**
 * The PKCS#8 form of a SEC1, PKCS#1 or PKCS#8 key block, its structure
 * checked (a malformed one is "invalid", naming the block's type).
 */
function privateKeyInfo(block: PemBlock, source: string): Pkcs8Key {
  const der = new Uint8Array(block.rawData);
  const what = block.type;
  try {
    switch (block.type) {
      case PEM_EC_PRIVATE_KEY: {
        // ECPrivateKey ::= SEQUENCE { version INTEGER, privateKey OCTET STRING,
        //   parameters [0] ECParameters OPTIONAL, publicKey [1] BIT STRING OPTIONAL }
        const [version, privateKey, ...optional] = derNodes(
          readDer(der, what, DerTag.sequence).content,
          what,
        );
        expect(version, DerTag.integer, what);
        expect(privateKey, DerTag.octetString, what);
        const [parameters, publicKey] = contextFields(optional, [0xa0, 0xa1], what);
        if (publicKey) readDer(publicKey.content, what, DerTag.bitString);
        const curve = parameters && readDer(parameters.content, what);
        if (curve?.tag !== DerTag.oid) throw unnamedCurve(source);
        return {
          der: wrapPkcs8(derSequence(derOid(OID_EC_PUBLIC_KEY), curve.encoded), der),
          algorithm: OID_EC_PUBLIC_KEY,
          parameters: curve,
        };
      }
      case PEM_RSA_PRIVATE_KEY: {
        // RSAPrivateKey ::= SEQUENCE { version, modulus, publicExponent, privateExponent, prime1, prime2,
        //   exponent1, exponent2, coefficient (INTEGERs), otherPrimeInfos OPTIONAL }
        const fields = derNodes(readDer(der, what, DerTag.sequence).content, what);
        if (fields.length < 9 || fields.length > 10) throw new DerError(what);
        for (const field of fields.slice(0, 9)) expect(field, DerTag.integer, what);
        if (fields.length === 10) expect(fields[9], DerTag.sequence, what);
        return {
          der: wrapPkcs8(derSequence(derOid(OID_RSA_ENCRYPTION), DER_NULL), der),
          algorithm: OID_RSA_ENCRYPTION,
          parameters: undefined,
        };
      }
      case PEM_PRIVATE_KEY: {
        // PrivateKeyInfo ::= SEQUENCE { version INTEGER, privateKeyAlgorithm AlgorithmIdentifier,
        //   privateKey OCTET STRING, attributes [0] OPTIONAL, publicKey [1] OPTIONAL }
        const [version, algorithm, privateKey, ...optional] = derNodes(
          readDer(der, what, DerTag.sequence).content,
          what,
        );
        expect(version, DerTag.integer, what);
        expect(privateKey, DerTag.octetString, what);
        contextFields(optional, [0xa0, 0x81, 0xa1], what);
        const [oid, parameters, ...rest] = derNodes(expect(algorithm, DerTag.sequence, what).content, what);
        if (rest.length > 0) throw new DerError(what);
        return { der, algorithm: derOidString(expect(oid, DerTag.oid, what).content, what), parameters };
      }
      default:
        throw new PrivateKeyError(
          "unsupported",
          `unsupported key type ${JSON.stringify(block.type)} in ${source} ` +
            `(want "${PEM_EC_PRIVATE_KEY}", "${PEM_RSA_PRIVATE_KEY}" or "${PEM_PRIVATE_KEY}")`,
        );
    }
  } catch (error) {
    if (error instanceof DerError) throw new PrivateKeyError("invalid", `${source}: ${error.message}`);
    throw error;
  }
}

/** A PKCS#8 PrivateKeyInfo: version 0, `algorithm` (an AlgorithmIdentifier, DER), the key's DER. */
function wrapPkcs8(algorithm: Uint8Array, key: Uint8Array): Uint8Array<ArrayBuffer> {
  return derSequence(derUnsignedInteger(Uint8Array.of(0)), algorithm, derOctetString(key));
}

/**
 * The optional context-tagged fields ending a SEQUENCE, in the order of
 * `tags` (each at most once, in that order); throws {@linkcode DerError} on
 * anything else.
 */
function contextFields(nodes: DerNode[], tags: number[], what: string): (DerNode | undefined)[] {
  const fields: (DerNode | undefined)[] = tags.map(() => undefined);
  let next = 0;
  for (const node of nodes) {
    const index = tags.indexOf(node.tag, next);
    if (index < 0) throw new DerError(what);
    fields[index] = node;
    next = index + 1;
  }
  return fields;
}

/** `node`, when it has tag `tag`; throws {@linkcode DerError} naming `what` otherwise. */
function expect(node: DerNode | undefined, tag: number, what: string): DerNode {
  if (node?.tag !== tag) throw new DerError(what);
  return node;
}

/**
 * The curve OID of EC parameters (`ECParameters ::= CHOICE { namedCurve
 * OID, implicitCurve NULL, specifiedCurve SEQUENCE }`): only a named curve
 * is supported.
 */
function namedCurveOf(parameters: DerNode | undefined, source: string): string {
  if (parameters?.tag !== DerTag.oid) {
    if (parameters === undefined || parameters.tag === DerTag.null || parameters.tag === DerTag.sequence) {
      throw unnamedCurve(source);
    }
    throw new PrivateKeyError("invalid", `${source}: ${new DerError("elliptic curve parameters").message}`);
  }
  try {
    return derOidString(parameters.content, "elliptic curve parameters");
  } catch (error) {
    if (error instanceof DerError) throw new PrivateKeyError("invalid", `${source}: ${error.message}`);
    throw error;
  }
}

function unnamedCurve(source: string): PrivateKeyError {
  return new PrivateKeyError("unsupported", `${source}: the EC private key does not name its curve`);
}
