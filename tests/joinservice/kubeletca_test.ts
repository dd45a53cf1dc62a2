import assert from "node:assert/strict";
import { AsnConvert } from "@peculiar/asn1-schema";
import { Certificate } from "@peculiar/asn1-x509";
import { derBitString, derElement, derOid, derSequence, derUnsignedInteger } from "../../src/x509/der.ts";
import { encodePem } from "../../src/x509/pem.ts";
import * as x509 from "../../src/x509/x509.ts";
import { FILE_CHECK_INTERVAL_MS } from "../../src/fs/file_stamp.ts";
import { ManualClock } from "../support/manual_clock.ts";
import { opensslOk, opensslVerify } from "../support/openssl.ts";
import {
  KUBELET_CERT_VALIDITY_MS,
  type KubeletCa,
  KubeletCaError,
  kubeletSigner,
  nodeNameFromCsr,
  parseKubeletCa,
  readKubeletCa,
  signKubeletCertificate,
} from "../../src/joinservice/kubeletca.ts";
import { parseCidr, parseIp } from "../../src/net/ip.ts";
import { Rejection } from "../../src/rpc/rejection.ts";

// --- helpers ---

/** Runs openssl, which must succeed; returns its standard output as text. */
async function openssl(args: string[], stdin?: string | Uint8Array): Promise<string> {
  return new TextDecoder().decode(await opensslOk(args, stdin));
}

async function withTempDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "kubeletca-test-" });
  try {
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

interface CaFixture {
  label: string;
  cert: string;
  key: string;
  /** Signature algorithm OID the CA's certificates must carry. */
  signatureOid: string;
}

/** A self-signed CA certificate (with a subject key identifier, as openssl adds) for a key PEM. */
function selfSigned(keyPem: string): Promise<string> {
  return openssl(
    ["req", "-x509", "-new", "-key", "/dev/stdin", "-subj", "/CN=kubernetes", "-days", "2"],
    keyPem,
  );
}

const ecSec1 = await openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout"]);
const ecCert = await selfSigned(ecSec1);
const rsaPkcs1 = await openssl(["genrsa", "-traditional", "2048"]);
const rsaCert = await selfSigned(rsaPkcs1);
const p384Sec1 = await openssl(["ecparam", "-name", "secp384r1", "-genkey", "-noout"]);
const ECDSA_SHA256 = "1.2.840.10045.4.3.2";
const caFixtures: CaFixture[] = [
  { label: "EC P-256 SEC1", cert: ecCert, key: ecSec1, signatureOid: ECDSA_SHA256 },
  {
    label: "EC P-256 PKCS#8",
    cert: ecCert,
    key: await openssl(["pkey"], ecSec1),
    signatureOid: ECDSA_SHA256,
  },
  { label: "RSA PKCS#1", cert: rsaCert, key: rsaPkcs1, signatureOid: "1.2.840.113549.1.1.11" },
  {
    label: "RSA PKCS#8",
    cert: rsaCert,
    key: await openssl(["pkey"], rsaPkcs1),
    signatureOid: "1.2.840.113549.1.1.11",
  },
  {
    label: "EC P-384 SEC1",
    cert: await selfSigned(p384Sec1),
    key: p384Sec1,
    signatureOid: "1.2.840.10045.4.3.3",
  },
];
const ecCa = await parseKubeletCa(ecCert, ecSec1);

/** A node CSR made by openssl: O=system:nodes, CN=system:node:worker-1, IP SANs. */
async function opensslNodeCsr(): Promise<Uint8Array<ArrayBuffer>> {
  const key = await openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout"]);
  const subject = "/O=system:nodes/CN=system:node:worker-1";
  const altNames = "subjectAltName=IP:10.0.0.1,IP:fd00::1";
  return await opensslOk(
    ["req", "-new", "-key", "/dev/stdin", "-subj", subject, "-addext", altNames, "-outform", "DER"],
    key,
  );
}

const nodeKeys = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, false, [
  "sign",
  "verify",
]) as CryptoKeyPair;

interface CsrOptions {
  name?: x509.JsonName;
  altNames?: x509.JsonGeneralName[];
  extensions?: x509.Extension[];
  attributes?: x509.Attribute[];
}

/** A CSR made with @peculiar/x509, by default a valid node CSR with one IPv4 SAN. */
async function makeCsr(options: CsrOptions = {}): Promise<Uint8Array<ArrayBuffer>> {
  const extensions = options.extensions ?? [
    new x509.SubjectAlternativeNameExtension(options.altNames ?? [{ type: "ip", value: "10.0.0.7" }]),
  ];
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: options.name ?? [{ O: ["system:nodes"] }, { CN: ["system:node:worker-1"] }],
    keys: nodeKeys,
    signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
    extensions,
    attributes: options.attributes,
  });
  return new Uint8Array(csr.rawData);
}

const fixedClock = new ManualClock(Date.UTC(2024, 4, 1, 12, 0, 0));

