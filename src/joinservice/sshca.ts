/**
 * The emergency SSH CA: an Ed25519 key derived from the master secret (the
 * key service hands out its 32-byte seed under {@linkcode SSH_CA_KEY_ID}),
 * which certifies joining nodes' SSH host keys so operators can trust every
 * node's host key through one `@cert-authority` line.
 *
 * Certificates follow OpenSSH's PROTOCOL.certkeys. Like the original, a host
 * certificate is valid from the time it is issued and, unless a validity is
 * given, never expires; it has serial 0 and no critical options or
 * extensions (OpenSSH defines none for host certificates).
 *
 * @module
 */
import { concatBytes } from "../bytes/concat.ts";
import { ReasonError } from "../reason_error.ts";
import { SharedLoad } from "../async/shared_load.ts";
import { type Clock, systemClock } from "../clock.ts";
import type { KeySource, SshHostCertifier } from "./dependencies.ts";
import { reject } from "./rejections.ts";

/** Key ID under which the join service asks the key service for the CA seed. */
export const SSH_CA_KEY_ID = "ca_emergency_ssh";
/** Length of the CA seed (an Ed25519 private key seed). */
export const SSH_CA_SEED_LENGTH = 32;
/** Most principals OpenSSH accepts in a certificate. */
export const MAX_SSH_PRINCIPALS = 256;

const KEY_ED25519 = "ssh-ed25519";
const KEY_ECDSA_P256 = "ecdsa-sha2-nistp256";
const CURVE_P256 = "nistp256";
const CERT_SUFFIX = "-cert-v01@openssh.com";
const HOST_CERTIFICATE = 2;
/** OpenSSH's "forever" for `valid before`. */
const NEVER_EXPIRES = 0xffff_ffff_ffff_ffffn;
/** DER prefix of an Ed25519 PKCS#8 PrivateKeyInfo (RFC 8410), followed by the 32-byte seed. */
const ED25519_PKCS8_PREFIX = Uint8Array.fromHex("302e020100300506032b657004220420");

/** Why an SSH key or certificate request was rejected. */
export type SshCaFailure =
  | "invalid-seed"
  | "malformed-key"
  | "unsupported-key"
  | "invalid-principals"
  | "invalid-validity";

/** An SSH CA input was rejected. Never carries key material of the CA. */
export class SshCaError extends ReasonError<SshCaFailure> {}

/** Options for {@linkcode SshCa.signHostCertificate}. */
export interface SignHostCertificateOptions {
  /** Time source; the certificate is valid from now. Default the system clock. */
  clock?: Clock;
  /** How long the certificate is valid; default forever (as the original). */
  validityMs?: number;
  /** The certificate's key ID (shown in sshd logs); default empty. */
  keyId?: string;
}

/** An Ed25519 SSH certificate authority. */
export class SshCa {
  /** The CA's public key in SSH wire format. */
  readonly publicKeyWire: Uint8Array;
  readonly #privateKey: CryptoKey;

  private constructor(privateKey: CryptoKey, publicKeyWire: Uint8Array) {
    this.#privateKey = privateKey;
    this.publicKeyWire = publicKeyWire;
  }

  /** The CA whose Ed25519 private key is `seed` (32 bytes). Throws {@linkcode SshCaError}. */
  static async fromSeed(seed: Uint8Array): Promise<SshCa> {
    if (seed.length !== SSH_CA_SEED_LENGTH) {
      throw new SshCaError(
        "invalid-seed",
        `SSH CA seed must be ${SSH_CA_SEED_LENGTH} bytes, got ${seed.length}`,
      );
    }
    const pkcs8 = new Uint8Array(ED25519_PKCS8_PREFIX.length + seed.length);
    pkcs8.set(ED25519_PKCS8_PREFIX);
    pkcs8.set(seed, ED25519_PKCS8_PREFIX.length);
    try {
      // Imported once extractable only to learn the public key; the kept key is not extractable.
      const exportable = await crypto.subtle.importKey("pkcs8", pkcs8, "Ed25519", true, ["sign"]);
      const { x } = await crypto.subtle.exportKey("jwk", exportable);
      const publicKey = Uint8Array.fromBase64(x!, { alphabet: "base64url" });
      const privateKey = await crypto.subtle.importKey("pkcs8", pkcs8, "Ed25519", false, ["sign"]);
      return new SshCa(privateKey, encodeSsh([sshString(KEY_ED25519), sshString(publicKey)]));
    } finally {
      pkcs8.fill(0);
    }
  }

  /** The CA public key as an authorized_keys line: `"ssh-ed25519 AAAA…\n"` (as Go's `MarshalAuthorizedKey`). */
  authorizedCaPublicKey(): string {
    return `${KEY_ED25519} ${this.publicKeyWire.toBase64()}\n`;
  }

