// Hostile kubelet CSRs: the join service reads them from attested but otherwise untrusted nodes, with the
// small DER reader of src/x509/der.ts. A table of named encodings each reader must refuse (or, for a few
// controls, accept), and a fuzz test: thousands of truncated, bit-flipped and length-mutated requests must
// each end in a KubeletCaError (never another exception, a hang, or a certificate).
import assert from "node:assert/strict";
import {
  derBitString,
  derElement,
  derOid,
  derSequence,
  DerTag,
  derUnsignedInteger,
} from "../../src/x509/der.ts";
import { opensslOk } from "../support/openssl.ts";
import {
  type KubeletCa,
  KubeletCaError,
  nodeNameFromCsr,
  parseKubeletCa,
  signKubeletCertificate,
} from "../../src/joinservice/kubeletca.ts";
import { seededRandom } from "../support/seeded_random.ts";

// --- building requests byte by byte ---

const text = new TextEncoder();
const OID_O = "2.5.4.10";
const OID_CN = "2.5.4.3";
const ECDSA_SHA256 = "1.2.840.10045.4.3.2";

const caKey = new TextDecoder().decode(
  await opensslOk(["ecparam", "-name", "prime256v1", "-genkey", "-noout"]),
);
const caCert = new TextDecoder().decode(
  await opensslOk(
    ["req", "-x509", "-new", "-key", "/dev/stdin", "-subj", "/CN=kubernetes", "-days", "2"],
    caKey,
  ),
);
const ca: KubeletCa = await parseKubeletCa(caCert, caKey);

const ecKeys = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, [
  "sign",
  "verify",
]) as CryptoKeyPair;

/** A string of ASN.1 type `tag` holding `bytes` (or the UTF-8 of a text). */
const str = (tag: number, value: string | Uint8Array) =>
  derElement(tag, typeof value === "string" ? text.encode(value) : value);
const UTF8 = 0x0c, PRINTABLE = 0x13, T61 = 0x14, IA5 = 0x16, UNIVERSAL = 0x1c, BMP = 0x1e;

/** A Name of one attribute per RDN. */
function name(...attributes: [Uint8Array, Uint8Array][]): Uint8Array<ArrayBuffer> {
  return derSequence(...attributes.map(([type, value]) => derElement(DerTag.set, derSequence(type, value))));
}
const nodeName = (
  o: Uint8Array = str(UTF8, "system:nodes"),
  cn: Uint8Array = str(UTF8, "system:node:worker-1"),
) => name([derOid(OID_O), o], [derOid(OID_CN), cn]);

const sanRequest = (...names: Uint8Array[]) =>
  derElement(
    0xa0,
    derSequence(
      derOid("1.2.840.113549.1.9.14"),
      derElement(
        DerTag.set,
        derSequence(derSequence(derOid("2.5.29.17"), derElement(DerTag.octetString, derSequence(...names)))),
      ),
    ),
  );
const ipName = (...bytes: number[]) => derElement(0x87, Uint8Array.from(bytes));

interface Parts {
  /** The whole certificationRequestInfo as carried (default: version, subject, key, attributes). */
  info?: Uint8Array<ArrayBuffer>;
  version?: Uint8Array;
  subject?: Uint8Array;
  attributes?: Uint8Array;
  /** The bytes signed, when not the carried info. */
  signed?: Uint8Array<ArrayBuffer>;
  keys?: CryptoKeyPair;
  /** WebCrypto signing parameters; default ECDSA with SHA-256. */
  sign?: AlgorithmIdentifier | EcdsaParams;
  signatureAlgorithm?: Uint8Array;
  /** The BIT STRING's content from the raw WebCrypto signature; default DER SEQUENCE { r, s } for ECDSA. */
  signatureValue?: (raw: Uint8Array) => Uint8Array;
  /** The BIT STRING element; default whole bytes of signatureValue. */
  signature?: (value: Uint8Array) => Uint8Array;
  /** The outer element from its content. */
  outer?: (content: Uint8Array) => Uint8Array;
}