async function signOk(
  csr: Uint8Array,
  ca: KubeletCa = ecCa,
  clock = fixedClock,
): Promise<x509.X509Certificate> {
  return new x509.X509Certificate(await signKubeletCertificate(csr, ca, { clock }));
}

async function assertCaError(
  promise: Promise<unknown>,
  reason: KubeletCaError["reason"],
  message: string | RegExp,
): Promise<KubeletCaError> {
  let caught: unknown;
  try {
    await promise;
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof KubeletCaError, `expected a KubeletCaError, got ${caught}`);
  assert.equal(caught.reason, reason, caught.message);
  if (typeof message === "string") assert.equal(caught.message, message);
  else assert.match(caught.message, message);
  return caught;
}

/** Base64 body lines of a PEM text (key material that must not leak into errors). */
function pemBodyLines(pem: string): string[] {
  return pem.split("\n").filter((line) => line.length >= 16 && !line.startsWith("-----"));
}

// --- loading the CA and signing ---

Deno.test("signs a node CSR with EC and RSA CAs in every key format; openssl takes it as a client certificate only", async () => {
  const csr = await opensslNodeCsr();
  for (const fixture of caFixtures) {
    const ca = await parseKubeletCa(fixture.cert, fixture.key);
    const pem = await signKubeletCertificate(csr, ca);
    assert.match(pem, /^-----BEGIN CERTIFICATE-----\n[\s\S]+\n-----END CERTIFICATE-----\n$/, fixture.label);
    const certificate = new x509.X509Certificate(pem);
    const signatureOid = AsnConvert.parse(certificate.rawData, Certificate).signatureAlgorithm.algorithm;
    assert.equal(signatureOid, fixture.signatureOid, fixture.label);
    const asClient = await opensslVerify(fixture.cert, pem, "sslclient");
    assert.equal(asClient.code, 0, `${fixture.label}: ${asClient.output}`);
    const asServer = await opensslVerify(fixture.cert, pem, "sslserver");
    assert.match(
      asServer.output,
      /unsuitable certificate purpose/,
      `${fixture.label}: never a server certificate`,
    );
  }
});

Deno.test("the kubelet certificate has exactly the kubelet fields", async () => {
  const csr = await opensslNodeCsr();
  const certificate = await signOk(csr);
  const request = new x509.Pkcs10CertificateRequest(csr);

  assert.equal(certificate.subject, "O=system:nodes, CN=system:node:worker-1");
  assert.deepEqual(
    new Uint8Array(certificate.subjectName.toArrayBuffer()),
    new Uint8Array(request.subjectName.toArrayBuffer()),
  );
  assert.deepEqual(
    new Uint8Array(certificate.issuerName.toArrayBuffer()),
    ecCa.certificate.subject,
  );
  assert.deepEqual(new Uint8Array(certificate.publicKey.rawData), new Uint8Array(request.publicKey.rawData));
  assert.equal(certificate.notBefore.getTime(), fixedClock.now() - 2 * 3600 * 1000);
  assert.equal(certificate.notAfter.getTime(), fixedClock.now() + 8760 * 3600 * 1000);
  assert.equal(KUBELET_CERT_VALIDITY_MS, 8760 * 3600 * 1000);

  assert.deepEqual(Array.from(certificate.extensions, (e) => e.type), [
    "2.5.29.15", // keyUsage
    "2.5.29.37", // extKeyUsage
    "2.5.29.19", // basicConstraints
    "2.5.29.35", // authorityKeyIdentifier
    "2.5.29.17", // subjectAltName
  ]);
  const keyUsage = certificate.getExtension(x509.KeyUsagesExtension)!;
  assert.equal(keyUsage.critical, true);
  assert.equal(keyUsage.usages, x509.KeyUsageFlags.digitalSignature);
  const extKeyUsage = certificate.getExtension(x509.ExtendedKeyUsageExtension)!;
  assert.deepEqual(Array.from(extKeyUsage.usages), ["1.3.6.1.5.5.7.3.2"]); // clientAuth only
  const basicConstraints = certificate.getExtension(x509.BasicConstraintsExtension)!;
  assert.equal(basicConstraints.critical, true);
  assert.equal(basicConstraints.ca, false);
  assert.equal(basicConstraints.pathLength, undefined);
  const caKeyId =
    new x509.X509Certificate(ecCa.certificate.der).getExtension(x509.SubjectKeyIdentifierExtension)!
      .keyId;
  assert.equal(certificate.getExtension(x509.AuthorityKeyIdentifierExtension)!.keyId, caKeyId);
  const altNames = certificate.getExtension(x509.SubjectAlternativeNameExtension)!;
  assert.equal(altNames.critical, false);
  assert.deepEqual(altNames.names.toJSON(), [{ type: "ip", value: "10.0.0.1" }, {
    type: "ip",
    value: "fd00::1",
  }]);

  // Serial: positive, at most 128 bits of randomness, different per certificate.
  const serial = Uint8Array.fromHex(certificate.serialNumber.padStart(2, "0"));
  assert.ok(serial.length <= 17 && serial.length >= 1);
  assert.ok(serial.some((b) => b !== 0));
  const again = await signOk(csr);
  assert.notEqual(again.serialNumber, certificate.serialNumber);

  // openssl reads the same fields.
  const text = await openssl([
    "x509",
    "-noout",
    "-subject",
    "-ext",
    "keyUsage,extendedKeyUsage,basicConstraints,subjectAltName",
  ], certificate.toString("pem"));
  assert.equal(
    text,
    [
      "subject=O = system:nodes, CN = system:node:worker-1",
      "X509v3 Key Usage: critical",
      "    Digital Signature",
      "X509v3 Extended Key Usage: ",
      "    TLS Web Client Authentication",
      "X509v3 Basic Constraints: critical",
      "    CA:FALSE",
      "X509v3 Subject Alternative Name: ",
      "    IP Address:10.0.0.1, IP Address:FD00:0:0:0:0:0:0:1",
      "",
    ].join("\n"),
  );
  const serialLine = await openssl(["x509", "-noout", "-serial"], certificate.toString("pem"));
  assert.doesNotMatch(serialLine, /-/, "serial is positive");
});

