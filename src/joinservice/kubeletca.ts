/**
 * The cluster CA as the join service uses it: loaded from `ca.crt` and
 * `ca.key`, and signing kubelet client certificates from the DER CSRs
 * joining nodes send (see {@linkcode signKubeletCertificate} for why they
 * are client certificates only).
 *
 * The original signed any self-signed CSR with the right O and CN and
 * silently dropped everything else it asked for. This signer rejects a CSR
 * that asks for anything it would not get (DNS, e-mail or URI names, other
 * subject attributes, other extensions), so a node learns its request was
 * wrong instead of getting a different certificate than it asked for.
 * Malformed or unsupported CA files give a clear error (the original
 * crashed on a key file without PEM data); no error carries key bytes.
 *
 * @module
 */
import { ReasonError } from "../reason_error.ts";
import { type Certificate, readCertificate, subjectKeyIdentifier } from "../x509/certificate.ts";
import {
  DER_NULL,
  derBitString,
  derContextTag,
  derEcdsaSignature,
  derElement,
  DerError,
  derExtension,
  type DerNode,
  derNodes,
  derNonNegativeInteger,
  derOid,
  derOidString,
  derSequence,
  DerTag,
  derTime,
  derUnsignedInteger,
  readDer,
} from "../x509/der.ts";
import { decodePem, encodePem, PemError } from "../x509/pem.ts";
import { checkKeyMatchesCertificate, importSigningKey, PrivateKeyError } from "../x509/private_key.ts";
import { type Clock, systemClock } from "../clock.ts";
import {
  firstAddress,
  formatIp,
  ipEquals,
  type IpNetwork,
  isLoopbackOrUnspecified,
  parseIp,
} from "../net/ip.ts";
import { SharedLoad } from "../async/shared_load.ts";
import { FILE_CHECK_INTERVAL_MS, fileStamp } from "../fs/file_stamp.ts";
import type { ApiServerEndpointSource, KubeletSigner } from "./dependencies.ts";
import { k8sCompliantHostname, NodeNameError, nodeNameFromCommonName } from "../kubernetes/nodename.ts";
import { reject } from "./rejections.ts";

/** Where kubeadm keeps the cluster CA. */
export const DEFAULT_CA_CERT_FILE = "/etc/kubernetes/pki/ca.crt";
/** Where kubeadm keeps the cluster CA key. */
export const DEFAULT_CA_KEY_FILE = "/etc/kubernetes/pki/ca.key";

/** The only organization a kubelet certificate may have. */
export const NODES_ORGANIZATION = "system:nodes";

/** Kubelet certificates start this long before they are issued (clock skew between nodes). */
export const KUBELET_CERT_BACKDATE_MS = 2 * 60 * 60 * 1000;
/** Kubelet certificates are valid this long after they are issued (8760 h, one year). */
export const KUBELET_CERT_VALIDITY_MS = 8760 * 60 * 60 * 1000;

/** Why the CA could not be loaded or a CSR could not be signed. */
export type KubeletCaFailure =
  | "ca-unreadable" // a CA file cannot be read
  | "ca-certificate-invalid" // ca.crt has no usable certificate
  | "ca-key-invalid" // ca.key has no usable key
  | "ca-key-unsupported" // ca.key holds a key type or curve we cannot sign with
  | "ca-key-mismatch" // ca.key is not the key of ca.crt
  | "csr-malformed" // the CSR is not a DER PKCS#10 request
  | "csr-signature-invalid" // the CSR's self-signature does not verify
  | "csr-rejected"; // the CSR asks for something a kubelet certificate may not have

/** The CA could not be loaded or a CSR could not be signed. Never carries key material. */
export class KubeletCaError extends ReasonError<KubeletCaFailure> {}

/** A loaded cluster CA, ready to sign. */
export interface KubeletCa {
  /** The CA certificate (first certificate of `ca.crt`). */
  readonly certificate: Certificate;
  /** The CA private key, non-extractable. */
  readonly privateKey: CryptoKey;
  /** The signature algorithm for certificates this CA issues (SHA-256 for P-256 and RSA). */
  readonly signingAlgorithm: EcdsaParams | Algorithm;
  /** What every certificate this CA issues carries of it, DER-encoded once at load. */
  readonly issued: IssuerFields;
}

/** The parts of an issued certificate that come from its CA, DER-encoded. */
export interface IssuerFields {
  /** The CA's subject, the certificate's issuer. */
  name: Uint8Array;
  /** The certificate's signature AlgorithmIdentifier. */
  signatureAlgorithm: Uint8Array;
  /** The authorityKeyIdentifier extension (the CA's subject key identifier), or undefined when it has none. */
  authorityKeyIdentifier: Uint8Array | undefined;
}

/** Options for {@linkcode readKubeletCa}. */
export interface ReadKubeletCaOptions {
  /** CA certificate file; default {@linkcode DEFAULT_CA_CERT_FILE}. */
  certFile?: string;
  /** CA key file; default {@linkcode DEFAULT_CA_KEY_FILE}. */
  keyFile?: string;
  /** Aborts the file reads. */
  signal?: AbortSignal;
}

