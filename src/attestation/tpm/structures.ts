/**
 * Parsers for the TPM 2.0 structures in a quote: `TPM2B_PUBLIC` (the
 * attestation key), `TPMS_ATTEST` (the signed quote body) and
 * `TPMT_SIGNATURE`. All integers are big-endian; a `TPM2B_*` is a `u16` size
 * followed by that many bytes (TPM 2.0 Library, Part 2: Structures).
 *
 * Parsers are strict: truncated input, trailing bytes and algorithms this
 * project does not verify throw `TpmParseError` (see `reader.ts`).
 *
 * @module
 */
import { primitives } from "../../crypto/primitives.ts";
import { ByteReader } from "./reader.ts";

/** TPM algorithm identifiers used here (`TPM_ALG_ID`). */
export const TpmAlg = {
  RSA: 0x0001,
  SHA256: 0x000b,
  NULL: 0x0010,
  RSASSA: 0x0014,
  RSAES: 0x0015,
  ECDSA: 0x0018,
  ECDAA: 0x001a,
  ECC: 0x0023,
} as const;

/** `TPM_ECC_NIST_P256`. */
export const TPM_ECC_NIST_P256 = 0x0003;
/** `TPM_GENERATED_VALUE`: the TPM only signs structures it built itself with this magic. */
export const TPM_GENERATED_VALUE = 0xff544347;
/** `TPM_ST_ATTEST_QUOTE`. */
export const TPM_ST_ATTEST_QUOTE = 0x8018;
/** Highest PCR index of a PC-client TPM. */
export const MAX_PCR_INDEX = 23;

/** `TPMA_OBJECT` bits checked on an attestation key. */
export const ObjectAttribute = {
  fixedTpm: 1 << 1,
  restricted: 1 << 16,
  sign: 1 << 18,
} as const;

/** The public part of a key, from `TPM2B_PUBLIC`. */
export interface TpmPublic {
  /** The marshalled `TPMT_PUBLIC` (the `TPM2B_PUBLIC` contents without its size). */
  tpmtPublic: Uint8Array<ArrayBuffer>;
  /** `nameAlg`. */
  nameAlg: number;
  /** `objectAttributes` (`TPMA_OBJECT`). */
  objectAttributes: number;
  /** The key, as needed for WebCrypto. */
  key: RsaPublicKey | EccPublicKey;
}

/** An RSA public key. */
export interface RsaPublicKey {
  /** An RSA key. */
  type: "rsa";
  /** Big-endian modulus, `keyBits / 8` bytes. */
  modulus: Uint8Array<ArrayBuffer>;
  /** Public exponent (the TPM's 0 already replaced by 65537). */
  exponent: number;
}

/** A NIST P-256 public key. */
export interface EccPublicKey {
  /** An ECC key. */
  type: "ecc";
  /** 32-byte big-endian coordinates. */
  x: Uint8Array<ArrayBuffer>;
  /** The point's y coordinate. */
  y: Uint8Array<ArrayBuffer>;
}

/** One `TPMS_PCR_SELECTION`: a bank and the PCR indices selected in it, ascending. */
export interface PcrSelection {
  /** The PCR bank's hash algorithm (`TPM_ALG_ID`). */
  hash: number;
  /** The selected PCR indices, ascending. */
  pcrs: number[];
}

/** A parsed quote (`TPMS_ATTEST` with `TPMS_QUOTE_INFO`). */
export interface TpmQuote {
  /** The signing key's qualified name. */
  qualifiedSigner: Uint8Array;
  /** The qualifying data the verifier asked for (the report data). */
  extraData: Uint8Array;
  /** `TPMS_CLOCK_INFO.clock`: milliseconds the TPM has been powered. */
  clock: bigint;
  /** `TPMS_CLOCK_INFO.resetCount`. */
  resetCount: number;
  /** `TPMS_CLOCK_INFO.restartCount`. */
  restartCount: number;
  /** `TPMS_CLOCK_INFO.safe`. */
  safe: boolean;
  /** The TPM's firmware version. */
  firmwareVersion: bigint;
  /** The quoted PCR selection. */
  pcrSelections: PcrSelection[];
  /** Hash over the selected PCR values, ascending by index. */
  pcrDigest: Uint8Array;
}

