/**
 * How to build each attestation variant's issuer (on the attesting node):
 * the counterpart of the validators in `registry.ts`, kept apart because
 * issuers drive a TPM with Deno's APIs while validators also run in the
 * browser. Every variant of `registry.ts` has an entry here.
 *
 * @module
 */
import type { Issuer } from "./attestation.ts";
import type { Logger } from "../log/logger.ts";
import { DUMMY_VARIANT, DummyIssuer } from "./dummy.ts";
import { UnknownVariantError } from "./registry.ts";
import { TpmIssuer } from "./tpm/issuer.ts";
import { QEMU_VTPM_VARIANT } from "./tpm/validator.ts";

/** Options for {@linkcode createIssuer}. */
export interface IssuerOptions {
  /** Receives the issuer's warnings. */
  logger: Logger;
  /** TPM connection for TPM variants (a tpm2-tools TCTI string, e.g. "swtpm:port=2321"); variant default if unset. */
  tcti?: string;
  /** Aborts creating the issuer (a TPM issuer prepares its attestation key). */
  signal?: AbortSignal;
  /** A TPM issuer's working directory's parent, this process's own (see `TpmIssuerOptions.tempDir`). */
  tempDir?: string;
}

type IssuerFactory = (options: IssuerOptions) => Promise<Issuer>;

const issuers: ReadonlyMap<string, IssuerFactory> = new Map<string, IssuerFactory>([
  [DUMMY_VARIANT, ({ logger }) => Promise.resolve(new DummyIssuer(logger))],
  [QEMU_VTPM_VARIANT, (options) => TpmIssuer.create(options)],
]);

/**
 * Builds the issuer of `variant` (a TPM issuer connects to the TPM first).
 * Throws {@linkcode UnknownVariantError}.
 */
export async function createIssuer(variant: string, options: IssuerOptions): Promise<Issuer> {
  const factory = issuers.get(variant);
  if (factory === undefined) throw new UnknownVariantError(variant);
  return await factory(options);
}