/** Reads and loads the cluster CA from its files (see {@linkcode parseKubeletCa}). */
export async function readKubeletCa(options: ReadKubeletCaOptions = {}): Promise<KubeletCa> {
  const certFile = options.certFile ?? DEFAULT_CA_CERT_FILE;
  const keyFile = options.keyFile ?? DEFAULT_CA_KEY_FILE;
  const read = async (path: string, what: string) => {
    try {
      return await Deno.readTextFile(path, { signal: options.signal });
    } catch (error) {
      if (options.signal?.aborted) throw error;
      const why = error instanceof Deno.errors.NotFound ? "no such file" : (error as Error).name;
      throw new KubeletCaError("ca-unreadable", `reading ${what} ${path}: ${why}`);
    }
  };
  const [certPem, keyPem] = await Promise.all([read(certFile, "CA certificate"), read(keyFile, "CA key")]);
  return await parseKubeletCa(certPem, keyPem, { certSource: certFile, keySource: keyFile });
}

/** Options for {@linkcode parseKubeletCa}: names of the inputs for error messages. */
export interface ParseKubeletCaOptions {
  /** How errors name the certificate input; default "ca.crt". */
  certSource?: string;
  /** How errors name the key input; default "ca.key". */
  keySource?: string;
}

/**
 * Loads the cluster CA from PEM: the first `CERTIFICATE` block of `certPem`
 * and the first PEM block of `keyPem`, which must be an `EC PRIVATE KEY`
 * (SEC1), `RSA PRIVATE KEY` (PKCS#1) or `PRIVATE KEY` (PKCS#8) holding a
 * P-256, P-384 or RSA key that matches the certificate's public key.
 * Throws {@linkcode KubeletCaError}.
 */
export async function parseKubeletCa(
  certPem: string,
  keyPem: string,
  options: ParseKubeletCaOptions = {},
): Promise<KubeletCa> {
  const sources = { cert: options.certSource ?? "ca.crt", key: options.keySource ?? "ca.key" };
  const certificate = parseCaCertificate(certPem, sources.cert);
  try {
    const key = await importSigningKey(keyPem, sources.key);
    await checkKeyMatchesCertificate(key, certificate, sources);
    return {
      certificate,
      privateKey: key.privateKey,
      signingAlgorithm: key.signingAlgorithm,
      issued: issuerFields(certificate, key.signingAlgorithm),
    };
  } catch (error) {
    if (error instanceof PrivateKeyError) {
      throw new KubeletCaError(caKeyFailures[error.reason], error.message);
    }
    throw error;
  }
}

/** The CA failure of each private key failure. */
const caKeyFailures: Record<PrivateKeyError["reason"], KubeletCaFailure> = {
  invalid: "ca-key-invalid",
  unsupported: "ca-key-unsupported",
  mismatch: "ca-key-mismatch",
};

/**
 * The first `CERTIFICATE` block of a PEM text, parsed. `source` names the
 * input in errors. Throws {@linkcode KubeletCaError}.
 */
export function parseCaCertificate(pem: string, source: string): Certificate {
  let blocks;
  try {
    blocks = decodePem(pem, source);
  } catch (error) {
    if (error instanceof PemError) throw new KubeletCaError("ca-certificate-invalid", error.message);
    throw error;
  }
  const block = blocks.find((b) => b.type === "CERTIFICATE");
  if (!block) {
    throw new KubeletCaError(
      "ca-certificate-invalid",
      `no CERTIFICATE PEM block found in ${source} (found ${
        blocks.map((b) => JSON.stringify(b.type)).join(", ")
      })`,
    );
  }
  try {
    return readCertificate(block.rawData);
  } catch {
    throw new KubeletCaError(
      "ca-certificate-invalid",
      `${source}: CERTIFICATE is not a valid X.509 certificate`,
    );
  }
}

/** An address no kubelet certificate may carry, and what it is (for the error message). */
export interface ReservedAddress {
  /** 4 or 16 bytes. */
  address: Uint8Array;
  /** E.g. "the API server endpoint". */
  what: string;
}

/** Options for {@linkcode signKubeletCertificate}. */
export interface SignKubeletCertificateOptions {
  /** Time source for the validity window; default the system clock. */
  clock?: Clock;
  /**
   * Addresses of the cluster a node may not claim, besides loopback and
   * unspecified addresses (always refused): the API server endpoint and the
   * service network's first address.
   */
  reservedAddresses?: readonly ReservedAddress[];
}

/**
 * Signs a kubelet client certificate for a DER PKCS#10 CSR and returns it
 * as PEM: the kubelet's identity towards the API server
 * (`system:node:<name>` in group `system:nodes`).
 *
 * The CSR must verify under its own key, have exactly the subject
 * `O=system:nodes, CN=system:node:<name>` and request nothing but IP
 * addresses as subject alternative names, none of them loopback,
 * unspecified or reserved (`options.reservedAddresses`). The certificate
 * has a random positive 128-bit serial, is valid from now − 2 h to now +
 * 8760 h, has key usage digitalSignature (critical), extended key usage
 * clientAuth only, `CA:FALSE`, the CSR's IP addresses and the CA's key
 * identifier as authority key identifier (when the CA has one).
 *
 * It is never a serving certificate: the cluster CA signs it, and every
 * kubeconfig trusts that CA for the API server, so a certificate with
 * serverAuth for an address the node chose could impersonate the API
 * server. (The original signed clientAuth and serverAuth and wrote the
 * certificate to the kubelet's `tlsCertFile`, its serving certificate.)
 * Throws {@linkcode KubeletCaError}.
 */
export async function signKubeletCertificate(
  csrDer: Uint8Array,
  ca: KubeletCa,
  options: SignKubeletCertificateOptions = {},
): Promise<string> {
  const request = await checkedCertificateRequest(csrDer, options.reservedAddresses ?? []);
  return await issueKubeletCertificate(request, ca, (options.clock ?? systemClock).now());
}

