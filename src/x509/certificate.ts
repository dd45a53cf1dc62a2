/**
 * An X.509 certificate (RFC 5280 §4.1) read with the small DER reader: its
 * structure checked and the parts the services use taken out as DER. The
 * services read certificates at start (the cluster CA, a kubeconfig's CA),
 * where the schema library and @peculiar/x509 cost more than the rest of
 * their start; the signature is not checked (the callers check the key
 * against it or trust the file).
 *
 * @module
 */
import { DerError, type DerNode, derNodes, derOidString, DerTag, readDer } from "./der.ts";

/** What a certificate holds that the services use. */
export interface Certificate {
  /** The whole certificate, DER. */
  der: Uint8Array<ArrayBuffer>;
  /** The subject Name, DER. */
  subject: Uint8Array<ArrayBuffer>;
  /** The SubjectPublicKeyInfo, DER. */
  subjectPublicKeyInfo: Uint8Array<ArrayBuffer>;
  /** The extensions by OID: whether critical, and the DER inside the extnValue OCTET STRING. */
  extensions: ReadonlyMap<string, { critical: boolean; value: Uint8Array<ArrayBuffer> }>;
}

const OID_SUBJECT_KEY_IDENTIFIER = "2.5.29.14";
/** The context tags of TBSCertificate's optional fields: version [0], extensions [3]. */
const VERSION = 0xa0;
const EXTENSIONS = 0xa3;

/**
 * Reads a DER certificate: `Certificate ::= SEQUENCE { tbsCertificate,
 * signatureAlgorithm, signatureValue BIT STRING }`, with a TBSCertificate of
 * version, serial, signature, issuer, validity (two times), subject,
 * subjectPublicKeyInfo, the optional unique IDs and extensions, nothing
 * else and no trailing bytes. Throws {@linkcode DerError} ("malformed
 * certificate").
 */
export function readCertificate(der: BufferSource): Certificate {
  // A copy of its own: the caller may reuse or clear its buffer.
  const bytes =
    (ArrayBuffer.isView(der)
      ? new Uint8Array(der.buffer, der.byteOffset, der.byteLength)
      : new Uint8Array(der)).slice();
  const [tbs, signatureAlgorithm, signature] = elements(readDer(bytes, WHAT, DerTag.sequence), 3);
  expect(tbs, DerTag.sequence);
  expect(signatureAlgorithm, DerTag.sequence);
  expect(signature, DerTag.bitString);
  const fields = derNodes(tbs.content, WHAT);
  const version = fields[0]?.tag === VERSION ? fields.shift() : undefined;
  if (version) expect(readDer(version.content, WHAT), DerTag.integer);
  const [serial, algorithm, issuer, validity, subject, publicKey, ...optional] = fields;
  expect(serial, DerTag.integer);
  expect(algorithm, DerTag.sequence);
  expect(issuer, DerTag.sequence);
  for (const time of elements(expect(validity, DerTag.sequence), 2)) {
    if (time.tag !== DerTag.utcTime && time.tag !== DerTag.generalizedTime) throw new DerError(WHAT);
  }
  expect(subject, DerTag.sequence);
  const [keyAlgorithm, key] = elements(expect(publicKey, DerTag.sequence), 2);
  expect(keyAlgorithm, DerTag.sequence);
  expect(key, DerTag.bitString);
  // issuerUniqueID [1] and subjectUniqueID [2] (IMPLICIT BIT STRING), then extensions [3], in that order.
  const tags = optional.map((node) => node.tag);
  if (tags.some((tag, i) => ![0x81, 0x82, EXTENSIONS].includes(tag) || (i > 0 && tag <= tags[i - 1]))) {
    throw new DerError(WHAT);
  }
  const extensionsField = optional.find((node) => node.tag === EXTENSIONS);
  return {
    der: bytes,
    subject: subject.encoded,
    subjectPublicKeyInfo: publicKey.encoded,
    extensions: extensionsField ? readExtensions(extensionsField) : new Map(),
  };
}

/** The keyIdentifier of a certificate's subjectKeyIdentifier extension, when it has one. */
export function subjectKeyIdentifier(certificate: Certificate): Uint8Array | undefined {
  const extension = certificate.extensions.get(OID_SUBJECT_KEY_IDENTIFIER);
  return extension && expect(readDer(extension.value, WHAT), DerTag.octetString).content;
}

const WHAT = "certificate";

/**
 * `Extensions ::= SEQUENCE OF Extension`, `Extension ::= SEQUENCE { extnID,
 * critical BOOLEAN DEFAULT FALSE, extnValue OCTET STRING }`.
 */
function readExtensions(
  field: DerNode<ArrayBuffer>,
): Map<string, { critical: boolean; value: Uint8Array<ArrayBuffer> }> {
  const extensions = new Map<string, { critical: boolean; value: Uint8Array<ArrayBuffer> }>();
  for (const extension of derNodes(expect(readDer(field.content, WHAT), DerTag.sequence).content, WHAT)) {
    const parts = derNodes(expect(extension, DerTag.sequence).content, WHAT);
    const critical = parts.length === 3 ? expect(parts[1], DerTag.boolean).content[0] !== 0 : false;
    if (parts.length !== 2 && parts.length !== 3) throw new DerError(WHAT);
    const oid = derOidString(expect(parts[0], DerTag.oid).content, WHAT);
    // RFC 5280: a certificate must not include more than one instance of an extension.
    if (extensions.has(oid)) throw new DerError(WHAT);
    extensions.set(oid, {
      critical,
      value: expect(parts.at(-1), DerTag.octetString).content,
    });
  }
  return extensions;
}

/** The elements of SEQUENCE `node`, which must be exactly `count`. */
function elements<T extends ArrayBufferLike>(node: DerNode<T>, count: number): DerNode<T>[] {
  const nodes = derNodes(node.content, WHAT);
  if (nodes.length !== count) throw new DerError(WHAT);
  return nodes;
}

/** `node`, when it has tag `tag`; throws {@linkcode DerError} otherwise. */
function expect<T extends ArrayBufferLike>(node: DerNode<T> | undefined, tag: number): DerNode<T> {
  if (node?.tag !== tag) throw new DerError(WHAT);
  return node;
}
