/**
 * The attestation variants by name and how to build each variant's
 * validator. There is no default variant; every caller names one.
 *
 * This module and the validators it builds use WebCrypto only (no Deno
 * APIs): the browser console bundles it to verify evidence in the page. The
 * issuers, which drive a TPM, are in `issuers.ts`.
 *
 * Later variants (SEV-SNP, TDX) plug in by adding an entry here and one in
 * `issuers.ts`.
 *
 * @module
 */
import type { Validator } from "./attestation.ts";
import type { AttestationConfig } from "./config.ts";
import type { Logger } from "../log/logger.ts";
import { DUMMY_VARIANT, DummyValidator } from "./dummy.ts";
import { QEMU_VTPM_VARIANT, TpmValidator } from "./tpm/validator.ts";

/** Options for {@linkcode createValidator}. */
export interface ValidatorOptions {
  /** Receives the validator's warnings (e.g. insecure trust modes). */
  logger: Logger;
}

type ValidatorFactory = (config: AttestationConfig, options: ValidatorOptions) => Validator;

const validators: ReadonlyMap<string, ValidatorFactory> = new Map<string, ValidatorFactory>([
  [DUMMY_VARIANT, (_config, { logger }) => new DummyValidator(logger)],
  [
    QEMU_VTPM_VARIANT,
    ({ measurements, akTrust }, { logger }) => new TpmValidator({ measurements, akTrust, logger }),
  ],
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
  return [...validators.keys()].sort();
}

/**
 * Builds the validator for `config.variant` with the config's measurements
 * and AK trust. Throws {@linkcode UnknownVariantError}.
 */
export function createValidator(config: AttestationConfig, options: ValidatorOptions): Validator {
  const factory = validators.get(config.variant);
  if (factory === undefined) throw new UnknownVariantError(config.variant);
  return factory(config, options);
}
