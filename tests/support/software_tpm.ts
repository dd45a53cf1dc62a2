/**
 * `qemu-vtpm` evidence forged in software: a WebCrypto P-256 key that
 * declares the TPM attributes (fixedTpm, restricted, sign) itself and signs
 * a self-made quote over any report data and any PCR values. No TPM is
 * involved.
 *
 * This is what the validator's AK allow-list exists for (see
 * `src/attestation/tpm/validator.ts`): such evidence passes only where the
 * key's digest is listed, or under `trustAnyKey`. The forged-evidence tests
 * show it; the join service load benchmark lists the key, so it can make a
 * joining node's evidence in microseconds instead of waiting for swtpm.
 *
 * ```ts
 * const issuer = await SoftwareTpmIssuer.create({ pcrs });
 * const document = await issuer.issue(reportData); // allow-list issuer.keyDigest to accept it
 * ```
 *
 * @module
 */
import type { Issuer } from "../../src/attestation/attestation.ts";
import { encodeDocument, pcrDigest } from "../../src/attestation/tpm/document.ts";
import {
  ObjectAttribute,
  parsePublic,
  publicKeyDigest,
  TPM_ECC_NIST_P256,
  TPM_GENERATED_VALUE,
  TPM_ST_ATTEST_QUOTE,
  TpmAlg,
} from "../../src/attestation/tpm/structures.ts";
import { QEMU_VTPM_VARIANT } from "../../src/attestation/tpm/validator.ts";

/** Big-endian TPM marshalling, just enough for the three structures of a quote. */
export class Marshaller {
  readonly #bytes: number[] = [];
  u8(value: number): this {
    this.#bytes.push(value & 0xff);
    return this;
  }
  u16(value: number): this {
    return this.u8(value >>> 8).u8(value);
  }
  u32(value: number): this {
    return this.u16(value >>> 16).u16(value);
  }
  u64(value: number): this {
    return this.u32(Math.floor(value / 2 ** 32)).u32(value >>> 0);
  }
  raw(bytes: Uint8Array): this {
    this.#bytes.push(...bytes);
    return this;
  }
  /** A `TPM2B_*`: u16 size, then the bytes. */
  sized(bytes: Uint8Array): this {
    return this.u16(bytes.length).raw(bytes);
  }
  done(): Uint8Array<ArrayBuffer> {
    return Uint8Array.from(this.#bytes);
  }
}

/** Options for {@linkcode SoftwareTpmIssuer.create}. */
export interface SoftwareTpmIssuerOptions {
  /** The PCR values the evidence claims (SHA-256 bank, indices 0–15). */
  pcrs: ReadonlyMap<number, Uint8Array>;
  /**
   * The banks (hash algorithms) the quote's PCR selection names, each with
   * the claimed PCRs; default the SHA-256 bank alone, as a real quote of
   * this variant. Another bank makes evidence a validator must refuse.
   */
  banks?: readonly number[];
}

const ECDSA_P256 = { name: "ECDSA", namedCurve: "P-256" } as const;
const ECDSA_SHA256 = { name: "ECDSA", hash: "SHA-256" } as const;

/** Issues forged `qemu-vtpm` evidence with one software attestation key. */
export class SoftwareTpmIssuer implements Issuer {
  readonly variant: string = QEMU_VTPM_VARIANT;
  /** The key's digest, as `akTrust.allowedKeyDigests` lists it. */
  readonly keyDigest: string;
  /** The claimed PCR values. */
  readonly pcrs: ReadonlyMap<number, Uint8Array>;
  readonly #privateKey: CryptoKey;
  readonly #akPublic: Uint8Array;
  readonly #pcrDigest: Uint8Array;
  readonly #banks: readonly number[];

  private constructor(
    privateKey: CryptoKey,
    akPublic: Uint8Array,
    keyDigest: string,
    pcrs: ReadonlyMap<number, Uint8Array>,
    digest: Uint8Array,
    banks: readonly number[],
  ) {
    this.#privateKey = privateKey;
    this.#akPublic = akPublic;
    this.keyDigest = keyDigest;
    this.pcrs = pcrs;
    this.#pcrDigest = digest;
    this.#banks = banks;
  }

  /** A fresh software attestation key claiming `options.pcrs`. */
  static async create(options: SoftwareTpmIssuerOptions): Promise<SoftwareTpmIssuer> {
    if ([...options.pcrs.keys()].some((index) => index > 15)) throw new RangeError("PCRs 0–15 only");
    const keys = await crypto.subtle.generateKey(ECDSA_P256, true, ["sign"]);
    const jwk = await crypto.subtle.exportKey("jwk", keys.publicKey);
    const coordinate = (value: string | undefined) =>
      Uint8Array.fromBase64(value!, { alphabet: "base64url" });
    // TPMT_PUBLIC of an ECC key whose attributes claim it is a restricted signing key fixed to a TPM.
    const tpmtPublic = new Marshaller()
      .u16(TpmAlg.ECC)
      .u16(TpmAlg.SHA256) // nameAlg
      .u32(ObjectAttribute.fixedTpm | ObjectAttribute.restricted | ObjectAttribute.sign)
      .sized(new Uint8Array()) // authPolicy
      .u16(TpmAlg.NULL) // symmetric
      .u16(TpmAlg.ECDSA).u16(TpmAlg.SHA256) // scheme
      .u16(TPM_ECC_NIST_P256)
      .u16(TpmAlg.NULL) // kdf
      .sized(coordinate(jwk.x))
      .sized(coordinate(jwk.y))
      .done();
    const akPublic = new Marshaller().sized(tpmtPublic).done();
    const keyDigest = await publicKeyDigest(parsePublic(akPublic));
    return new SoftwareTpmIssuer(
      keys.privateKey,
      akPublic,
      keyDigest,
      options.pcrs,
      await pcrDigest(options.pcrs),
      options.banks ?? [TpmAlg.SHA256],
    );
  }

  /** A document bound to `reportData` claiming {@linkcode pcrs}, signed by the software key. */
  async issue(reportData: Uint8Array): Promise<Uint8Array> {
    // TPMS_ATTEST: the magic a real TPM would only put in front of its own quotes, the
    // verifier's report data, and a digest over the claimed PCRs of the SHA-256 bank.
    const selected = [...this.pcrs.keys()].reduce((bits, index) => bits | (1 << index), 0);
    const selection = new Marshaller().u32(this.#banks.length);
    for (const bank of this.#banks) {
      selection.u16(bank).u8(3).raw(new Uint8Array([selected & 0xff, selected >>> 8, 0x00]));
    }
    const quote = new Marshaller()
      .u32(TPM_GENERATED_VALUE)
      .u16(TPM_ST_ATTEST_QUOTE)
      .sized(new Uint8Array(34)) // qualifiedSigner
      .sized(reportData) // extraData
      .u64(1234).u32(1).u32(0).u8(1) // clockInfo
      .u64(0x20240101) // firmwareVersion
      .raw(selection.done())
      .sized(this.#pcrDigest)
      .done();
    const p1363 = new Uint8Array(await crypto.subtle.sign(ECDSA_SHA256, this.#privateKey, quote));
    const signature = new Marshaller()
      .u16(TpmAlg.ECDSA)
      .u16(TpmAlg.SHA256)
      .sized(p1363.subarray(0, 32))
      .sized(p1363.subarray(32))
      .done();
    return encodeDocument({
      variant: QEMU_VTPM_VARIANT,
      akPublic: this.#akPublic,
      quote,
      signature,
      pcrs: this.pcrs,
    });
  }
}
