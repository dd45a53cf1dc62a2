/**
 * The attestation variants by name: how to build each variant's issuer and
 * validator. There is no default variant; every caller names one.
 *
 * Later variants (SEV-SNP, TDX) plug in by adding an entry here.
 *
 * @module
 */
import type { Issuer, Validator } from "./attestation.ts";
import type { AttestationConfig } from "./config.ts";
import type { Logger } from "../log/logger.ts";
import { DUMMY_VARIANT, DummyIssuer, DummyValidator } from "./dummy.ts";
import { QEMU_VTPM_VARIANT, TpmValidator } from "./tpm/validator.ts";
import { TpmIssuer } from "./tpm/issuer.ts";

/** Options for {@linkcode createValidator}. */
export interface ValidatorOptions {
  /** Receives the validator's warnings (e.g. insecure trust modes). */
  logger: Logger;
}

/** Options for {@linkcode createIssuer}. */
export interface IssuerOptions {
  /** Receives the issuer's warnings. */
  logger: Logger;
  /** TPM connection for TPM variants (a tpm2-tools TCTI string, e.g. "swtpm:port=2321"); variant default if unset. */
  tcti?: string;
  /** Aborts creating the issuer (a TPM issuer prepares its attestation key). */
  signal?: AbortSignal;
}

interface Variant {
  createValidator(config: AttestationConfig, options: ValidatorOptions): Validator;
  createIssuer(options: IssuerOptions): Promise<Issuer>;
}

const variants: ReadonlyMap<string, Variant> = new Map<string, Variant>([
  [DUMMY_VARIANT, {
    createValidator: (_config, { logger }) => new DummyValidator(logger),
    createIssuer: ({ logger }) => Promise.resolve(new DummyIssuer(logger)),
  }],
  [QEMU_VTPM_VARIANT, {
    createValidator: ({ measurements, akTrust }, { logger }) =>
      new TpmValidator({ measurements, akTrust, logger }),
    createIssuer: ({ tcti, logger, signal }) => TpmIssuer.create({ tcti, logger, signal }),
  }],
]);

/** An attestation variant name that is not in the registry. */
export class UnknownVariantError extends Error {
  /** The unknown name. */
  readonly variant: string;

  /** An error naming the unknown `variant` and the known ones. */
  constructor(variant: string) {
    super(`unknown attestation variant ${JSON.stringify(variant)}; known: ${knownVariants().join(", ")}`);
    this.name = "UnknownVariantError";
    this.variant = variant;
  }
}

/** The registered variant names, sorted. */
export function knownVariants(): string[] {
  return [...variants.keys()].sort();
}

function lookup(name: string): Variant {
  const variant = variants.get(name);
  if (variant === undefined) throw new UnknownVariantError(name);
  return variant;
}

/**
 * Builds the validator for `config.variant` with the config's measurements
 * and AK trust. Throws {@linkcode UnknownVariantError}.
 */
export function createValidator(config: AttestationConfig, options: ValidatorOptions): Validator {
  return lookup(config.variant).createValidator(config, options);
}

/**
 * Builds the issuer of `variant` (a TPM issuer connects to the TPM first).
 * Throws {@linkcode UnknownVariantError}.
 */
export async function createIssuer(variant: string, options: IssuerOptions): Promise<Issuer> {
  return await lookup(variant).createIssuer(options);
}
