/**
 * Key derivation test vectors shared by the kms, key service and build
 * tests: the original's `internal/crypto/testvector` set, RFC 5869 A.1–A.3,
 * and the bootstrapper reference's chained example.
 *
 * @module
 */

/** Bytes from a hex string. */
export function fromHex(hex: string): Uint8Array<ArrayBuffer> {
  return Uint8Array.from(hex.match(/../g) ?? [], (byte) => parseInt(byte, 16));
}

/** The bytes `first`, `first + 1`, …, `last`. */
export function byteRange(first: number, last: number): Uint8Array<ArrayBuffer> {
  return Uint8Array.from({ length: last - first + 1 }, (_, i) => first + i);
}

/** One HKDF-SHA256 vector. */
export interface HkdfVector {
  name: string;
  secret: Uint8Array<ArrayBuffer>;
  salt: Uint8Array<ArrayBuffer>;
  info: Uint8Array<ArrayBuffer>;
  length: number;
  /** Expected output, lower-case hex. */
  output: string;
}

const utf8 = (s: string) => new TextEncoder().encode(s);

/** HKDFZero: the disk key of UUID 00000000-… under an all-zero master secret and salt. */
export const HKDF_ZERO: HkdfVector = {
  name: "HKDFZero",
  secret: new Uint8Array(32),
  salt: new Uint8Array(32),
  info: utf8("key-00000000-0000-0000-0000-000000000000"),
  length: 32,
  output: "2b5c829f691bfd4232f8aac464bccc07e605c7c8e82cbca09837e86d0b6d0665",
};

/** HKDF0xFF: the disk key of UUID ffffffff-… under an all-0xff master secret and salt. */
export const HKDF_FF: HkdfVector = {
  name: "HKDF0xFF",
  secret: new Uint8Array(32).fill(0xff),
  salt: new Uint8Array(32).fill(0xff),
  info: utf8("key-ffffffff-ffff-ffff-ffff-ffffffffffff"),
  length: 32,
  output: "1484aa39d3415e906e07940ff215d8b1eee705d3027dba93306af4abff4f70be",
};

/** HKDFClusterID: a cluster ID. */
export const HKDF_CLUSTER_ID: HkdfVector = {
  name: "HKDFClusterID",
  secret: byteRange(0x00, 0x1f),
  salt: byteRange(0x20, 0x3f),
  info: utf8("key-clusterID"),
  length: 32,
  output: "128c164378fe8767f998fbdfe4b4d6463ec5ae1b664ea5999bc27417607ae9b6",
};

/** HKDFMeasurementSecret: a measurement secret. */
export const HKDF_MEASUREMENT_SECRET: HkdfVector = {
  name: "HKDFMeasurementSecret",
  secret: byteRange(0x40, 0x5f),
  salt: byteRange(0x60, 0x7f),
  info: utf8("key-measurementSecret"),
  length: 32,
  output: "4790578891f3fe6cc22cb661ecdc1b7e33121b1287546a52ba33a9136719c213",
};

/** RFC 5869 A.1: basic test case with SHA-256. */
export const RFC5869_A1: HkdfVector = {
  name: "RFC 5869 A.1",
  secret: new Uint8Array(22).fill(0x0b),
  salt: byteRange(0x00, 0x0c),
  info: byteRange(0xf0, 0xf9),
  length: 42,
  output: "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
};

/** RFC 5869 A.2: longer inputs and outputs. */
export const RFC5869_A2: HkdfVector = {
  name: "RFC 5869 A.2",
  secret: byteRange(0x00, 0x4f),
  salt: byteRange(0x60, 0xaf),
  info: byteRange(0xb0, 0xff),
  length: 82,
  output: "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c" +
    "59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71" +
    "cc30c58179ec3e87c14c01d5c1f3434f1d87",
};

/** RFC 5869 A.3: zero-length salt and info. */
export const RFC5869_A3: HkdfVector = {
  name: "RFC 5869 A.3",
  secret: new Uint8Array(22).fill(0x0b),
  salt: new Uint8Array(0),
  info: new Uint8Array(0),
  length: 42,
  output: "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8",
};

/** The original's vectors; their info is text, so the cluster KMS can derive them too. */
export const CONSTELLATION_VECTORS: readonly HkdfVector[] = [
  HKDF_ZERO,
  HKDF_FF,
  HKDF_CLUSTER_ID,
  HKDF_MEASUREMENT_SECRET,
];

/** RFC 5869's SHA-256 vectors; their info is binary (not UTF-8), so only raw HKDF derives them. */
export const RFC5869_VECTORS: readonly HkdfVector[] = [RFC5869_A1, RFC5869_A2, RFC5869_A3];

/**
 * The chained example of the bootstrapper reference (§4.5): master secret
 * 0x00..0x1f, salt 0x20..0x3f, measurement salt 32×0xAA.
 */
export const CHAINED_EXAMPLE = {
  masterSecret: byteRange(0x00, 0x1f),
  masterSalt: byteRange(0x20, 0x3f),
  kmsUri: "kms://cluster-kms?key=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" +
    "&salt=ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=",
  measurementSecret: "ea7fedd14f5a29b1b8545592fc20bfdae06918e4ff447b1a0b8e4f3356005bda",
  measurementSalt: new Uint8Array(32).fill(0xaa),
  clusterId: "2e2fba922b51075708bf5044e2f82169990d755b41fc868db0f1e0b44aa1092d",
  diskUuid: "0123abcd-0000-4000-8000-00000000cafe",
  diskKey: "cd38fc179a5154a9bd738351a8d0469a30c9edd57f9d8a31bc0153926daeadb1",
} as const;