  /**
   * Issues an OpenSSH host certificate for `hostPublicKeyWire` (an
   * `ssh-ed25519` or `ecdsa-sha2-nistp256` public key in SSH wire format,
   * i.e. the base64-decoded middle of a `.pub` file) valid for
   * `principals` (host names or addresses; at least one). Returns the
   * authorized_keys-style line `"<type>-cert-v01@openssh.com <base64>\n"`.
   * Throws {@linkcode SshCaError}.
   */
  async signHostCertificate(
    hostPublicKeyWire: Uint8Array,
    principals: readonly string[],
    options: SignHostCertificateOptions = {},
  ): Promise<string> {
    const hostKey = parseHostPublicKey(hostPublicKeyWire);
    checkHostPrincipals(principals);
    const { validityMs } = options;
    if (validityMs !== undefined && !(Number.isFinite(validityMs) && validityMs > 0)) {
      throw new SshCaError(
        "invalid-validity",
        `SSH certificate validity must be a positive duration, got ${validityMs}`,
      );
    }
    const now = (options.clock ?? systemClock).now();
    const validAfter = BigInt(Math.floor(now / 1000));
    const validBefore = validityMs === undefined
      ? NEVER_EXPIRES
      : BigInt(Math.floor((now + validityMs) / 1000));
    const certType = hostKey.type + CERT_SUFFIX;
    const signed = encodeSsh([
      sshString(certType),
      sshString(crypto.getRandomValues(new Uint8Array(32))), // nonce
      ...hostKey.fields,
      uint64(0n), // serial
      uint32(HOST_CERTIFICATE),
      sshString(options.keyId ?? ""),
      sshString(encodeSsh(principals.map((p) => sshString(p)))),
      uint64(validAfter),
      uint64(validBefore),
      sshString(new Uint8Array()), // critical options
      sshString(new Uint8Array()), // extensions
      sshString(new Uint8Array()), // reserved
      sshString(this.publicKeyWire),
    ]);
    const signature = new Uint8Array(await crypto.subtle.sign("Ed25519", this.#privateKey, signed));
    const certificate = encodeSsh([
      signed,
      sshString(encodeSsh([sshString(KEY_ED25519), sshString(signature)])),
    ]);
    return `${certType} ${certificate.toBase64()}\n`;
  }
}

/**
 * The SSH wire-format public key of an authorized_keys / `.pub` line
 * (`<type> <base64> [comment]`). Throws {@linkcode SshCaError} when the
 * line is malformed or its base64 part is not a key of the stated type.
 */
export function sshPublicKeyFromAuthorizedKey(line: string): Uint8Array<ArrayBuffer> {
  const [type, base64] = line.trim().split(/\s+/);
  let wire: Uint8Array<ArrayBuffer>;
  try {
    wire = Uint8Array.fromBase64(base64 ?? "");
  } catch {
    throw new SshCaError("malformed-key", "SSH public key line has no valid base64 key");
  }
  if (wire.length === 0) throw new SshCaError("malformed-key", "SSH public key line has no key");
  const embedded = new SshReader(wire).text();
  if (embedded !== type) {
    throw new SshCaError(
      "malformed-key",
      `SSH public key line says ${quote(type)} but its key is ${quote(embedded)}`,
    );
  }
  return wire;
}

interface HostPublicKey {
  type: string;
  /** The key's fields after its type, as they appear in a certificate. */
  fields: Uint8Array[];
}

function parseHostPublicKey(wire: Uint8Array): HostPublicKey {
  const reader = new SshReader(wire);
  const type = reader.text();
  if (type === KEY_ED25519) {
    const key = reader.bytes();
    reader.end();
    if (key.length !== 32) throw malformedKey(`ssh-ed25519 key is ${key.length} bytes, want 32`);
    return { type, fields: [sshString(key)] };
  }
  if (type === KEY_ECDSA_P256) {
    const curve = reader.text();
    const point = reader.bytes();
    reader.end();
    if (curve !== CURVE_P256) throw malformedKey(`${KEY_ECDSA_P256} key names curve ${quote(curve)}`);
    if (!isP256Point(point)) throw malformedKey(`${KEY_ECDSA_P256} key is not a point on P-256`);
    return { type, fields: [sshString(curve), sshString(point)] };
  }
  throw new SshCaError(
    "unsupported-key",
    `unsupported SSH host key type ${quote(type)} (want ${KEY_ED25519} or ${KEY_ECDSA_P256})`,
  );
}

const P256_P = 0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn;
const P256_B = 0x5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604bn;

/**
 * Whether `point` is an uncompressed P-256 point (0x04 ‖ x ‖ y) on the curve
 * y² = x³ − 3x + b. Checked here because WebCrypto's raw import does not.
 */
function isP256Point(point: Uint8Array): boolean {
  if (point.length !== 65 || point[0] !== 0x04) return false;
  const x = BigInt(`0x${point.subarray(1, 33).toHex()}`);
  const y = BigInt(`0x${point.subarray(33).toHex()}`);
  if (x >= P256_P || y >= P256_P) return false;
  const mod = (n: bigint) => ((n % P256_P) + P256_P) % P256_P;
  return mod(y * y) === mod(x * x * x - 3n * x + P256_B);
}

/**
 * Checks the principals of a host certificate: at least one, at most
 * {@linkcode MAX_SSH_PRINCIPALS}, none empty, and none with whitespace,
 * control characters or OpenSSH pattern characters (`*`, `?`, `!`, `,`):
 * OpenSSH matches host principals as patterns, so `*` would make the
 * certificate valid for every host. Throws {@linkcode SshCaError}
 * ("invalid-principals").
 */
export function checkHostPrincipals(principals: readonly string[]): void {
  if (principals.length === 0) {
    // A certificate without principals is valid for every host.
    throw new SshCaError("invalid-principals", "an SSH host certificate needs at least one principal");
  }
  if (principals.length > MAX_SSH_PRINCIPALS) {
    throw new SshCaError(
      "invalid-principals",
      `an SSH host certificate may have at most ${MAX_SSH_PRINCIPALS} principals, got ${principals.length}`,
    );
  }
  for (const principal of principals) {
    if (principal === "" || /[\s\p{Cc}]/u.test(principal)) {
      throw new SshCaError(
        "invalid-principals",
        `SSH host certificate principal ${
          quote(principal)
        } is empty or contains whitespace or control characters`,
      );
    }
    const pattern = /[*?!,]/.exec(principal);
    if (pattern) {
      throw new SshCaError(
        "invalid-principals",
        `SSH host certificate principal ${quote(principal)} contains the pattern character ${
          quote(pattern[0])
        }; principals must name one host`,
      );
    }
  }
}

function malformedKey(why: string): SshCaError {
  return new SshCaError("malformed-key", `SSH host public key is malformed: ${why}`);
}

/** A JSON-quoted, shortened rendering of an untrusted string for error messages. */
function quote(value: string | undefined): string {
  const text = value ?? "";
  return JSON.stringify(text.length > 64 ? `${text.slice(0, 64)}…` : text);
}

// --- SSH wire format (RFC 4251 §5) ---

function encodeSsh(parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  return concatBytes(...parts);
}

function uint32(value: number): Uint8Array {
  const bytes = new Uint8Array(4);
  new DataView(bytes.buffer).setUint32(0, value);
  return bytes;
}

function uint64(value: bigint): Uint8Array {
  const bytes = new Uint8Array(8);
  new DataView(bytes.buffer).setBigUint64(0, value);
  return bytes;
}

function sshString(value: string | Uint8Array): Uint8Array {
  const bytes = typeof value === "string" ? new TextEncoder().encode(value) : value;
  return encodeSsh([uint32(bytes.length), bytes]);
}

/** Reads SSH wire-format fields; every overrun is a "malformed key" error. */
class SshReader {
  #offset = 0;
  readonly #data: Uint8Array;

  constructor(data: Uint8Array) {
    this.#data = data;
  }

  bytes(): Uint8Array {
    if (this.#data.length - this.#offset < 4) throw malformedKey("truncated length field");
    const length = new DataView(this.#data.buffer, this.#data.byteOffset + this.#offset, 4).getUint32(0);
    this.#offset += 4;
    if (this.#data.length - this.#offset < length) throw malformedKey("field longer than the key");
    const value = this.#data.subarray(this.#offset, this.#offset + length);
    this.#offset += length;
    return value;
  }

  text(): string {
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(this.bytes());
    } catch (error) {
      if (error instanceof SshCaError) throw error;
      throw malformedKey("key type is not UTF-8");
    }
  }

  end(): void {
    if (this.#offset !== this.#data.length) throw malformedKey("trailing data after the key");
  }
}

// --- the join service's certifier ---

/**
 * The join service's {@linkcode SshHostCertifier}: the CA whose seed the key
 * service derives under {@linkcode SSH_CA_KEY_ID}, fetched once for all
 * requests (again after a failure).
 */
export function sshHostCertifier(options: { keys: KeySource; clock: Clock }): SshHostCertifier {
  const ca = new SharedLoad(async () =>
    await SshCa.fromSeed(await options.keys.getDataKey(SSH_CA_KEY_ID, SSH_CA_SEED_LENGTH, {}))
  );
  const encoder = new TextEncoder();
  return {
    async certify(hostPublicKey, principals, { signal }) {
      const sshCa = await ca.get({ signal });
      try {
        const certificate = await sshCa.signHostCertificate(hostPublicKey, principals, {
          clock: options.clock,
        });
        return {
          hostCertificate: encoder.encode(certificate),
          caPublicKey: encoder.encode(sshCa.authorizedCaPublicKey()),
        };
      } catch (error) {
        if (!(error instanceof SshCaError)) throw error;
        throw reject("ssh-host-key-rejected", `SSH host key: ${error.message}`);
      }
    },
  };
}
