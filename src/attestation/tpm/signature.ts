/**
 * Verifies a TPM quote signature with WebCrypto: the attestation key's
 * signature (`TPMT_SIGNATURE`) over the whole marshalled `TPMS_ATTEST`.
 *
 * Only SHA-256 signatures are accepted: RSASSA-PKCS1-v1_5 for RSA keys and
 * ECDSA on NIST P-256 for ECC keys. WebCrypto hashes the data itself, so the
 * quote bytes are passed as they are.
 *
 * @module
 */
import { AttestationError } from "../attestation.ts";
import { malformed } from "./document.ts";
import { type EccPublicKey, hex16, type RsaPublicKey, TpmAlg, type TpmSignature } from "./structures.ts";

const P256_SCALAR_LENGTH = 32;

/**
 * Checks that `signature` is a valid SHA-256 signature of `signed` by `key`.
 *
 * @throws {AttestationError} "signature-invalid" when it is not (naming why),
 *   "malformed" when the key cannot be imported (e.g. a point not on the curve)
 */
export async function verifyQuoteSignature(
  key: RsaPublicKey | EccPublicKey,
  signature: TpmSignature,
  signed: Uint8Array<ArrayBuffer>,
): Promise<void> {
  if (signature.hash !== TpmAlg.SHA256) {
    throw new AttestationError(
      "signature-invalid",
      `quote signature uses hash ${hex16(signature.hash)}, want SHA-256 (0x000b)`,
    );
  }
  let valid: boolean;
  if (key.type === "rsa") {
    if (signature.algorithm !== "rsassa") throw schemeMismatch(signature.algorithm, key.type);
    if (signature.signature.length !== key.modulus.length) {
      throw new AttestationError(
        "signature-invalid",
        `RSA signature is ${signature.signature.length} bytes, want ${key.modulus.length}`,
      );
    }
    const algorithm = { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" };
    const jwk = { kty: "RSA", n: base64url(key.modulus), e: base64url(exponentBytes(key.exponent)) };
    valid = await verifyWith(jwk, algorithm, algorithm, signature.signature, signed);
  } else {
    if (signature.algorithm !== "ecdsa") throw schemeMismatch(signature.algorithm, key.type);
    const jwk = { kty: "EC", crv: "P-256", x: base64url(key.x), y: base64url(key.y) };
    const p1363 = toP1363(signature.r, signature.s);
    valid = p1363 !== null && await verifyWith(
      jwk,
      { name: "ECDSA", namedCurve: "P-256" },
      { name: "ECDSA", hash: "SHA-256" },
      p1363,
      signed,
    );
  }
  if (!valid) {
    throw new AttestationError(
      "signature-invalid",
      "quote signature does not verify with the attestation key",
    );
  }
}

function schemeMismatch(algorithm: string, keyType: string): AttestationError {
  return new AttestationError(
    "signature-invalid",
    `quote signature is ${algorithm} but the attestation key is ${keyType}`,
  );
}

/**
 * Imports the key and verifies. WebCrypto returns false for a wrong signature
 * and throws only for an unusable key (e.g. a point off the curve, which Deno
 * detects at the first use rather than at import).
 */
async function verifyWith(
  jwk: JsonWebKey,
  importParams: RsaHashedImportParams | EcKeyImportParams,
  verifyParams: AlgorithmIdentifier | EcdsaParams,
  signature: Uint8Array<ArrayBuffer>,
  signed: Uint8Array<ArrayBuffer>,
): Promise<boolean> {
  try {
    const key = await crypto.subtle.importKey("jwk", jwk, importParams, false, ["verify"]);
    return await crypto.subtle.verify(verifyParams, key, signature, signed);
  } catch (error) {
    throw malformed(
      `attestation key is not a valid ${importParams.name} public key: ${(error as Error).message}`,
    );
  }
}

/**
 * TPM ECDSA signatures carry `r` and `s` as separate big-endian integers;
 * WebCrypto wants them concatenated, each exactly 32 bytes (IEEE P1363).
 * Returns null when a value cannot be a P-256 scalar.
 */
function toP1363(r: Uint8Array, s: Uint8Array): Uint8Array<ArrayBuffer> | null {
  const out = new Uint8Array(2 * P256_SCALAR_LENGTH);
  for (const [i, value] of [r, s].entries()) {
    let start = 0;
    while (start < value.length && value[start] === 0) start++;
    const digits = value.subarray(start);
    if (digits.length > P256_SCALAR_LENGTH) return null;
    out.set(digits, (i + 1) * P256_SCALAR_LENGTH - digits.length);
  }
  return out;
}

function exponentBytes(exponent: number): Uint8Array {
  const bytes: number[] = [];
  for (let e = exponent; e > 0; e = Math.floor(e / 256)) bytes.unshift(e % 256);
  return Uint8Array.from(bytes);
}

function base64url(bytes: Uint8Array): string {
  return bytes.toBase64({ alphabet: "base64url", omitPadding: true });
}