Deno.test("a CA without a subject key identifier and a CSR without SANs give a certificate without AKI and SAN", async () => {
  const keys = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, [
    "sign",
    "verify",
  ]) as CryptoKeyPair;
  const caCert = await x509.X509CertificateGenerator.createSelfSigned({
    name: "CN=no-ski",
    keys,
    signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
    extensions: [new x509.BasicConstraintsExtension(true, undefined, true)],
  });
  const keyPem = encodePem(await crypto.subtle.exportKey("pkcs8", keys.privateKey), "PRIVATE KEY");
  const ca = await parseKubeletCa(caCert.toString("pem"), keyPem);
  const certificate = await signOk(await makeCsr({ extensions: [] }), ca);
  assert.deepEqual(Array.from(certificate.extensions, (e) => e.type), [
    "2.5.29.15",
    "2.5.29.37",
    "2.5.29.19",
  ]);
  assert.ok(await certificate.verify({ publicKey: caCert.publicKey, signatureOnly: true }));
});

Deno.test("subject attributes may come in any order and IPv6-only SANs are copied", async () => {
  const certificate = await signOk(
    await makeCsr({
      name: [{ CN: ["system:node:node.example"] }, { O: ["system:nodes"] }],
      altNames: [{ type: "ip", value: "2001:db8::5" }],
    }),
  );
  assert.equal(certificate.subject, "CN=system:node:node.example, O=system:nodes");
  assert.deepEqual(certificate.getExtension(x509.SubjectAlternativeNameExtension)!.names.toJSON(), [
    { type: "ip", value: "2001:db8::5" },
  ]);
});

Deno.test("CSRs of every key type a node may use verify; other signature algorithms are refused", async () => {
  /** A node CSR made by openssl with `key` (PEM) and `digest` (none for Ed25519). */
  const csrWith = (key: string, digest?: string) =>
    opensslOk(
      [
        "req",
        "-new",
        "-key",
        "/dev/stdin",
        ...(digest ? [digest] : []),
        "-subj",
        "/O=system:nodes/CN=system:node:worker-1",
        "-outform",
        "DER",
      ],
      key,
    );
  const keys: [string, string, string?][] = [
    ["EC P-256, SHA-384", ecSec1, "-sha384"],
    ["EC P-384", p384Sec1, "-sha384"],
    ["EC P-521", await openssl(["ecparam", "-name", "secp521r1", "-genkey", "-noout"]), "-sha512"],
    ["RSA-2048", rsaPkcs1, "-sha256"],
    ["Ed25519", await openssl(["genpkey", "-algorithm", "ed25519"])],
  ];
  for (const [label, key, digest] of keys) {
    const pem = await signKubeletCertificate(await csrWith(key, digest), ecCa).catch((e) => {
      throw new Error(`${label}: ${e.message}`);
    });
    assert.equal(new x509.X509Certificate(pem).subject, "O=system:nodes, CN=system:node:worker-1", label);
    const verified = await opensslVerify(ecCert, pem, "sslclient");
    assert.equal(verified.code, 0, `${label}: ${verified.output}`);
  }
  await assertCaError(
    signKubeletCertificate(await csrWith(ecSec1, "-sha1"), ecCa),
    "csr-signature-invalid",
    "certificate request signature cannot be verified (unsupported key or signature algorithm)",
  );
});

Deno.test("a certificate valid past 2049 ends in a GeneralizedTime (RFC 5280), which openssl reads", async () => {
  const clock = new ManualClock(Date.UTC(2049, 5, 1, 12, 0, 0));
  const certificate = await signOk(await opensslNodeCsr(), ecCa, clock);
  assert.equal(certificate.notBefore.getTime(), clock.now() - 2 * 3600 * 1000);
  assert.equal(certificate.notAfter.getTime(), clock.now() + KUBELET_CERT_VALIDITY_MS);
  const dates = await openssl(["x509", "-noout", "-dates"], certificate.toString("pem"));
  assert.match(dates, /notBefore=Jun {2}1 10:00:00 2049 GMT\nnotAfter=Jun {2}1 12:00:00 2050 GMT/);
});