/** ECDSA's DER SEQUENCE { r, s } from WebCrypto's r ‖ s, with the INTEGERs encoded by `integer`. */
function ecdsaDer(
  raw: Uint8Array,
  integer = (magnitude: Uint8Array) => derUnsignedInteger(magnitude),
): Uint8Array {
  const half = raw.length / 2;
  return derSequence(integer(raw.subarray(0, half)), integer(raw.subarray(half)));
}

async function csr(parts: Parts = {}): Promise<Uint8Array<ArrayBuffer>> {
  const keys = parts.keys ?? ecKeys;
  const spki = new Uint8Array(await crypto.subtle.exportKey("spki", keys.publicKey));
  const info = parts.info ?? derSequence(
    parts.version ?? derUnsignedInteger(Uint8Array.of(0)),
    parts.subject ?? nodeName(),
    spki,
    parts.attributes ?? sanRequest(ipName(10, 0, 0, 7)),
  );
  const signing = parts.sign ?? { name: "ECDSA", hash: "SHA-256" };
  const raw = new Uint8Array(await crypto.subtle.sign(signing, keys.privateKey, parts.signed ?? info));
  const value = parts.signatureValue
    ? parts.signatureValue(raw)
    : (signing as Algorithm).name === "ECDSA"
    ? ecdsaDer(raw)
    : raw;
  const content = Uint8Array.of(
    ...info,
    ...(parts.signatureAlgorithm ?? derSequence(derOid(ECDSA_SHA256))),
    ...(parts.signature ? parts.signature(value) : derBitString(value)),
  );
  return new Uint8Array(parts.outer ? parts.outer(content) : derSequence(content));
}

/** What happened to a request: "signed", or the KubeletCaError's reason and message. */
async function outcome(request: Uint8Array): Promise<{ reason: string; message: string }> {
  try {
    await signKubeletCertificate(request, ca);
    return { reason: "signed", message: "" };
  } catch (error) {
    if (!(error instanceof KubeletCaError)) throw error;
    return { reason: error.reason, message: error.message };
  }
}

/** `content` re-encoded with a long-form (non-minimal) length: 0x81 n for n < 128. */
function longFormLength(element: Uint8Array): Uint8Array {
  assert.ok(element[1] < 0x80);
  return Uint8Array.of(element[0], 0x81, element[1], ...element.subarray(2));
}

/** An OID element with the raw content bytes `content`. */
const rawOid = (...content: number[]) => derElement(DerTag.oid, Uint8Array.from(content));

Deno.test("the valid request the hostile ones are made from signs", async () => {
  assert.equal((await outcome(await csr())).reason, "signed");
});

interface HostileCase {
  label: string;
  request: () => Promise<Uint8Array>;
  reason: KubeletCaError["reason"] | "signed";
  message?: RegExp;
}

const MALFORMED = /^certificate request is not a DER-encoded PKCS#10 request$/;
const BAD_SIGNATURE = /^certificate request signature is invalid$/;
const UNSUPPORTED =
  /^certificate request signature cannot be verified \(unsupported key or signature algorithm\)$/;