/** A parsed `TPMT_SIGNATURE`. */
export type TpmSignature =
  | { algorithm: "rsassa"; hash: number; signature: Uint8Array<ArrayBuffer> }
  | { algorithm: "ecdsa"; hash: number; r: Uint8Array<ArrayBuffer>; s: Uint8Array<ArrayBuffer> };

const ECC_COORDINATE_LENGTH = 32;
const RSA_KEY_BITS = [2048, 3072, 4096];
const DEFAULT_RSA_EXPONENT = 65537;
/** `HASH_COUNT` bound: a TPM has at most a handful of banks. */
const MAX_PCR_SELECTIONS = 16;

/** Parses a `TPM2B_PUBLIC` holding an RSA or NIST P-256 key. */
export function parsePublic(tpm2bPublic: Uint8Array): TpmPublic {
  const outer: ByteReader = new ByteReader(tpm2bPublic, "TPM2B_PUBLIC");
  const tpmtPublic = outer.sized("publicArea");
  outer.end();

  const r: ByteReader = new ByteReader(tpmtPublic, "TPMT_PUBLIC");
  const type = r.u16("type");
  const nameAlg = r.u16("nameAlg");
  const objectAttributes = r.u32("objectAttributes");
  r.sized("authPolicy");
  readSymmetric(r);
  let key: RsaPublicKey | EccPublicKey;
  if (type === TpmAlg.RSA) {
    readScheme(r, "scheme", [TpmAlg.RSAES]);
    const keyBits = r.u16("keyBits");
    const exponent = r.u32("exponent");
    const modulus = r.sized("unique (modulus)");
    if (!RSA_KEY_BITS.includes(keyBits)) r.fail("keyBits", `unsupported RSA key size ${keyBits}`);
    if (modulus.length !== keyBits / 8) {
      r.fail("unique", `modulus is ${modulus.length} bytes, want ${keyBits / 8} for ${keyBits}-bit RSA`);
    }
    key = { type: "rsa", modulus, exponent: exponent === 0 ? DEFAULT_RSA_EXPONENT : exponent };
  } else if (type === TpmAlg.ECC) {
    readScheme(r, "scheme", []);
    const curve = r.u16("curveID");
    readScheme(r, "kdf", []);
    const x = r.sized("unique (x)");
    const y = r.sized("unique (y)");
    if (curve !== TPM_ECC_NIST_P256) r.fail("curveID", `unsupported curve ${hex16(curve)}, want NIST P-256`);
    key = { type: "ecc", x: fixedLength(r, x, "x"), y: fixedLength(r, y, "y") };
  } else {
    r.fail("type", `unsupported key type ${hex16(type)}, want RSA or ECC`);
  }
  r.end();
  return { tpmtPublic, nameAlg, objectAttributes, key };
}

/** Parses a quote (`TPMS_ATTEST` of type `TPM_ST_ATTEST_QUOTE`). */
export function parseQuote(attest: Uint8Array): TpmQuote {
  const r: ByteReader = new ByteReader(attest, "TPMS_ATTEST");
  const magic = r.u32("magic");
  if (magic !== TPM_GENERATED_VALUE) {
    r.fail("magic", `0x${magic.toString(16).padStart(8, "0")} is not TPM_GENERATED_VALUE`);
  }
  const type = r.u16("type");
  if (type !== TPM_ST_ATTEST_QUOTE) r.fail("type", `${hex16(type)} is not TPM_ST_ATTEST_QUOTE`);
  const qualifiedSigner = r.sized("qualifiedSigner");
  const extraData = r.sized("extraData");
  const clock = r.u64("clockInfo.clock");
  const resetCount = r.u32("clockInfo.resetCount");
  const restartCount = r.u32("clockInfo.restartCount");
  const safe = r.u8("clockInfo.safe") !== 0;
  const firmwareVersion = r.u64("firmwareVersion");
  const count = r.u32("pcrSelect.count");
  if (count > MAX_PCR_SELECTIONS) r.fail("pcrSelect.count", `${count} banks is more than any TPM has`);
  const pcrSelections: PcrSelection[] = [];
  for (let i = 0; i < count; i++) {
    const hash = r.u16(`pcrSelections[${i}].hash`);
    const bitmap = r.bytes(r.u8(`pcrSelections[${i}].sizeofSelect`), `pcrSelections[${i}].pcrSelect`);
    const pcrs: number[] = [];
    bitmap.forEach((byte, octet) => {
      for (let bit = 0; bit < 8; bit++) if (byte & (1 << bit)) pcrs.push(octet * 8 + bit);
    });
    pcrSelections.push({ hash, pcrs });
  }
  const pcrDigest = r.sized("pcrDigest");
  r.end();
  return {
    qualifiedSigner,
    extraData,
    clock,
    resetCount,
    restartCount,
    safe,
    firmwareVersion,
    pcrSelections,
    pcrDigest,
  };
}