Deno.test("readKubeletCa reads ca.crt and ca.key, and names a missing file", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/ca.crt`, ecCert);
    await Deno.writeTextFile(`${dir}/ca.key`, ecSec1);
    const ca = await readKubeletCa({ certFile: `${dir}/ca.crt`, keyFile: `${dir}/ca.key` });
    assert.equal(new x509.X509Certificate(ca.certificate.der).subject, "CN=kubernetes");
    assert.equal(ca.privateKey.extractable, false);
    await assertCaError(
      readKubeletCa({ certFile: `${dir}/ca.crt`, keyFile: `${dir}/missing.key` }),
      "ca-unreadable",
      `reading CA key ${dir}/missing.key: no such file`,
    );
    await assertCaError(
      readKubeletCa({ certFile: `${dir}/missing.crt`, keyFile: `${dir}/ca.key` }),
      "ca-unreadable",
      `reading CA certificate ${dir}/missing.crt: no such file`,
    );
    await Deno.writeTextFile(`${dir}/ca.key`, "no pem here\n");
    await assertCaError(
      readKubeletCa({ certFile: `${dir}/ca.crt`, keyFile: `${dir}/ca.key` }),
      "ca-key-invalid",
      `no PEM data found in ${dir}/ca.key`,
    );
  });
});

Deno.test("malformed, unsupported and mismatched CA keys give clear errors without key material", async () => {
  const ed25519 = await openssl(["genpkey", "-algorithm", "ed25519"]);
  const secp256k1 = await openssl(["ecparam", "-name", "secp256k1", "-genkey", "-noout"]);
  const encrypted = await openssl(
    ["pkey", "-traditional", "-aes128", "-passout", "pass:secret-pass"],
    ecSec1,
  );
  const pkcs8Encrypted = await openssl(["pkcs8", "-topk8", "-v2", "aes128", "-passout", "pass:x"], ecSec1);
  const otherEc = await openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout"]);
  const explicitCurve = await openssl([
    "ecparam",
    "-name",
    "prime256v1",
    "-genkey",
    "-noout",
    "-param_enc",
    "explicit",
  ]);
  // A SEC1 key whose private scalar is zero: well-formed ASN.1, not a valid key.
  const sec1 = x509.PemConverter.decodeFirst(ecSec1);
  const zeroScalar = new Uint8Array(sec1.slice(0));
  zeroScalar.fill(0, 7, 39); // 30 77 02 01 01 04 20 <32-byte scalar>
  const zeroScalarPem = encodePem(zeroScalar, "EC PRIVATE KEY");
  const cases: [string, string, string, KubeletCaError["reason"], string | RegExp][] = [
    ["no PEM block", ecCert, "just text", "ca-key-invalid", "no PEM data found in ca.key"],
    ["empty key file", ecCert, "", "ca-key-invalid", "no PEM data found in ca.key"],
    [
      "PEM block with a body that is not base64",
      ecCert,
      "-----BEGIN EC PRIVATE KEY-----\n!!!!\n-----END EC PRIVATE KEY-----\n",
      "ca-key-invalid",
      "no PEM data found in ca.key",
    ],
    [
      "PEM block with truncated base64",
      ecCert,
      "-----BEGIN EC PRIVATE KEY-----\nAAA\n-----END EC PRIVATE KEY-----\n",
      "ca-key-invalid",
      "ca.key: PEM data is malformed",
    ],
    [
      "unsupported PEM type",
      ecCert,
      await openssl(["pkey", "-pubout"], ecSec1),
      "ca-key-unsupported",
      `unsupported key type "PUBLIC KEY" in ca.key (want "EC PRIVATE KEY", "RSA PRIVATE KEY" or "PRIVATE KEY")`,
    ],
    [
      "encrypted PKCS#8",
      ecCert,
      pkcs8Encrypted,
      "ca-key-unsupported",
      /^unsupported key type "ENCRYPTED PRIVATE KEY" in ca\.key/,
    ],
    [
      "encrypted legacy PEM",
      ecCert,
      encrypted,
      "ca-key-unsupported",
      "ca.key: PEM headers are not supported (is the key encrypted?)",
    ],
    [
      "garbage EC body",
      ecCert,
      "-----BEGIN EC PRIVATE KEY-----\nAAECAwQFBgcICQ==\n-----END EC PRIVATE KEY-----\n",
      "ca-key-invalid",
      "ca.key: malformed EC PRIVATE KEY",
    ],
    [
      "garbage RSA body",
      rsaCert,
      "-----BEGIN RSA PRIVATE KEY-----\nAAECAwQFBgcICQ==\n-----END RSA PRIVATE KEY-----\n",
      "ca-key-invalid",
      "ca.key: malformed RSA PRIVATE KEY",
    ],
    [
      "garbage PKCS#8 body",
      ecCert,
      "-----BEGIN PRIVATE KEY-----\nAAECAwQFBgcICQ==\n-----END PRIVATE KEY-----\n",
      "ca-key-invalid",
      "ca.key: malformed PRIVATE KEY",
    ],
    [
      "zero private scalar",
      ecCert,
      zeroScalarPem,
      "ca-key-invalid",
      "ca.key: the key cannot sign (not a valid key)",
    ],
    [
      "a key labelled with the wrong PEM type",
      rsaCert,
      rsaPkcs1.replaceAll("RSA PRIVATE KEY", "EC PRIVATE KEY"),
      "ca-key-invalid",
      "ca.key: malformed EC PRIVATE KEY",
    ],
    [
      "EC key with explicit curve parameters",
      ecCert,
      explicitCurve,
      "ca-key-unsupported",
      "ca.key: the EC private key does not name its curve",
    ],
    [
      "Ed25519 key",
      ecCert,
      ed25519,
      "ca-key-unsupported",
      "ca.key: unsupported private key algorithm Ed25519",
    ],
    [
      "secp256k1 key",
      ecCert,
      secp256k1,
      "ca-key-unsupported",
      "ca.key: unsupported elliptic curve 1.3.132.0.10",
    ],
    [
      "another EC key",
      ecCert,
      otherEc,
      "ca-key-mismatch",
      "private key ca.key does not match certificate ca.crt",
    ],
    [
      "an RSA key for an EC certificate",
      ecCert,
      rsaPkcs1,
      "ca-key-mismatch",
      /^private key ca\.key does not match certificate ca\.crt$/,
    ],
    [
      "an EC key for an RSA certificate",
      rsaCert,
      ecSec1,
      "ca-key-mismatch",
      /^private key ca\.key does not match certificate ca\.crt$/,
    ],
  ];
  for (const [label, cert, key, code, message] of cases) {
    const error = await assertCaError(parseKubeletCa(cert, key), code, message).catch((e) => {
      throw new Error(`${label}: ${e.message}`);
    });
    for (const line of [...pemBodyLines(key), ...pemBodyLines(ecSec1)]) {
      assert.ok(!error.message.includes(line.slice(0, 16)), `${label}: error leaks key material`);
    }
    assert.ok(!error.message.includes("secret-pass"), label);
  }
});

Deno.test("malformed CA certificates give clear errors", async () => {
  const cases: [string, string, string | RegExp][] = [
    ["no PEM block", "not a certificate", "no PEM data found in ca.crt"],
    ["only a key", ecSec1, `no CERTIFICATE PEM block found in ca.crt (found "EC PRIVATE KEY")`],
    [
      "garbage certificate body",
      "-----BEGIN CERTIFICATE-----\nAAECAwQFBgcICQ==\n-----END CERTIFICATE-----\n",
      "ca.crt: CERTIFICATE is not a valid X.509 certificate",
    ],
  ];
  for (const [label, cert, message] of cases) {
    await assertCaError(parseKubeletCa(cert, ecSec1), "ca-certificate-invalid", message).catch((e) => {
      throw new Error(`${label}: ${e.message}`);
    });
  }
  // The first CERTIFICATE block counts, whatever precedes it.
  const ca = await parseKubeletCa(`${ecSec1}\n${ecCert}\n${rsaCert}`, ecSec1);
  assert.equal(new x509.X509Certificate(ca.certificate.der).subject, "CN=kubernetes");
});

// --- certificate request rules ---

Deno.test("CSRs that break the subject rules are rejected with the rule and the value", async () => {
  const cases: [string, x509.JsonName, string | RegExp][] = [
    [
      "wrong organization",
      [{ O: ["system:masters"] }, { CN: ["system:node:worker-1"] }],
      `certificate request must have organization "system:nodes" but has "system:masters"`,
    ],
    [
      "two organizations",
      [{ O: ["system:nodes"] }, { O: ["system:masters"] }, { CN: ["system:node:worker-1"] }],
      `certificate request must have exactly one organization but has 2 ("system:nodes", "system:masters")`,
    ],
    [
      "missing organization",
      [{ CN: ["system:node:worker-1"] }],
      "certificate request must have exactly one organization but has none",
    ],
    [
      "common name without prefix",
      [{ O: ["system:nodes"] }, { CN: ["worker-1"] }],
      `certificate request must have common name prefix "system:node:" but is "worker-1"`,
    ],
    [
      "common name with an empty node name",
      [{ O: ["system:nodes"] }, { CN: ["system:node:"] }],
      `certificate request common name "system:node:" does not name a node`,
    ],
    [
      "a node name that is not its own object name (the JoiningNode and the audit would name another)",
      [{ O: ["system:nodes"] }, { CN: ["system:node:Worker_1"] }],
      `certificate request must name the node as a Kubernetes object name ("worker-1"), not "Worker_1"`,
    ],
    [
      "a node name that lower-cases into another (the Kelvin sign)",
      [{ O: ["system:nodes"] }, { CN: ["system:node:worker-\u212A"] }],
      `certificate request must name the node as a Kubernetes object name ("worker-k"), not "worker-\u212A"`,
    ],
    [
      "a node name that is no object name at all",
      [{ O: ["system:nodes"] }, { CN: ["system:node:worker 1"] }],
      /^failed to generate a Kubernetes compliant hostname for "worker 1": /,
    ],
    [
      "two common names",
      [{ O: ["system:nodes"] }, { CN: ["system:node:a"] }, { CN: ["system:node:b"] }],
      `certificate request must have exactly one common name but has 2 ("system:node:a", "system:node:b")`,
    ],
    [
      "missing common name",
      [{ O: ["system:nodes"] }],
      "certificate request must have exactly one common name but has none",
    ],
    [
      "organizational unit",
      [{ O: ["system:nodes"] }, { OU: ["ops"] }, { CN: ["system:node:worker-1"] }],
      `certificate request may not contain subject attribute OU (2.5.4.11) (got "ops")`,
    ],
    [
      "country",
      [{ C: ["DE"] }, { O: ["system:nodes"] }, { CN: ["system:node:worker-1"] }],
      `certificate request may not contain subject attribute C (2.5.4.6) (got "DE")`,
    ],
  ];
  for (const [label, name, message] of cases) {
    await assertCaError(signKubeletCertificate(await makeCsr({ name }), ecCa), "csr-rejected", message).catch(
      (e) => {
        throw new Error(`${label}: ${e.message}`);
      },
    );
  }
});

Deno.test("CSRs that ask for names or extensions a kubelet certificate may not have are rejected", async () => {
  const cases: [string, CsrOptions, string][] = [
    [
      "DNS SAN",
      { altNames: [{ type: "ip", value: "10.0.0.1" }, { type: "dns", value: "evil.example" }] },
      `certificate request may not contain DNS names (got "evil.example")`,
    ],
    [
      "two DNS SANs",
      { altNames: [{ type: "dns", value: "a.example" }, { type: "dns", value: "b.example" }] },
      `certificate request may not contain DNS names (got "a.example", "b.example")`,
    ],
    [
      "URI SAN",
      { altNames: [{ type: "url", value: "spiffe://cluster/ns/kube-system" }] },
      `certificate request may not contain URIs (got "spiffe://cluster/ns/kube-system")`,
    ],
    [
      "email SAN",
      { altNames: [{ type: "email", value: "root@example.com" }] },
      `certificate request may not contain email addresses (got "root@example.com")`,
    ],
    [
      "directory-name SAN",
      { altNames: [{ type: "dn", value: "CN=x" }] },
      "certificate request may not contain directory names",
    ],
    [
      "key usage extension",
      {
        extensions: [
          new x509.SubjectAlternativeNameExtension([{ type: "ip", value: "10.0.0.1" }]),
          new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true),
        ],
      },
      "certificate request may not contain extension keyUsage (2.5.29.15)",
    ],
    [
      "basic constraints CA:TRUE",
      { extensions: [new x509.BasicConstraintsExtension(true, undefined, true)] },
      "certificate request may not contain extension basicConstraints (2.5.29.19)",
    ],
    [
      "unknown extension",
      { extensions: [new x509.Extension("1.2.3.4", false, new Uint8Array([5, 0]))] },
      "certificate request may not contain extension 1.2.3.4",
    ],
    [
      "two SAN extensions",
      {
        extensions: [
          new x509.SubjectAlternativeNameExtension([{ type: "ip", value: "10.0.0.1" }]),
          new x509.SubjectAlternativeNameExtension([{ type: "ip", value: "10.0.0.2" }]),
        ],
      },
      "certificate request has more than one subjectAltName extension",
    ],
    [
      "challenge password attribute",
      { attributes: [new x509.ChallengePasswordAttribute("hunter2")] },
      "certificate request may not contain attribute challengePassword (1.2.840.113549.1.9.7)",
    ],
  ];
  for (const [label, options, message] of cases) {
    await assertCaError(signKubeletCertificate(await makeCsr(options), ecCa), "csr-rejected", message).catch(
      (e) => {
        throw new Error(`${label}: ${e.message}`);
      },
    );
  }
});

Deno.test("malformed and badly signed CSRs are rejected", async () => {
  const valid = await makeCsr();
  // Change one subject character ("worker-1" → "worker-2"): the structure stays valid, the signature does not.
  const tampered = valid.slice();
  const at = new TextDecoder("latin1").decode(tampered).indexOf("worker-1") + "worker-".length;
  tampered[at] = "2".charCodeAt(0);
  const certificateDer = ecCa.certificate.der;
  const cases: [string, Uint8Array, KubeletCaError["reason"], string][] = [
    ["bad signature", tampered, "csr-signature-invalid", "certificate request signature is invalid"],
    ["empty", new Uint8Array(), "csr-malformed", "certificate request is empty"],
    [
      "garbage",
      new TextEncoder().encode("definitely not DER"),
      "csr-malformed",
      "certificate request is not a DER-encoded PKCS#10 request",
    ],
    [
      "PEM instead of DER",
      new TextEncoder().encode(encodePem(valid, "CERTIFICATE REQUEST")),
      "csr-malformed",
      "certificate request is not a DER-encoded PKCS#10 request",
    ],
    [
      "trailing bytes",
      Uint8Array.of(...valid, 0),
      "csr-malformed",
      "certificate request is not a DER-encoded PKCS#10 request",
    ],
    [
      "truncated",
      valid.subarray(0, valid.length - 10),
      "csr-malformed",
      "certificate request is not a DER-encoded PKCS#10 request",
    ],
    [
      "a certificate instead of a CSR",
      certificateDer,
      "csr-malformed",
      "certificate request is not a DER-encoded PKCS#10 request",
    ],
  ];
  for (const [label, csr, code, message] of cases) {
    await assertCaError(signKubeletCertificate(csr, ecCa), code, message).catch((e) => {
      throw new Error(`${label}: ${e.message}`);
    });
  }
  // The untampered request signs.
  await signOk(valid);
});

/** The parts of a hand-made CSR (DER), each defaulting to a valid node CSR's. */
interface RawCsrParts {
  /** The subject's RDNs, each an attribute OID and its encoded value. */
  subject?: [string, Uint8Array][];
  /** The attributes element ([0]), or null for none at all. */
  attributes?: Uint8Array | null;
}

const utf8String = (text: string) => derElement(0x0c, new TextEncoder().encode(text));
const bmpString = (text: string) =>
  derElement(0x1e, Uint8Array.from([...text].flatMap((c) => [0, c.charCodeAt(0)])));
const rawCsrKeys = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, [
  "sign",
  "verify",
]) as CryptoKeyPair;

/** A CSR built byte by byte and signed (ECDSA P-256, SHA-256): encodings no CSR library writes. */
async function rawCsr(parts: RawCsrParts = {}): Promise<Uint8Array<ArrayBuffer>> {
  const subject = parts.subject ??
    [["2.5.4.10", utf8String("system:nodes")], ["2.5.4.3", utf8String("system:node:worker-1")]];
  const name = derSequence(
    ...subject.map(([oid, value]) => derElement(0x31, derSequence(derOid(oid), value))),
  );
  const spki = new Uint8Array(await crypto.subtle.exportKey("spki", rawCsrKeys.publicKey));
  const info = derSequence(
    derUnsignedInteger(Uint8Array.of(0)),
    name,
    spki,
    ...(parts.attributes === null ? [] : [parts.attributes ?? derElement(0xa0)]),
  );
  const p1363 = new Uint8Array(
    await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, rawCsrKeys.privateKey, info),
  );
  const signature = derSequence(
    derUnsignedInteger(p1363.subarray(0, 32)),
    derUnsignedInteger(p1363.subarray(32)),
  );
  return derSequence(info, derSequence(derOid("1.2.840.10045.4.3.2")), derBitString(signature));
}

/** An extension request attribute ([0] holding one Attribute) whose one value is `value`. */
const extensionRequest = (value: Uint8Array) =>
  derElement(0xa0, derSequence(derOid("1.2.840.113549.1.9.14"), derElement(0x31, value)));

Deno.test("CSRs are read as DER: any string type in the subject, no attributes at all; malformed parts refused", async () => {
  const bmp = await rawCsr({
    subject: [["2.5.4.10", bmpString("system:nodes")], ["2.5.4.3", bmpString("system:node:worker-7")]],
  });
  assert.equal((await signOk(bmp)).subject, "O=system:nodes, CN=system:node:worker-7");
  assert.equal(nodeNameFromCsr(bmp), "worker-7");
  await signOk(await rawCsr({ attributes: null }));

  const cases: [string, Promise<Uint8Array>, KubeletCaError["reason"], string][] = [
    [
      "a subject value that is no string",
      rawCsr({
        subject: [
          ["2.5.4.10", utf8String("system:nodes")],
          ["2.5.4.3", utf8String("system:node:worker-1")],
          ["2.5.4.11", derElement(0x04, Uint8Array.of(1, 2))],
        ],
      }),
      "csr-rejected",
      'certificate request may not contain subject attribute OU (2.5.4.11) (got "<not a string>")',
    ],
    [
      "an extension request that is no list of extensions",
      rawCsr({ attributes: extensionRequest(utf8String("x")) }),
      "csr-malformed",
      "certificate request has a malformed extension request",
    ],
    [
      "a subjectAltName that is no list of names",
      rawCsr({
        attributes: extensionRequest(
          derSequence(derSequence(derOid("2.5.29.17"), derElement(0x04, utf8String("x")))),
        ),
      }),
      "csr-malformed",
      "certificate request has a malformed subjectAltName extension",
    ],
    [
      "attributes that are no [0]",
      rawCsr({ attributes: derElement(0x31) }),
      "csr-malformed",
      "certificate request is not a DER-encoded PKCS#10 request",
    ],
  ];
  for (const [label, csr, reason, message] of cases) {
    await assertCaError(signKubeletCertificate(await csr, ecCa), reason, message).catch((e) => {
      throw new Error(`${label}: ${e.message}`);
    });
  }
});

Deno.test("nodeNameFromCsr returns the name after system:node: without checking the signature", async () => {
  assert.equal(nodeNameFromCsr(await opensslNodeCsr()), "worker-1");
  const tampered = (await makeCsr()).slice();
  const at = new TextDecoder("latin1").decode(tampered).indexOf("worker-1") + "worker-".length;
  tampered[at] = "9".charCodeAt(0);
  assert.equal(nodeNameFromCsr(tampered), "worker-9");
  const withoutPrefix = await makeCsr({ name: [{ O: ["system:nodes"] }, { CN: ["worker-1"] }] });
  assert.throws(
    () => nodeNameFromCsr(withoutPrefix),
    new KubeletCaError(
      "csr-rejected",
      `certificate request must have common name prefix "system:node:" but is "worker-1"`,
    ),
  );
  assert.throws(
    () => nodeNameFromCsr(new Uint8Array([1, 2, 3])),
    new KubeletCaError("csr-malformed", "certificate request is not a DER-encoded PKCS#10 request"),
  );
});

Deno.test("CSRs asking for loopback, unspecified or the cluster's reserved addresses are rejected", async () => {
  const reservedAddresses = [
    { address: parseIp("10.0.0.1")!, what: "the API server endpoint's address" },
    { address: parseIp("10.96.0.1")!, what: "the first address of the service network" },
  ];
  const cases: [string, string][] = [
    ["10.0.0.1", "certificate request may not contain 10.0.0.1, the API server endpoint's address"],
    ["10.96.0.1", "certificate request may not contain 10.96.0.1, the first address of the service network"],
    [
      "::ffff:a60:1", // ::ffff:10.96.0.1 (the CSR generator mis-encodes that spelling)
      "certificate request may not contain ::ffff:a60:1, the first address of the service network",
    ],
    ["127.0.0.1", "certificate request may not contain the loopback or unspecified address 127.0.0.1"],
    ["127.1.2.3", "certificate request may not contain the loopback or unspecified address 127.1.2.3"],
    ["::1", "certificate request may not contain the loopback or unspecified address ::1"],
    ["0.0.0.0", "certificate request may not contain the loopback or unspecified address 0.0.0.0"],
    ["::", "certificate request may not contain the loopback or unspecified address ::"],
  ];
  for (const [ip, message] of cases) {
    const csr = await makeCsr({ altNames: [{ type: "ip", value: "10.0.0.7" }, { type: "ip", value: ip }] });
    await assertCaError(
      signKubeletCertificate(csr, ecCa, { clock: fixedClock, reservedAddresses }),
      "csr-rejected",
      message,
    );
  }
  const allowed = await makeCsr({
    altNames: [{ type: "ip", value: "10.0.0.7" }, { type: "ip", value: "10.96.0.2" }],
  });
  await signKubeletCertificate(allowed, ecCa, { clock: fixedClock, reservedAddresses });
});

Deno.test("the join service's signer refuses the endpoint it hands out and the service network's first address", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/ca.crt`, ecCert);
    await Deno.writeTextFile(`${dir}/ca.key`, ecSec1);
    let endpoint = "192.168.7.1:6443";
    const clock = new ManualClock(fixedClock.now());
    const signer = kubeletSigner({
      pkiDir: dir,
      clock,
      serviceNetwork: parseCidr("172.20.0.0/16")!,
      apiServerEndpoint: { current: () => Promise.resolve(endpoint) },
    });
    const ask = async (ip: string) => {
      const csr = await makeCsr({ altNames: [{ type: "ip", value: ip }] });
      return await signer.sign(csr, {}).then((signed) => signed.nodeName, (error: unknown) => error);
    };
    const refused = async (ip: string, message: RegExp) => {
      const error = await ask(ip);
      assert.ok(error instanceof Rejection, `${ip}: want a rejection, got ${error}`);
      assert.equal(error.reason, "csr-rejected");
      assert.match(error.message, message);
    };
    await refused(
      "192.168.7.1",
      /^certificate request rejected: .* 192\.168\.7\.1, the API server endpoint's address$/,
    );
    await refused("172.20.0.1", /172\.20\.0\.1, the first address of the service network/);
    assert.equal(await ask("10.96.0.1"), "worker-1", "only the configured service network is reserved");
    endpoint = "[fd00::6]:6443";
    await refused("fd00::6", /fd00::6, the API server endpoint's address$/);
    assert.equal(await ask("192.168.7.1"), "worker-1", "the endpoint in force is what counts");
    endpoint = "api.cluster.example:6443";
    assert.equal(await ask("192.168.7.1"), "worker-1", "a host name endpoint reserves no address");

    await Deno.writeTextFile(`${dir}/ca.key`, "not a key");
    assert.equal(await ask("10.0.0.7"), "worker-1", "the files are looked at again only after a while");
    clock.advance(FILE_CHECK_INTERVAL_MS);
    const broken = await ask("10.0.0.7");
    assert.ok(broken instanceof Rejection);
    assert.equal(broken.reason, "misconfigured");
    assert.match(broken.message, /^cluster CA unusable: no PEM data found in .*\/ca\.key$/);
  });
});