/** A CSR that verified and keeps every kubelet rule: what its certificate gets. */
interface KubeletRequest {
  /** The node name of its common name (after `system:node:`), a Kubernetes object name. */
  nodeName: string;
  /** Its subject, DER as the CSR has it. */
  subject: Uint8Array;
  /** Its SubjectPublicKeyInfo, DER as the CSR has it. */
  publicKey: Uint8Array<ArrayBuffer>;
  /** Its subject alternative names, all IP addresses (4 or 16 bytes). */
  ipAddresses: Uint8Array[];
}

/** Parses, verifies and checks a CSR (see {@linkcode signKubeletCertificate}). Throws {@linkcode KubeletCaError}. */
async function checkedCertificateRequest(
  csrDer: Uint8Array,
  reservedAddresses: readonly ReservedAddress[],
): Promise<KubeletRequest> {
  const csr = parseCertificateRequest(csrDer);
  await verifyCertificateRequestSignature(csr);
  const { nodeName, ipAddresses } = checkCertificateRequest(csr);
  checkAddresses(ipAddresses, reservedAddresses);
  return { nodeName, subject: csr.subject, publicKey: csr.publicKey, ipAddresses };
}

/**
 * The kubelet client certificate of a checked request, issued `now` (see
 * {@linkcode signKubeletCertificate}), as PEM. Built as DER directly: one
 * signature, no certificate library (which costs the join service several
 * times the signature per ticket).
 */
async function issueKubeletCertificate(request: KubeletRequest, ca: KubeletCa, now: number): Promise<string> {
  const { issued } = ca;
  const extensions = [
    ...KUBELET_EXTENSIONS,
    ...(issued.authorityKeyIdentifier ? [issued.authorityKeyIdentifier] : []),
    ...(request.ipAddresses.length > 0
      ? [derExtension(OID_SUBJECT_ALT_NAME, false, ipAddressNames(request.ipAddresses))]
      : []),
  ];
  const tbsCertificate = derSequence(
    derElement(derContextTag(0, true), derUnsignedInteger(Uint8Array.of(2))), // version v3
    derUnsignedInteger(crypto.getRandomValues(new Uint8Array(SERIAL_NUMBER_BYTES))),
    issued.signatureAlgorithm,
    issued.name,
    derSequence(
      derTime(new Date(now - KUBELET_CERT_BACKDATE_MS)),
      derTime(new Date(now + KUBELET_CERT_VALIDITY_MS)),
    ),
    request.subject,
    request.publicKey,
    derElement(derContextTag(3, true), derSequence(...extensions)),
  );
  const signature = new Uint8Array(
    await crypto.subtle.sign(ca.signingAlgorithm, ca.privateKey, tbsCertificate),
  );
  const signatureValue = ca.signingAlgorithm.name === "ECDSA" ? derEcdsaSignature(signature) : signature;
  return encodePem(
    derSequence(tbsCertificate, issued.signatureAlgorithm, derBitString(signatureValue)),
    "CERTIFICATE",
  );
}

/**
 * The node name a kubelet CSR asks for: its common name without the
 * `system:node:` prefix. Like the original, this does not check the CSR's
 * signature (signing does). Normalize the result with
 * `k8sCompliantHostname` (nodename.ts) before using it as an object name.
 * Throws {@linkcode KubeletCaError}.
 */
export function nodeNameFromCsr(csrDer: Uint8Array): string {
  const commonNames = parseCertificateRequest(csrDer).subjectAttributes
    .filter((a) => a.type === OID_COMMON_NAME)
    .map((a) => a.value);
  if (commonNames.length !== 1) {
    throw rejected(`certificate request must have exactly one common name but has ${describe(commonNames)}`);
  }
  return nodeNameOf(commonNames[0]);
}

// --- certificate requests ---

const OID_COMMON_NAME = "2.5.4.3";
const OID_ORGANIZATION = "2.5.4.10";
const OID_EXTENSION_REQUEST = "1.2.840.113549.1.9.14";
const OID_SUBJECT_ALT_NAME = "2.5.29.17";

/** Readable names of OIDs that appear in CSRs, for error messages. */
const oidNames: Record<string, string> = {
  "2.5.4.6": "C",
  "2.5.4.8": "ST",
  "2.5.4.7": "L",
  "2.5.4.9": "street",
  "2.5.4.17": "postalCode",
  [OID_ORGANIZATION]: "O",
  "2.5.4.11": "OU",
  [OID_COMMON_NAME]: "CN",
  "2.5.4.5": "serialNumber",
  "2.5.4.4": "SN",
  "2.5.4.42": "GN",
  "2.5.4.12": "title",
  "0.9.2342.19200300.100.1.25": "DC",
  "0.9.2342.19200300.100.1.1": "UID",
  "1.2.840.113549.1.9.1": "emailAddress",
  "1.2.840.113549.1.9.2": "unstructuredName",
  "1.2.840.113549.1.9.7": "challengePassword",
  [OID_EXTENSION_REQUEST]: "extensionRequest",
  "2.5.29.14": "subjectKeyIdentifier",
  "2.5.29.15": "keyUsage",
  "2.5.29.17": "subjectAltName",
  "2.5.29.18": "issuerAltName",
  "2.5.29.19": "basicConstraints",
  "2.5.29.30": "nameConstraints",
  "2.5.29.35": "authorityKeyIdentifier",
  "2.5.29.37": "extKeyUsage",
};

function oidName(oid: string): string {
  const name = oidNames[oid];
  return name ? `${name} (${oid})` : oid;
}

function rejected(message: string): KubeletCaError {
  return new KubeletCaError("csr-rejected", message);
}