/** Parses a `TPMT_SIGNATURE` (RSASSA or ECDSA). */
export function parseSignature(signature: Uint8Array): TpmSignature {
  const r: ByteReader = new ByteReader(signature, "TPMT_SIGNATURE");
  const sigAlg = r.u16("sigAlg");
  let parsed: TpmSignature;
  if (sigAlg === TpmAlg.RSASSA) {
    parsed = { algorithm: "rsassa", hash: r.u16("hash"), signature: r.sized("sig") };
  } else if (sigAlg === TpmAlg.ECDSA) {
    parsed = { algorithm: "ecdsa", hash: r.u16("hash"), r: r.sized("signatureR"), s: r.sized("signatureS") };
  } else {
    r.fail("sigAlg", `unsupported signature algorithm ${hex16(sigAlg)}, want RSASSA or ECDSA`);
  }
  r.end();
  return parsed;
}

/** `0x1234`-style rendering of a `u16` for messages. */
export function hex16(value: number): string {
  return `0x${value.toString(16).padStart(4, "0")}`;
}

/** `TPMT_SYM_DEF_OBJECT`: an algorithm, then key bits and mode unless it is NULL. */
function readSymmetric(r: ByteReader): void {
  if (r.u16("symmetric.algorithm") !== TpmAlg.NULL) {
    r.u16("symmetric.keyBits");
    r.u16("symmetric.mode");
  }
}

/**
 * A `TPMT_*_SCHEME`: a scheme, then its details. Most schemes carry one hash
 * algorithm; NULL and those in `withoutDetails` carry none; ECDAA adds a count.
 */
function readScheme(r: ByteReader, field: string, withoutDetails: number[]): void {
  const scheme = r.u16(`${field}.scheme`);
  if (scheme === TpmAlg.NULL || withoutDetails.includes(scheme)) return;
  r.u16(`${field}.hashAlg`);
  if (scheme === TpmAlg.ECDAA) r.u16(`${field}.count`);
}

/** ECC coordinates are fixed-length for WebCrypto; some encoders drop leading zeros. */
function fixedLength(r: ByteReader, value: Uint8Array<ArrayBuffer>, name: string): Uint8Array<ArrayBuffer> {
  if (value.length > ECC_COORDINATE_LENGTH) {
    r.fail(`unique (${name})`, `coordinate is ${value.length} bytes, want at most ${ECC_COORDINATE_LENGTH}`);
  }
  const padded = new Uint8Array(ECC_COORDINATE_LENGTH);
  padded.set(value, ECC_COORDINATE_LENGTH - value.length);
  return padded;
}

/**
 * The attestation key digest used in AK allow-lists: lower-case hex SHA-256
 * of the key's marshalled `TPMT_PUBLIC` (the `TPM2B_PUBLIC` contents without
 * the size prefix). For a SHA-256 `nameAlg` this is the key's TPM Name
 * without its `000b` prefix, as `tpm2_readpublic` prints it.
 */
export async function publicKeyDigest(publicKey: TpmPublic): Promise<string> {
  return (await primitives.sha256(publicKey.tpmtPublic)).toHex();
}
