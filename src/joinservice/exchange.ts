/**
 * The join service's side of the attested exchange: challenge nonces under a
 * key all replicas share (derived from the master secret through the key
 * service), the cheap checks of a request (structure, nonce), the
 * validation of its evidence, and sealing.
 *
 * The nonce key is fetched on first use and kept; while the key service is
 * unreachable, challenges and requests fail with "key-service-unavailable"
 * and a later call tries again, so the service recovers on its own.
 *
 * @module
 */
import { AttestationError } from "../attestation/attestation.ts";
import { SharedLoad } from "../async/shared_load.ts";
import { ExchangeError, exchangeRejection } from "../atls/errors.ts";
import { ChallengeNonces, NONCE_KEY_ID, NONCE_KEY_LENGTH } from "../atls/nonce.ts";
import { admitAttestedRequest, sealResponse, validateAttestedRequest } from "../atls/verifier.ts";
import type { Clock } from "../clock.ts";
import { asRejection, type Rejection } from "../rpc/rejection.ts";
import type { AttestedExchange, KeySource } from "./dependencies.ts";
import { reject } from "./rejections.ts";

/** Options for {@linkcode createAttestedExchange}. */
export interface AttestedExchangeOptions {
  /** Source of the nonce MAC key. */
  keys: KeySource;
  /** Time source for nonces and the failure hold. */
  clock: Clock;
  /** Nonce lifetime; default that of {@linkcode ChallengeNonces}. */
  nonceLifetimeMs?: number;
}

/** How long a failed nonce-key fetch is answered from memory before the next try. */
const FAILURE_HOLD_MS = 250;

/** Builds the {@linkcode AttestedExchange} the join service uses. */
export function createAttestedExchange(options: AttestedExchangeOptions): AttestedExchange {
  // The key service client's own deadline bounds the fetch. A failure is kept for a moment, so
  // unauthenticated challenges during an outage do not each hit the key service.
  const nonces = new SharedLoad(async () => {
    try {
      const key = await options.keys.getDataKey(NONCE_KEY_ID, NONCE_KEY_LENGTH, {});
      return new ChallengeNonces({ key, clock: options.clock, lifetimeMs: options.nonceLifetimeMs });
    } catch (error) {
      // Challenges are unauthenticated: the caller learns only that the key service is unavailable.
      const unavailable = asRejection(error).reason === "key-service-unavailable";
      throw reject(
        unavailable ? "key-service-unavailable" : "internal",
        unavailable ? "nonce key unavailable from the key service; retry later" : "internal error",
        { cause: error },
      );
    }
  }, { failureHoldMs: FAILURE_HOLD_MS, clock: options.clock });

  return {
    async challenge({ signal }) {
      return await (await nonces.get({ signal })).issue();
    },

    async precheck({ attestation, purpose, signal }) {
      const challengeNonces = await nonces.get({ signal });
      const admitted = await exchangeStep(() =>
        admitAttestedRequest({ attestation, nonces: challengeNonces, signal })
      );
      return {
        async verify({ requestDigest, validator, signal }) {
          const verified = await exchangeStep(() =>
            validateAttestedRequest(admitted, { purpose, requestDigest, validator, signal })
          );
          return {
            verification: verified.verification,
            seal: (plaintext) => exchangeStep(() => sealResponse({ verified, purpose, plaintext })),
          };
        },
      };
    },
  };
}

/**
 * Runs a step of the exchange: its failures become rejections naming their
 * reason; an unexpected error (a bug in a validator) is "verifier-error",
 * whose node sees only "internal error".
 */
async function exchangeStep<T>(step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    if (error instanceof ExchangeError || error instanceof AttestationError) throw exchangeRejection(error);
    throw unexpected(error);
  }
}

function unexpected(error: unknown): Rejection {
  const rejection = asRejection(error);
  if (rejection.reason !== "internal") return rejection; // canceled, deadline
  return reject("verifier-error", "internal error", { cause: error });
}
