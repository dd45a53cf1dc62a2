/**
 * SHA-256, HMAC-SHA256, HKDF-SHA256 and AES-256-GCM encryption for the
 * services' per-request paths, done synchronously by the runtime's
 * `node:crypto` where there is one (Deno), and by WebCrypto otherwise.
 *
 * Why: every WebCrypto call is an operation on the runtime's thread pool,
 * and going there and back cost a join ticket's small operations (digests
 * of a few hundred bytes, the nonce MAC, HPKE's key schedule) 20–35 µs of
 * CPU each, more than the operations themselves (3–10 µs synchronously),
 * and on a busy machine every such hop is a point where the event loop can
 * lose its core. The signatures (ECDSA, tens of times more work) stay on
 * WebCrypto's pool, where they can use another core.
 *
 * Why both: the browser console bundles some of the modules that use these
 * (the attestation validator, the report data), and a browser has no
 * `node:crypto`; `process.getBuiltinModule` finds it without an import the
 * bundler would have to resolve. Both give the same bytes
 * (`tests/crypto/primitives_test.ts`).
 *
 * @module
 */
import type * as NodeCrypto from "node:crypto";

/** The primitives, each resolving to fresh bytes the caller owns. */
export interface CryptoPrimitives {
  /** What computes them. */
  readonly source: "node:crypto" | "WebCrypto";
  /** SHA-256 of `data`. */
  sha256(data: Uint8Array): Promise<Uint8Array<ArrayBuffer>>;
  /** HMAC-SHA256 of `data` under `key`. */
  hmacSha256(key: Uint8Array, data: Uint8Array): Promise<Uint8Array<ArrayBuffer>>;
  /** HKDF-SHA256 (RFC 5869: extract with `salt`, expand with `info`) of `ikm`, `length` bytes. */
  hkdfSha256(
    ikm: Uint8Array,
    salt: Uint8Array,
    info: Uint8Array,
    length: number,
  ): Promise<Uint8Array<ArrayBuffer>>;
  /** AES-256-GCM encryption with a 12-byte `iv`: the ciphertext followed by the 16-byte tag, as WebCrypto gives it. */
  aes256GcmEncrypt(
    key: Uint8Array,
    iv: Uint8Array,
    additionalData: Uint8Array,
    plaintext: Uint8Array,
  ): Promise<Uint8Array<ArrayBuffer>>;
}

/**
 * The primitives over `nodeCrypto`, or over WebCrypto when it is undefined
 * (exported so that tests compare the two).
 */
export function cryptoPrimitives(nodeCrypto: typeof NodeCrypto | undefined): CryptoPrimitives {
  if (!nodeCrypto) return webCryptoPrimitives;
  const sync = <T extends unknown[]>(fn: (...args: T) => Uint8Array<ArrayBuffer>) => (...args: T) =>
    Promise.try(() => fn(...args));
  return {
    source: "node:crypto",
    sha256: sync((data) => fresh(nodeCrypto.createHash("sha256").update(data).digest())),
    hmacSha256: sync((key, data) => fresh(nodeCrypto.createHmac("sha256", key).update(data).digest())),
    hkdfSha256: (ikm, salt, info, length) =>
      info.length > NODE_HKDF_MAX_INFO_BYTES
        ? webCryptoPrimitives.hkdfSha256(ikm, salt, info, length)
        : Promise.try(() => new Uint8Array(nodeCrypto.hkdfSync("sha256", ikm, salt, info, length))),
    aes256GcmEncrypt: sync((key, iv, additionalData, plaintext) => {
      const cipher = nodeCrypto.createCipheriv("aes-256-gcm", key, iv);
      cipher.setAAD(additionalData);
      const head = cipher.update(plaintext);
      const tail = cipher.final();
      const tag = cipher.getAuthTag();
      const out = new Uint8Array(head.length + tail.length + tag.length);
      out.set(head);
      out.set(tail, head.length);
      out.set(tag, head.length + tail.length);
      return out;
    }),
  };
}

/**
 * The most `info` `node:crypto`'s `hkdfSync` takes; RFC 5869 and WebCrypto
 * have no such bound, and a key service key ID can be longer.
 */
const NODE_HKDF_MAX_INFO_BYTES = 1024;

const webCryptoPrimitives: CryptoPrimitives = {
  source: "WebCrypto",
  async sha256(data) {
    return new Uint8Array(await crypto.subtle.digest("SHA-256", owned(data)));
  },
  async hmacSha256(key, data) {
    const hmacKey = await crypto.subtle.importKey(
      "raw",
      owned(key),
      { name: "HMAC", hash: "SHA-256" },
      false,
      [
        "sign",
      ],
    );
    return new Uint8Array(await crypto.subtle.sign("HMAC", hmacKey, owned(data)));
  },
  async hkdfSha256(ikm, salt, info, length) {
    const key = await crypto.subtle.importKey("raw", owned(ikm), "HKDF", false, ["deriveBits"]);
    return new Uint8Array(
      await crypto.subtle.deriveBits(
        { name: "HKDF", hash: "SHA-256", salt: owned(salt), info: owned(info) },
        key,
        length * 8,
      ),
    );
  },
  async aes256GcmEncrypt(key, iv, additionalData, plaintext) {
    const aesKey = await crypto.subtle.importKey("raw", owned(key), "AES-GCM", false, ["encrypt"]);
    return new Uint8Array(
      await crypto.subtle.encrypt(
        { name: "AES-GCM", iv: owned(iv), additionalData: owned(additionalData) },
        aesKey,
        owned(plaintext),
      ),
    );
  },
};

/**
 * The primitives of this runtime: `node:crypto`'s when it has them, WebCrypto's otherwise. Declared after
 * {@linkcode webCryptoPrimitives}: a bundle turns `const` into `var`, so reading it earlier gives undefined
 * where a browser needs it, not an error.
 */
export const primitives: CryptoPrimitives = cryptoPrimitives(builtinNodeCrypto());

/**
 * Whether `a` and `b` hold the same bytes, in a time that depends only on
 * their length (for comparing a MAC with the one expected: how many leading
 * bytes match must not show).
 */
export function equalInConstantTime(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let difference = 0;
  for (let i = 0; i < a.length; i++) difference |= a[i] ^ b[i];
  return difference === 0;
}

/** `node:crypto` if the runtime has it built in (Deno does; a browser has no `process`). */
function builtinNodeCrypto(): typeof NodeCrypto | undefined {
  const process = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  return process?.getBuiltinModule?.("node:crypto") as typeof NodeCrypto | undefined;
}

/** A Buffer's bytes as a plain Uint8Array of their own (a Buffer may share a pooled ArrayBuffer). */
function fresh(buffer: Uint8Array): Uint8Array<ArrayBuffer> {
  return new Uint8Array(buffer);
}

/** `bytes` in an ArrayBuffer of their own, as WebCrypto wants them (never shared or resizable). */
function owned(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  return bytes.buffer instanceof ArrayBuffer ? bytes as Uint8Array<ArrayBuffer> : new Uint8Array(bytes);
}