/** "none", or the count and the quoted values. */
function describe(values: string[]): string {
  return values.length === 0
    ? "none"
    : `${values.length} (${values.map((v) => JSON.stringify(v)).join(", ")})`;
}

/**
 * A PKCS#10 request (RFC 2986) as the signer reads it: the parts it checks,
 * and the DER of the parts it verifies and copies, exactly as the node
 * encoded them.
 */
interface CertificateRequest {
  /** certificationRequestInfo: the signed bytes. */
  info: Uint8Array<ArrayBuffer>;
  /** The subject (a Name). */
  subject: Uint8Array;
  /** The subject's attributes, in order. */
  subjectAttributes: SubjectAttribute[];
  /** The SubjectPublicKeyInfo. */
  publicKey: Uint8Array<ArrayBuffer>;
  /** The key's algorithm OID, and its named curve's OID for an EC key. */
  keyAlgorithm: { oid: string; namedCurve?: string };
  /** The request's attributes: type OID and the DER of each value. */
  attributes: { type: string; values: Uint8Array[] }[];
  /** The signature algorithm's OID, and its parameters' DER when it has any. */
  signatureAlgorithm: { oid: string; parameters?: DerNode };
  /** The signature (the BIT STRING's bytes). */
  signature: Uint8Array<ArrayBuffer>;
}

interface SubjectAttribute {
  type: string;
  value: string;
}

/**
 * Reads a DER PKCS#10 request, refusing anything else (trailing bytes
 * included) as "csr-malformed". A small reader rather than the schema
 * library: this runs for every join ticket.
 */
function parseCertificateRequest(der: Uint8Array): CertificateRequest {
  if (der.length === 0) throw new KubeletCaError("csr-malformed", "certificate request is empty");
  try {
    const bytes = new Uint8Array(der);
    const [info, signatureAlgorithm, signature] = sequence(readDer(bytes, READ_ERROR), 3);
    // attributes [0] may be left out: none.
    const [version, subject, publicKey, attributes, ...rest] = derNodes(
      expect(info, DerTag.sequence).content,
      READ_ERROR,
    );
    if (rest.length > 0) throw new DerError(READ_ERROR);
    if (expect(version, DerTag.integer).content.length !== 1 || version.content[0] !== 0) {
      throw new DerError(READ_ERROR);
    }
    const [keyAlgorithm] = sequence(expect(publicKey, DerTag.sequence), 2);
    return {
      info: info.encoded,
      subject: expect(subject, DerTag.sequence).encoded,
      subjectAttributes: derNodes(subject.content, READ_ERROR).flatMap((rdn) =>
        derNodes(expect(rdn, DerTag.set).content, READ_ERROR).map((pair) => {
          const [type, value] = sequence(expect(pair, DerTag.sequence), 2);
          return { type: oidOf(type), value: directoryString(value) };
        })
      ),
      publicKey: publicKey.encoded,
      keyAlgorithm: algorithmOf(keyAlgorithm),
      attributes: attributes === undefined ? [] : attributesOf(attributes),
      signatureAlgorithm: algorithmOf(signatureAlgorithm),
      signature: bitStringBytes(signature),
    };
  } catch (error) {
    if (!(error instanceof DerError)) throw error;
    throw new KubeletCaError("csr-malformed", "certificate request is not a DER-encoded PKCS#10 request");
  }
}

/** What a DER error names while a request is read (the caller turns it into its own message). */
const READ_ERROR = "certificate request";

/** `node`, when it has tag `tag`; throws {@linkcode DerError} otherwise. */
function expect<T extends ArrayBufferLike>(node: DerNode<T> | undefined, tag: number): DerNode<T> {
  if (node?.tag !== tag) throw new DerError(READ_ERROR);
  return node;
}

/** The elements of SEQUENCE `node`, which must be exactly `count`. */
function sequence<T extends ArrayBufferLike>(node: DerNode<T>, count: number): DerNode<T>[] {
  const nodes = derNodes(expect(node, DerTag.sequence).content, READ_ERROR);
  if (nodes.length !== count) throw new DerError(READ_ERROR);
  return nodes;
}

function oidOf(node: DerNode): string {
  return derOidString(expect(node, DerTag.oid).content, READ_ERROR);
}

/**
 * AlgorithmIdentifier: its OID, its parameters when it has any, and their
 * OID when they are one (an EC key's named curve).
 */
function algorithmOf(node: DerNode): { oid: string; parameters?: DerNode; namedCurve?: string } {
  const [algorithm, parameters, ...rest] = derNodes(expect(node, DerTag.sequence).content, READ_ERROR);
  if (rest.length > 0) throw new DerError(READ_ERROR);
  const oid = oidOf(algorithm);
  if (parameters === undefined) return { oid };
  return parameters.tag === DerTag.oid
    ? { oid, parameters, namedCurve: oidOf(parameters) }
    : { oid, parameters };
}

/** `attributes [0] IMPLICIT SET OF Attribute`, Attribute ::= SEQUENCE { type OID, values SET OF ANY }. */
function attributesOf(node: DerNode): { type: string; values: Uint8Array[] }[] {
  return derNodes(expect(node, derContextTag(0, true)).content, READ_ERROR).map((attribute) => {
    const [type, values] = sequence(attribute, 2);
    return {
      type: oidOf(type),
      values: derNodes(expect(values, DerTag.set).content, READ_ERROR).map((v) => v.encoded),
    };
  });
}

/** A BIT STRING of whole bytes. */
function bitStringBytes(node: DerNode): Uint8Array<ArrayBuffer> {
  const { content } = expect(node, DerTag.bitString);
  if (content[0] !== 0) throw new DerError(READ_ERROR);
  return new Uint8Array(content.subarray(1));
}