const hostile: HostileCase[] = [
  // Lengths.
  {
    label: "a long-form length below 128 (the version INTEGER as 02 81 01 00), signed as carried",
    request: () => csr({ version: longFormLength(derUnsignedInteger(Uint8Array.of(0))) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "a length with a leading zero byte (the subject as 30 82 00 nn), signed as carried",
    request: () => {
      const subject = nodeName();
      return csr({ subject: Uint8Array.of(0x30, 0x82, 0x00, subject[1], ...subject.subarray(2)) });
    },
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "a long-form length below 128 in the subject's CN string, signed as carried",
    request: () => csr({ subject: nodeName(undefined, longFormLength(str(UTF8, "system:node:worker-1"))) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "the indefinite length on the outer SEQUENCE (30 80 … 00 00)",
    request: () => csr({ outer: (content) => Uint8Array.of(0x30, 0x80, ...content, 0, 0) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "an outer length past the end",
    request: async () => {
      const request = await csr();
      const out = request.slice();
      out[3] += 1; // 30 82 hi lo: one byte more than there is
      return out;
    },
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "an outer length of 2^32 − 1",
    request: async () => {
      const request = await csr();
      return Uint8Array.of(0x30, 0x84, 0xff, 0xff, 0xff, 0xff, ...request.subarray(4));
    },
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "an outer length in eight bytes (above 2^53)",
    request: async () => {
      const request = await csr();
      return Uint8Array.of(0x30, 0x88, 0x00, 0x20, 0, 0, 0, 0, 0, request.length - 4, ...request.subarray(4));
    },
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "an element whose length runs past its parent (the last attribute into the signature algorithm)",
    request: async () => {
      const spki = new Uint8Array(await crypto.subtle.exportKey("spki", ecKeys.publicKey));
      const inner = [...derUnsignedInteger(Uint8Array.of(0)), ...nodeName(), ...spki, 0xa0, 0x05];
      return await csr({ info: Uint8Array.of(0x30, 0x81, inner.length, ...inner) });
    },
    reason: "csr-malformed",
    message: MALFORMED,
  },
  // Tags.
  {
    label: "a high tag number (bf 20) for the attributes",
    request: () => csr({ attributes: Uint8Array.of(0xbf, 0x20, 0x00) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "the subject as a primitive SEQUENCE (10)",
    request: () => csr({ subject: Uint8Array.of(0x10, ...nodeName().subarray(1)) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "the version as a constructed INTEGER (22)",
    request: () => csr({ version: Uint8Array.of(0x22, 0x01, 0x00) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "the attributes as a primitive [0] (80)",
    request: () => csr({ attributes: Uint8Array.of(0x80, 0x00) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "version 1 (v2)",
    request: () => csr({ version: derUnsignedInteger(Uint8Array.of(1)) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "a byte after the request",
    request: async () => Uint8Array.of(...await csr(), 0),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "an element after the attributes, inside the signed info",
    request: async () => {
      const spki = new Uint8Array(await crypto.subtle.exportKey("spki", ecKeys.publicKey));
      const info = derSequence(
        derUnsignedInteger(Uint8Array.of(0)),
        nodeName(),
        spki,
        sanRequest(ipName(10, 0, 0, 7)),
        Uint8Array.of(0x05, 0x00),
      );
      return await csr({ info });
    },
    reason: "csr-malformed",
    message: MALFORMED,
  },
  // Object identifiers.
  {
    label: "the CN's type with a padded arc (55 04 80 03)",
    request: () =>
      csr({
        subject: name([derOid(OID_O), str(UTF8, "system:nodes")], [
          rawOid(0x55, 0x04, 0x80, 0x03),
          str(UTF8, "system:node:a"),
        ]),
      }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "an attribute type with an arc above 2^53",
    request: () =>
      csr({
        subject: name([derOid(OID_O), str(UTF8, "system:nodes")], [
          rawOid(0x55, 0x04, 0x90, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x03),
          str(UTF8, "system:node:a"),
        ]),
      }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "a truncated OID (its last byte continues)",
    request: () =>
      csr({
        subject: name([derOid(OID_O), str(UTF8, "system:nodes")], [
          rawOid(0x55, 0x04, 0x83),
          str(UTF8, "system:node:a"),
        ]),
      }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "an empty OID as the signature algorithm",
    request: () => csr({ signatureAlgorithm: derSequence(rawOid()) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  // Subject strings: what is checked must be what the API server (Go's crypto/x509) reads from the copy.
  {
    label: "control: organization and common name as PrintableString",
    request: () =>
      csr({ subject: nodeName(str(PRINTABLE, "system:nodes"), str(PRINTABLE, "system:node:worker-1")) }),
    reason: "signed",
  },
  {
    label: "control: organization as TeletexString (Go reads its bytes as the string)",
    request: () => csr({ subject: nodeName(str(T61, "system:nodes")) }),
    reason: "signed",
  },
  {
    label: "control: organization as IA5String",
    request: () => csr({ subject: nodeName(str(IA5, "system:nodes")) }),
    reason: "signed",
  },
  {
    label:
      "a UTF8String organization with a byte-order mark (Go keeps it: the group would not be system:nodes)",
    request: () =>
      csr({ subject: nodeName(str(UTF8, Uint8Array.of(0xef, 0xbb, 0xbf, ...text.encode("system:nodes")))) }),
    reason: "csr-rejected",
    message: /^certificate request must have organization "system:nodes" but has "\ufeffsystem:nodes"$/,
  },
  {
    label: "a BMPString organization with a byte-order mark",
    request: () =>
      csr({
        subject: nodeName(
          str(BMP, Uint8Array.of(0xfe, 0xff, ...[..."system:nodes"].flatMap((c) => [0, c.charCodeAt(0)]))),
        ),
      }),
    reason: "csr-rejected",
    message: /^certificate request must have organization "system:nodes" but has "\ufeffsystem:nodes"$/,
  },
  {
    label: "a UTF8String common name that is not UTF-8",
    request: () =>
      csr({
        subject: nodeName(undefined, str(UTF8, Uint8Array.of(...text.encode("system:node:worker-1"), 0xff))),
      }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "a TeletexString common name that is not UTF-8 (Go would read other characters than latin1)",
    request: () =>
      csr({ subject: nodeName(undefined, str(T61, Uint8Array.of(...text.encode("system:node:w"), 0xe9))) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "a PrintableString common name with a character outside PrintableString ('_')",
    request: () => csr({ subject: nodeName(undefined, str(PRINTABLE, "system:node:worker_1")) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "an IA5String common name with a byte above 0x7f",
    request: () =>
      csr({ subject: nodeName(undefined, str(IA5, Uint8Array.of(...text.encode("system:node:w"), 0xe9))) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "a BMPString of odd length",
    request: () => csr({ subject: nodeName(str(BMP, Uint8Array.of(0, 0x73, 0))) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "a UniversalString organization (Go cannot read the certificate)",
    request: () =>
      csr({
        subject: nodeName(
          str(UNIVERSAL, Uint8Array.from([..."system:nodes"].flatMap((c) => [0, 0, 0, c.charCodeAt(0)]))),
        ),
      }),
    reason: "csr-rejected",
    message: /^certificate request must have organization "system:nodes" but has "<not a string>"$/,
  },
  // Signatures.
  {
    label:
      "a signature over another encoding of the same subject (signed PrintableString, carried UTF8String)",
    request: async () => {
      const spki = new Uint8Array(await crypto.subtle.exportKey("spki", ecKeys.publicKey));
      const info = (o: Uint8Array) =>
        derSequence(derUnsignedInteger(Uint8Array.of(0)), nodeName(o), spki, sanRequest(ipName(10, 0, 0, 7)));
      return await csr({
        info: info(str(UTF8, "system:nodes")),
        signed: info(str(PRINTABLE, "system:nodes")),
      });
    },
    reason: "csr-signature-invalid",
    message: BAD_SIGNATURE,
  },
  {
    label: "a signature by another key",
    request: async () => {
      const other = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign"]);
      const request = await csr({ keys: { ...(other as CryptoKeyPair), publicKey: ecKeys.publicKey } });
      return request;
    },
    reason: "csr-signature-invalid",
    message: BAD_SIGNATURE,
  },
  {
    label: "ECDSA r with a superfluous leading zero",
    request: () =>
      csr({
        signatureValue: (raw) =>
          ecdsaDer(raw, (m) =>
            derElement(DerTag.integer, Uint8Array.of(0, ...derUnsignedInteger(m).subarray(2)))),
      }),
    reason: "csr-signature-invalid",
    message: BAD_SIGNATURE,
  },
  {
    label: "ECDSA r and s as negative INTEGERs (their magnitudes without the sign byte)",
    request: async () => {
      // A signature whose r and s have their high bit set, written without the 00 sign byte.
      for (let attempt = 0; attempt < 64; attempt++) {
        const spki = new Uint8Array(await crypto.subtle.exportKey("spki", ecKeys.publicKey));
        const info = derSequence(
          derUnsignedInteger(Uint8Array.of(0)),
          nodeName(),
          spki,
          derElement(
            0xa0,
            derSequence(derOid("1.2.840.113549.1.9.7"), derElement(DerTag.set, str(UTF8, `${attempt}`))),
          ),
        );
        const raw = new Uint8Array(
          await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, ecKeys.privateKey, info),
        );
        if (raw[0] & 0x80 && raw[32] & 0x80) {
          return await csr({
            info,
            signatureValue: (r) => ecdsaDer(r, (m) => derElement(DerTag.integer, m)),
          });
        }
      }
      throw new Error("no signature with both high bits set in 64 attempts");
    },
    reason: "csr-signature-invalid",
    message: BAD_SIGNATURE,
  },
  {
    label: "ECDSA r as an empty INTEGER",
    request: () =>
      csr({
        signatureValue: (raw) =>
          derSequence(derElement(DerTag.integer), derUnsignedInteger(raw.subarray(32))),
      }),
    reason: "csr-signature-invalid",
    message: BAD_SIGNATURE,
  },
  {
    label: "ECDSA r longer than the curve's scalars",
    request: () =>
      csr({
        signatureValue: (raw) =>
          derSequence(
            derUnsignedInteger(Uint8Array.of(1, ...raw.subarray(0, 32))),
            derUnsignedInteger(raw.subarray(32)),
          ),
      }),
    reason: "csr-signature-invalid",
    message: BAD_SIGNATURE,
  },
  {
    label: "an ECDSA signature with a third INTEGER",
    request: () =>
      csr({
        signatureValue: (raw) =>
          derSequence(
            derUnsignedInteger(raw.subarray(0, 32)),
            derUnsignedInteger(raw.subarray(32)),
            derUnsignedInteger(Uint8Array.of(1)),
          ),
      }),
    reason: "csr-signature-invalid",
    message: BAD_SIGNATURE,
  },
  {
    label: "an ECDSA signature with a byte after its SEQUENCE",
    request: () => csr({ signatureValue: (raw) => Uint8Array.of(...ecdsaDer(raw), 0) }),
    reason: "csr-signature-invalid",
    message: BAD_SIGNATURE,
  },
  {
    label: "the signature as P1363 (r ‖ s) instead of DER",
    request: () => csr({ signatureValue: (raw) => raw }),
    reason: "csr-signature-invalid",
    message: BAD_SIGNATURE,
  },
  {
    label: "a signature BIT STRING with unused bits",
    request: () => csr({ signature: (value) => derElement(DerTag.bitString, Uint8Array.of(1), value) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "an empty signature BIT STRING",
    request: () => csr({ signature: () => derElement(DerTag.bitString) }),
    reason: "csr-malformed",
    message: MALFORMED,
  },
  {
    label: "the signature algorithm with parameters other than NULL",
    request: () =>
      csr({
        signatureAlgorithm: derSequence(
          derOid(ECDSA_SHA256),
          derElement(DerTag.octetString, Uint8Array.of(1, 2, 3)),
        ),
      }),
    reason: "csr-signature-invalid",
    message: UNSUPPORTED,
  },
  {
    label: "control: the ECDSA signature algorithm with NULL parameters (as some encoders write)",
    request: () => csr({ signatureAlgorithm: derSequence(derOid(ECDSA_SHA256), derElement(DerTag.null)) }),
    reason: "signed",
  },
  {
    label: "Ed25519 with NULL parameters (RFC 8410: absent)",
    request: async () => {
      const keys = await ed25519Keys();
      return await csr({
        keys,
        sign: { name: "Ed25519" },
        signatureAlgorithm: derSequence(derOid("1.3.101.112"), derElement(DerTag.null)),
      });
    },
    reason: "csr-signature-invalid",
    message: UNSUPPORTED,
  },
  {
    label: "control: Ed25519 without parameters",
    request: async () => {
      const keys = await ed25519Keys();
      return await csr({
        keys,
        sign: { name: "Ed25519" },
        signatureAlgorithm: derSequence(derOid("1.3.101.112")),
      });
    },
    reason: "signed",
  },
  {
    label: "an RSA signature algorithm for an EC key",
    request: () =>
      csr({ signatureAlgorithm: derSequence(derOid("1.2.840.113549.1.1.11"), derElement(DerTag.null)) }),
    reason: "csr-signature-invalid",
    message: UNSUPPORTED,
  },
  {
    label: "ECDSA with SHA-1",
    request: () =>
      csr({
        sign: { name: "ECDSA", hash: "SHA-1" },
        signatureAlgorithm: derSequence(derOid("1.2.840.10045.4.1")),
      }),
    reason: "csr-signature-invalid",
    message: UNSUPPORTED,
  },
  {
    label: "a 1024-bit RSA key",
    request: async () => {
      const keys = await crypto.subtle.generateKey(
        {
          name: "RSASSA-PKCS1-v1_5",
          modulusLength: 1024,
          publicExponent: Uint8Array.of(1, 0, 1),
          hash: "SHA-256",
        },
        true,
        ["sign", "verify"],
      ) as CryptoKeyPair;
      return await csr({
        keys,
        sign: { name: "RSASSA-PKCS1-v1_5" },
        signatureAlgorithm: derSequence(derOid("1.2.840.113549.1.1.11"), derElement(DerTag.null)),
      });
    },
    reason: "csr-rejected",
    message: /^certificate request key is RSA with 1024 bits; a kubelet key needs at least 2048$/,
  },
  // Extensions.
  {
    label: "a critical flag that is no DER BOOLEAN (01 01 01)",
    request: () =>
      csr({
        attributes: derElement(
          0xa0,
          derSequence(
            derOid("1.2.840.113549.1.9.14"),
            derElement(
              DerTag.set,
              derSequence(
                derSequence(
                  derOid("2.5.29.17"),
                  Uint8Array.of(0x01, 0x01, 0x01),
                  derElement(DerTag.octetString, derSequence(ipName(10, 0, 0, 7))),
                ),
              ),
            ),
          ),
        ),
      }),
    reason: "csr-malformed",
    message: /^certificate request has a malformed extension request$/,
  },
  {
    label: "an IP address name with a long-form length",
    request: () => csr({ attributes: sanRequest(Uint8Array.of(0x87, 0x81, 0x04, 10, 0, 0, 7)) }),
    reason: "csr-malformed",
  },
  {
    label: "an IP address name of 8 bytes (an address and mask, as in name constraints)",
    request: () => csr({ attributes: sanRequest(ipName(10, 0, 0, 7, 255, 255, 255, 0)) }),
    reason: "csr-rejected",
    message: /^certificate request has an IP address of invalid length 8$/,
  },
  {
    label: "an IP address name of 5 bytes",
    request: () => csr({ attributes: sanRequest(ipName(10, 0, 0, 7, 0)) }),
    reason: "csr-rejected",
    message: /^certificate request has an IP address of invalid length 5$/,
  },
  {
    label: "an IP address name with the constructed bit ([7] constructed around 4 bytes)",
    request: () => csr({ attributes: sanRequest(derElement(0xa7, Uint8Array.of(10, 0, 0, 7))) }),
    reason: "csr-malformed",
    message: /^certificate request has a malformed subjectAltName extension$/,
  },
  {
    label: "a name of application class 7, not the context-specific [7] of an IP address",
    request: () => csr({ attributes: sanRequest(derElement(0x47, Uint8Array.of(10, 0, 0, 7))) }),
    reason: "csr-malformed",
    message: /^certificate request has a malformed subjectAltName extension$/,
  },
  {
    label: "a name of private class 7",
    request: () => csr({ attributes: sanRequest(derElement(0xc7, Uint8Array.of(10, 0, 0, 7))) }),
    reason: "csr-malformed",
    message: /^certificate request has a malformed subjectAltName extension$/,
  },
  {
    label: "two extension requests, each with one subjectAltName",
    request: () => {
      const request = sanRequest(ipName(10, 0, 0, 7));
      const second = sanRequest(ipName(10, 0, 0, 8));
      // Both attributes in one [0] set: its content is the two Attribute SEQUENCEs.
      return csr({
        attributes: derElement(0xa0, Uint8Array.of(...request.subarray(2), ...second.subarray(2))),
      });
    },
    reason: "csr-rejected",
    message: /^certificate request must have at most one extension request with one value$/,
  },
];

Deno.test("hostile CSRs end as the named rejection, never as a certificate or another error", async (t) => {
  for (const testCase of hostile) {
    await t.step(testCase.label, async () => {
      const request = await testCase.request();
      const { reason, message } = await outcome(request);
      assert.equal(reason, testCase.reason, message);
      if (testCase.message) assert.match(message, testCase.message);
      // The node name reader (no signature check) refuses or reads the same request without another error.
      try {
        nodeNameFromCsr(request);
      } catch (error) {
        if (!(error instanceof KubeletCaError)) throw error;
      }
    });
  }
});

// --- fuzzing ---

/** The offsets of every DER header's length byte in `bytes` (walking the elements a reader would). */
function lengthOffsets(bytes: Uint8Array): number[] {
  const offsets: number[] = [];
  const walk = (start: number, end: number) => {
    for (let at = start; at + 1 < end;) {
      const tag = bytes[at];
      const first = bytes[at + 1];
      const count = first < 0x80 ? 0 : first & 0x7f;
      let length = first < 0x80 ? first : 0;
      for (let i = 0; i < count; i++) length = length * 256 + bytes[at + 2 + i];
      const contentStart = at + 2 + count;
      // Bytes that only look like DER (inside a raw signature) end the walk of their parent.
      if (count > 4 || !(contentStart + length <= end)) return;
      offsets.push(at + 1);
      // Constructed elements and the BIT/OCTET STRINGs that wrap DER (signature, extensions) hold more.
      if (tag & 0x20) walk(contentStart, contentStart + length);
      else if (tag === 0x04) walk(contentStart, contentStart + length);
      else if (tag === 0x03) walk(contentStart + 1, contentStart + length);
      at = contentStart + length;
    }
  };
  walk(0, bytes.length);
  return offsets;
}

function mutants(valid: Uint8Array, seed: number, count: number): [string, Uint8Array][] {
  const next = seededRandom(seed);
  const out: [string, Uint8Array][] = [];
  // Every truncation.
  for (let length = 0; length < valid.length; length++) {
    out.push([`truncated to ${length}`, valid.slice(0, length)]);
  }
  // Every length byte set to each interesting value.
  const interesting = [0x00, 0x01, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x88, 0xff];
  for (const offset of lengthOffsets(valid)) {
    for (const value of [...interesting, valid[offset] - 1, valid[offset] + 1]) {
      if (value === valid[offset] || value < 0 || value > 0xff) continue;
      const bytes = valid.slice();
      bytes[offset] = value;
      out.push([`length byte at ${offset} set to ${value.toString(16)}`, bytes]);
    }
  }
  // Random single and multiple bit flips, byte replacements, insertions and deletions.
  while (out.length < count) {
    const bytes = valid.slice();
    const kind = next(5);
    if (kind === 0) {
      const at = next(bytes.length);
      const bit = next(8);
      bytes[at] ^= 1 << bit;
      out.push([`bit ${bit} of byte ${at} flipped`, bytes]);
    } else if (kind === 1) {
      const flips = 2 + next(8);
      for (let i = 0; i < flips; i++) bytes[next(bytes.length)] ^= 1 << next(8);
      out.push([`${flips} random bit flips`, bytes]);
    } else if (kind === 2) {
      const at = next(bytes.length);
      bytes[at] = next(256);
      out.push([`byte ${at} set to ${bytes[at].toString(16)}`, bytes]);
    } else if (kind === 3) {
      const at = next(bytes.length + 1);
      out.push([
        `byte inserted at ${at}`,
        Uint8Array.of(...bytes.subarray(0, at), next(256), ...bytes.subarray(at)),
      ]);
    } else {
      const at = next(bytes.length);
      out.push([`byte ${at} deleted`, Uint8Array.of(...bytes.subarray(0, at), ...bytes.subarray(at + 1))]);
    }
  }
  return out;
}

Deno.test("fuzz: truncated, bit-flipped and length-mutated CSRs end only in a KubeletCaError", async () => {
  const seed = 0x6b75_6265;
  const sources: [string, Uint8Array][] = [
    [
      "ECDSA P-256 request",
      await csr({ attributes: sanRequest(ipName(10, 0, 0, 7), ipName(...new Array(16).fill(0xfd))) }),
    ],
    [
      "Ed25519 request",
      await csr({
        keys: await ed25519Keys(),
        sign: { name: "Ed25519" },
        signatureAlgorithm: derSequence(derOid("1.3.101.112")),
      }),
    ],
  ];
  const reasons = new Map<string, number>();
  const started = performance.now();
  for (const [source, valid] of sources) {
    assert.equal((await outcome(valid)).reason, "signed", source);
    for (const [mutation, bytes] of mutants(valid, seed, 2500)) {
      const context = `${source}, seed ${seed}: ${mutation}`;
      if (bytes.length === valid.length && bytes.every((byte, i) => byte === valid[i])) continue;
      const { reason } = await outcome(bytes).catch((error) => {
        throw new Error(`${context}: not a KubeletCaError: ${error}`);
      });
      // Every byte of a request is either signed, part of the signature, or structure: no change of
      // one may leave a request that still signs.
      assert.notEqual(reason, "signed", `${context}: a mutated request was signed`);
      reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
      try {
        nodeNameFromCsr(bytes);
      } catch (error) {
        if (!(error instanceof KubeletCaError)) throw new Error(`${context}: nodeNameFromCsr: ${error}`);
      }
    }
  }
  // Each run takes well under a second per thousand requests; a reader that loops would not end at all.
  assert.ok(performance.now() - started < 60_000, "fuzzing took more than a minute");
  assert.ok((reasons.get("csr-malformed") ?? 0) > 1000, JSON.stringify([...reasons]));
  assert.ok((reasons.get("csr-signature-invalid") ?? 0) > 100, JSON.stringify([...reasons]));
});

Deno.test("fuzz: random bytes and random DER-looking headers end only in a KubeletCaError", async () => {
  const seed = 0xde4;
  const next = seededRandom(seed);
  for (let i = 0; i < 3000; i++) {
    const length = next(64);
    const bytes = Uint8Array.from({ length }, () => next(256));
    if (i % 2 === 0 && length > 2) {
      bytes[0] = 0x30; // a SEQUENCE whose length byte is random: exercises the header paths
      bytes[1] = [0x80, 0x81, 0x82, 0x84, 0x85, 0xff, length - 2][next(7)];
    }
    const { reason } = await outcome(bytes).catch((error) => {
      throw new Error(`seed ${seed}, case ${i} (${bytes.toHex()}): not a KubeletCaError: ${error}`);
    });
    assert.notEqual(reason, "signed");
  }
});

function ed25519Keys(): Promise<CryptoKeyPair> {
  return crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"]) as Promise<CryptoKeyPair>;
}