/**
 * Decoders of the string types a Name's attribute value may have (X.520
 * DirectoryString, and IA5String), each reading the text Go's crypto/x509
 * reads, or refusing the value (DerError). The subject is copied into the
 * certificate byte for byte and the API server takes the kubelet's user and
 * group from its own reading of it, so a value it would read differently
 * from the text checked here must not pass: a byte-order mark stays part of
 * the text (Go keeps it), and a value Go refuses or reads as other
 * characters is refused. UniversalString, which Go cannot read at all, and
 * NumericString are not decoded ("<not a string>").
 */
const stringDecoders: Record<number, (bytes: Uint8Array) => string> = {
  0x0c: utf8, // UTF8String
  0x13: printableString, // PrintableString
  0x14: utf8, // TeletexString: Go takes the bytes as they are, which is this text when they are UTF-8
  0x16: ia5String, // IA5String
  0x1e: bmpString, // BMPString
};

/** The characters of PrintableString (X.680 §41.4). */
const PRINTABLE_STRING = /^[A-Za-z0-9 '()+,\-./:=?]*$/;

const utf8Decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const utf16Decoder = new TextDecoder("utf-16be", { fatal: true, ignoreBOM: true });

function utf8(bytes: Uint8Array): string {
  try {
    return utf8Decoder.decode(bytes);
  } catch {
    throw new DerError(READ_ERROR);
  }
}

function printableString(bytes: Uint8Array): string {
  const text = new TextDecoder("latin1").decode(bytes);
  if (!PRINTABLE_STRING.test(text)) throw new DerError(READ_ERROR);
  return text;
}

/** IA5String: ASCII. */
function ia5String(bytes: Uint8Array): string {
  if (bytes.some((byte) => byte >= 0x80)) throw new DerError(READ_ERROR);
  return new TextDecoder("latin1").decode(bytes);
}

/** UTF-16BE of whole code units; an unpaired surrogate is refused (Go would read U+FFFD). */
function bmpString(bytes: Uint8Array): string {
  if (bytes.length % 2 !== 0) throw new DerError(READ_ERROR);
  try {
    return utf16Decoder.decode(bytes);
  } catch {
    throw new DerError(READ_ERROR);
  }
}

/** An attribute value as text, or "<not a string>". Throws {@linkcode DerError} for a string Go would not read as this text. */
function directoryString(node: DerNode): string {
  return stringDecoders[node.tag]?.(node.content) ?? "<not a string>";
}

/**
 * Checks the CSR's self-signature over `info` (its certificationRequestInfo
 * DER) with its own key `publicKey` (SubjectPublicKeyInfo DER): ECDSA on
 * P-256, P-384 or P-521 or RSASSA-PKCS1-v1_5, with SHA-256, -384 or -512,
 * or Ed25519.
 */
async function verifyCertificateRequestSignature(csr: CertificateRequest): Promise<void> {
  const unsupported = () =>
    new KubeletCaError(
      "csr-signature-invalid",
      "certificate request signature cannot be verified (unsupported key or signature algorithm)",
    );
  const signatureAlgorithm = csrSignatureAlgorithms[csr.signatureAlgorithm.oid];
  const keyParameters = csrKeyAlgorithm(csr.keyAlgorithm);
  if (!signatureAlgorithm || !keyParameters || signatureAlgorithm.key !== keyParameters.name) {
    throw unsupported();
  }
  // The parameters of these signature algorithms are absent (RFC 5758, RFC 8410) or NULL (RFC 4055; some
  // encoders write NULL for ECDSA too). Anything else is not one of these algorithms. Ed25519's must be
  // absent (RFC 8410 §3; Go refuses NULL there as well).
  const parameters = csr.signatureAlgorithm.parameters;
  const isNull = parameters?.tag === DerTag.null && parameters.content.length === 0;
  if (parameters !== undefined && (!isNull || signatureAlgorithm.key === "Ed25519")) throw unsupported();
  let signature = csr.signature;
  if (keyParameters.name === "ECDSA") {
    const p1363 = ecdsaSignatureP1363(signature, ecScalarLengths[keyParameters.namedCurve]);
    if (!p1363) throw new KubeletCaError("csr-signature-invalid", "certificate request signature is invalid");
    signature = p1363;
  }
  let key: CryptoKey;
  try {
    key = await crypto.subtle.importKey(
      "spki",
      csr.publicKey,
      { ...keyParameters, hash: signatureAlgorithm.hash },
      false,
      ["verify"],
    );
  } catch {
    throw unsupported();
  }
  if (keyParameters.name === "RSASSA-PKCS1-v1_5") {
    // A weaker key would make a certificate for the node's identity whose key others can factor.
    const bits = (key.algorithm as RsaHashedKeyAlgorithm).modulusLength;
    if (bits < MIN_RSA_KEY_BITS) {
      throw rejected(
        `certificate request key is RSA with ${bits} bits; a kubelet key needs at least ${MIN_RSA_KEY_BITS}`,
      );
    }
  }
  let valid: boolean;
  try {
    valid = await crypto.subtle.verify(
      { name: keyParameters.name, hash: signatureAlgorithm.hash },
      key,
      signature,
      csr.info,
    );
  } catch {
    throw unsupported();
  }
  if (!valid) throw new KubeletCaError("csr-signature-invalid", "certificate request signature is invalid");
}

/** The smallest RSA modulus a kubelet key may have (NIST SP 800-57: 112-bit security). */
const MIN_RSA_KEY_BITS = 2048;

/** CSR signature algorithms by OID: the key algorithm they need and their hash. */
const csrSignatureAlgorithms: Record<
  string,
  { key: "ECDSA" | "RSASSA-PKCS1-v1_5" | "Ed25519"; hash?: string }
> = {
  "1.2.840.10045.4.3.2": { key: "ECDSA", hash: "SHA-256" },
  "1.2.840.10045.4.3.3": { key: "ECDSA", hash: "SHA-384" },
  "1.2.840.10045.4.3.4": { key: "ECDSA", hash: "SHA-512" },
  "1.2.840.113549.1.1.11": { key: "RSASSA-PKCS1-v1_5", hash: "SHA-256" },
  "1.2.840.113549.1.1.12": { key: "RSASSA-PKCS1-v1_5", hash: "SHA-384" },
  "1.2.840.113549.1.1.13": { key: "RSASSA-PKCS1-v1_5", hash: "SHA-512" },
  "1.3.101.112": { key: "Ed25519" },
};

/** ECDSA curves a CSR key may be on, by OID. */
const csrCurves: Record<string, string> = {
  "1.2.840.10045.3.1.7": "P-256",
  "1.3.132.0.34": "P-384",
  "1.3.132.0.35": "P-521",
};
const ecScalarLengths: Record<string, number> = { "P-256": 32, "P-384": 48, "P-521": 66 };

/** WebCrypto import parameters of a CSR's key algorithm, or undefined when unsupported. */
function csrKeyAlgorithm(
  algorithm: CertificateRequest["keyAlgorithm"],
): { name: "ECDSA"; namedCurve: string } | { name: "RSASSA-PKCS1-v1_5" | "Ed25519" } | undefined {
  if (algorithm.oid === "1.2.840.113549.1.1.1") return { name: "RSASSA-PKCS1-v1_5" };
  if (algorithm.oid === "1.3.101.112") return { name: "Ed25519" };
  const namedCurve = algorithm.namedCurve === undefined ? undefined : csrCurves[algorithm.namedCurve];
  return algorithm.oid === "1.2.840.10045.2.1" && namedCurve ? { name: "ECDSA", namedCurve } : undefined;
}

/**
 * An ECDSA signature as X.509 carries it (DER `SEQUENCE { r INTEGER, s
 * INTEGER }`) in the IEEE P1363 form WebCrypto verifies (r ‖ s, each
 * `scalarLength` bytes); undefined when it is not one.
 */
function ecdsaSignatureP1363(der: Uint8Array, scalarLength: number): Uint8Array<ArrayBuffer> | undefined {
  let integers: DerNode[];
  try {
    integers = sequence(readDer(der, "ECDSA signature"), 2);
  } catch {
    return undefined;
  }
  const out = new Uint8Array(2 * scalarLength);
  for (const [i, integer] of integers.entries()) {
    if (integer.tag !== DerTag.integer) return undefined;
    // Only the one DER encoding of each of r and s: a negative or padded INTEGER read as its magnitude
    // would let another byte string pass as the same signature (Go's ecdsa.VerifyASN1 refuses them too).
    let value: Uint8Array;
    try {
      value = derNonNegativeInteger(integer.content, "ECDSA signature");
    } catch {
      return undefined;
    }
    if (value.length > scalarLength) return undefined;
    out.set(value, (i + 1) * scalarLength - value.length);
  }
  return out;
}

function nodeNameOf(commonName: string): string {
  let name: string;
  let objectName: string;
  try {
    name = nodeNameFromCommonName(commonName);
    objectName = k8sCompliantHostname(name);
  } catch (error) {
    if (error instanceof NodeNameError) throw rejected(error.message);
    throw error;
  }
  // The certificate carries the name as asked, the JoiningNode and the audit the object name: one name for both.
  if (objectName !== name) {
    throw rejected(
      `certificate request must name the node as a Kubernetes object name (${JSON.stringify(objectName)}), ` +
        `not ${JSON.stringify(name)}`,
    );
  }
  return name;
}

/** Applies the kubelet certificate rules to a (signature-checked) CSR; returns its node name and what it may have. */
function checkCertificateRequest(csr: CertificateRequest): { nodeName: string; ipAddresses: Uint8Array[] } {
  const attributes = csr.subjectAttributes;
  const valuesOf = (type: string) => attributes.filter((a) => a.type === type).map((a) => a.value);

  const organizations = valuesOf(OID_ORGANIZATION);
  if (organizations.length !== 1) {
    throw rejected(
      `certificate request must have exactly one organization but has ${describe(organizations)}`,
    );
  }
  if (organizations[0] !== NODES_ORGANIZATION) {
    throw rejected(
      `certificate request must have organization "${NODES_ORGANIZATION}" but has ${
        JSON.stringify(organizations[0])
      }`,
    );
  }
  const commonNames = valuesOf(OID_COMMON_NAME);
  if (commonNames.length !== 1) {
    throw rejected(`certificate request must have exactly one common name but has ${describe(commonNames)}`);
  }
  const nodeName = nodeNameOf(commonNames[0]);
  const other = attributes.find((a) => a.type !== OID_ORGANIZATION && a.type !== OID_COMMON_NAME);
  if (other) {
    throw rejected(
      `certificate request may not contain subject attribute ${oidName(other.type)} (got ${
        JSON.stringify(other.value)
      })`,
    );
  }

  const ipAddresses: Uint8Array[] = [];
  let sawExtensionRequest = false;
  let sawAltNames = false;
  for (const attribute of csr.attributes) {
    if (attribute.type !== OID_EXTENSION_REQUEST) {
      throw rejected(`certificate request may not contain attribute ${oidName(attribute.type)}`);
    }
    if (sawExtensionRequest || attribute.values.length !== 1) {
      throw rejected("certificate request must have at most one extension request with one value");
    }
    sawExtensionRequest = true;
    for (const extension of requestedExtensions(attribute.values[0])) {
      if (extension.id !== OID_SUBJECT_ALT_NAME) {
        throw rejected(`certificate request may not contain extension ${oidName(extension.id)}`);
      }
      if (sawAltNames) throw rejected("certificate request has more than one subjectAltName extension");
      sawAltNames = true;
      ipAddresses.push(...ipAddressesOf(extension.value));
    }
  }
  return { nodeName, ipAddresses };
}

/**
 * The extensions of an extension request's value (`Extensions ::= SEQUENCE
 * OF Extension`): each one's OID and its value's DER.
 */
function requestedExtensions(der: Uint8Array): { id: string; value: Uint8Array }[] {
  try {
    return derNodes(readDer(der, READ_ERROR, DerTag.sequence).content, READ_ERROR).map((extension) => {
      const [id, ...rest] = derNodes(expect(extension, DerTag.sequence).content, READ_ERROR);
      const critical = rest.length === 2 ? expect(rest.shift(), DerTag.boolean) : undefined;
      // A DER BOOLEAN is one byte, 00 or ff.
      const isBoolean = critical === undefined ||
        (critical.content.length === 1 && (critical.content[0] === 0x00 || critical.content[0] === 0xff));
      if (rest.length !== 1 || !isBoolean) throw new DerError(READ_ERROR);
      return { id: oidOf(id), value: expect(rest[0], DerTag.octetString).content };
    });
  } catch (error) {
    if (!(error instanceof DerError)) throw error;
    throw new KubeletCaError("csr-malformed", "certificate request has a malformed extension request");
  }
}

/** GeneralName tags (RFC 5280 §4.2.1.6) other than iPAddress, by what a CSR may not contain. */
const forbiddenNameKinds: Record<number, string> = {
  0: "other names",
  1: "email addresses",
  2: "DNS names",
  3: "X.400 addresses",
  4: "directory names",
  5: "EDI party names",
  6: "URIs",
  8: "registered IDs",
};
const TAG_IP_ADDRESS = 7;
/** GeneralName kinds whose value is an IA5String, shown in errors. */
const textNameTags = new Set([1, 2, 6]);

/** The IP addresses of a subjectAltName extension value; any other kind of name is rejected. */
function ipAddressesOf(der: Uint8Array): Uint8Array[] {
  const malformed = () =>
    new KubeletCaError("csr-malformed", "certificate request has a malformed subjectAltName extension");
  let names: DerNode[];
  try {
    names = derNodes(readDer(der, READ_ERROR, DerTag.sequence).content, READ_ERROR);
  } catch (error) {
    if (error instanceof DerError) throw malformed();
    throw error;
  }
  const ipAddresses: Uint8Array[] = [];
  const forbidden = new Map<number, string[]>();
  for (const name of names) {
    // GeneralName: a context-specific tag [n]; constructed for the structured kinds.
    const number = name.tag & 0x1f;
    const constructed = (name.tag & 0x20) !== 0;
    if ((name.tag & 0xc0) !== 0x80 || !(number in forbiddenNameKinds || number === TAG_IP_ADDRESS)) {
      throw malformed();
    }
    if (number === TAG_IP_ADDRESS) {
      if (constructed) throw malformed();
      if (name.content.length !== 4 && name.content.length !== 16) {
        throw rejected(`certificate request has an IP address of invalid length ${name.content.length}`);
      }
      ipAddresses.push(name.content);
      continue;
    }
    const shown = forbidden.get(number) ?? [];
    if (!constructed && textNameTags.has(number)) shown.push(new TextDecoder("latin1").decode(name.content));
    forbidden.set(number, shown);
  }
  for (const [tag, values] of [...forbidden].sort(([a], [b]) => a - b)) {
    const got = values.length > 0 ? ` (got ${values.map((v) => JSON.stringify(v)).join(", ")})` : "";
    throw rejected(`certificate request may not contain ${forbiddenNameKinds[tag]}${got}`);
  }
  return ipAddresses;
}

/** Refuses loopback, unspecified and reserved addresses. */
function checkAddresses(ipAddresses: readonly Uint8Array[], reserved: readonly ReservedAddress[]): void {
  for (const ip of ipAddresses) {
    if (isLoopbackOrUnspecified(ip)) {
      throw rejected(
        `certificate request may not contain the loopback or unspecified address ${formatIp(ip)}`,
      );
    }
    const match = reserved.find((r) => ipEquals(r.address, ip));
    if (match) throw rejected(`certificate request may not contain ${formatIp(ip)}, ${match.what}`);
  }
}

/** The GeneralNames of a subjectAltName extension holding `ipAddresses`. */
function ipAddressNames(ipAddresses: Uint8Array[]): Uint8Array {
  return derSequence(...ipAddresses.map((ip) => derElement(derContextTag(TAG_IP_ADDRESS, false), ip)));
}

// --- issuing certificates ---

const OID_KEY_USAGE = "2.5.29.15";
const OID_EXTENDED_KEY_USAGE = "2.5.29.37";
const OID_BASIC_CONSTRAINTS = "2.5.29.19";
const OID_AUTHORITY_KEY_IDENTIFIER = "2.5.29.35";
const OID_CLIENT_AUTH = "1.3.6.1.5.5.7.3.2";
/** KeyUsage with only digitalSignature (bit 0): a BIT STRING of one byte, 7 unused bits. */
const DIGITAL_SIGNATURE_ONLY = derElement(0x03, Uint8Array.of(7, 0x80));
/** Random bytes of a serial number: 128 bits, encoded as a positive INTEGER. */
const SERIAL_NUMBER_BYTES = 16;

/** The extensions every kubelet certificate starts with: a client certificate, and not a CA. */
const KUBELET_EXTENSIONS: readonly Uint8Array[] = [
  derExtension(OID_KEY_USAGE, true, DIGITAL_SIGNATURE_ONLY),
  derExtension(OID_EXTENDED_KEY_USAGE, false, derSequence(derOid(OID_CLIENT_AUTH))),
  derExtension(OID_BASIC_CONSTRAINTS, true, derSequence()), // cA FALSE, the default, is left out
];

/** Signature AlgorithmIdentifiers by the CA key's WebCrypto algorithm (RFC 5758 for ECDSA, RFC 4055 for RSA). */
const signatureAlgorithmIdentifiers: Record<string, Uint8Array> = {
  "ECDSA SHA-256": derSequence(derOid("1.2.840.10045.4.3.2")),
  "ECDSA SHA-384": derSequence(derOid("1.2.840.10045.4.3.3")),
  "RSASSA-PKCS1-v1_5": derSequence(derOid("1.2.840.113549.1.1.11"), DER_NULL), // the key is imported with SHA-256
};

/** What certificates issued by the CA `certificate`, signing with `signingAlgorithm`, carry of it. */
function issuerFields(
  certificate: Certificate,
  signingAlgorithm: EcdsaParams | Algorithm,
): IssuerFields {
  const hash = "hash" in signingAlgorithm ? ` ${signingAlgorithm.hash}` : "";
  const signatureAlgorithm = signatureAlgorithmIdentifiers[`${signingAlgorithm.name}${hash}`];
  if (!signatureAlgorithm) {
    throw new Error(`no signature algorithm identifier for ${signingAlgorithm.name}${hash}`);
  }
  const keyId = subjectKeyIdentifier(certificate);
  return {
    name: certificate.subject,
    signatureAlgorithm,
    // AuthorityKeyIdentifier ::= SEQUENCE { keyIdentifier [0] IMPLICIT OCTET STRING }
    authorityKeyIdentifier: keyId
      ? derExtension(
        OID_AUTHORITY_KEY_IDENTIFIER,
        false,
        derSequence(derElement(derContextTag(0, false), keyId)),
      )
      : undefined,
  };
}

// --- the join service's signer ---

/** Options for {@linkcode kubeletSigner}. */
export interface KubeletSignerOptions {
  /** Holds `ca.crt` and `ca.key`. */
  pkiDir: string;
  /** Time source for validity windows. */
  clock: Clock;
  /** The cluster's service network (kube-apiserver's `--service-cluster-ip-range`): its first address is the API server's Service. */
  serviceNetwork: IpNetwork;
  /** Where nodes reach the API server: a certificate may not carry its address. */
  apiServerEndpoint: ApiServerEndpointSource;
}

/**
 * The join service's {@linkcode KubeletSigner}: the CA in
 * `<pki>/ca.{crt,key}`, loaded once for all requests and again when the
 * files change (they are looked at once a second at most), refusing the API
 * server's endpoint address and the service network's first address besides
 * loopback. `checkCa` loads the CA once, for a clear error at start.
 */
export function kubeletSigner(options: KubeletSignerOptions): KubeletSigner & { checkCa(): Promise<void> } {
  const certFile = `${options.pkiDir}/ca.crt`;
  const keyFile = `${options.pkiDir}/ca.key`;
  const ca = new SharedLoad(() => readKubeletCa({ certFile, keyFile }));
  const stamp = new SharedLoad(() => fileStamp([certFile, keyFile]), {
    maxAgeMs: FILE_CHECK_INTERVAL_MS,
    clock: options.clock,
  });
  const loadCa = async (signal?: AbortSignal) => {
    try {
      return await ca.get({ version: await stamp.get({ signal }), signal });
    } catch (error) {
      if (!(error instanceof KubeletCaError)) throw error;
      throw reject("misconfigured", `cluster CA unusable: ${error.message}`);
    }
  };
  const serviceAddress: ReservedAddress = {
    address: firstAddress(options.serviceNetwork),
    what: "the first address of the service network (the API server's Service)",
  };
  return {
    async checkCa() {
      await loadCa();
    },
    async sign(csrDer, { signal }) {
      const [loaded, endpoint] = await Promise.all([
        loadCa(signal),
        options.apiServerEndpoint.current({ signal }),
      ]);
      const endpointAddress = parseIp(endpointHost(endpoint));
      const reservedAddresses = endpointAddress
        ? [serviceAddress, { address: endpointAddress, what: "the API server endpoint's address" }]
        : [serviceAddress];
      try {
        const request = await checkedCertificateRequest(csrDer, reservedAddresses);
        const certificatePem = await issueKubeletCertificate(request, loaded, options.clock.now());
        return { certificatePem, nodeName: request.nodeName };
      } catch (error) {
        const refused = (error instanceof KubeletCaError && error.reason.startsWith("csr-")) ||
          error instanceof NodeNameError;
        if (!refused) throw error; // not the node's fault: an internal error, logged by the service
        throw reject("csr-rejected", `certificate request rejected: ${error.message}`);
      }
    },
  };
}

/** The host of "host:port" or "[v6]:port". */
function endpointHost(endpoint: string): string {
  return endpoint.replace(/:\d+$/, "");
}
