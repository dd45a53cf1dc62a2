/**
 * The join service's side of the attested exchange: challenge nonces under a
 * key all replicas share (derived from the master secret through the key
 * service), verification against the validator in force, and sealing.
 *
 * The nonce key is fetched on first use and cached; while the key service is
 * unreachable, challenges and verifications fail with Unavailable and the
 * next call tries again, so the service recovers on its own.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";
import type { Validator } from "../attestation/attestation.ts";
import { ChallengeNonces, NONCE_KEY_ID, NONCE_KEY_LENGTH } from "../atls/nonce.ts";
import { ExchangeError, toConnectError } from "../atls/errors.ts";
import { sealResponse, verifyAttestedRequest } from "../atls/verifier.ts";
import type { Clock } from "../clock.ts";
import { SharedLoad } from "../async/shared_load.ts";
import type { AttestedExchange, KeySource, VerifiedRequest } from "./server.ts";

/** Options for {@linkcode createAttestedExchange}. */
export interface AttestedExchangeOptions {
  /** Source of the nonce MAC key. */
  keys: KeySource;
  /** The validator in force (the attestation config watcher). */
  validators: { current(): { validator: Validator } };
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
    } catch (e) {
      // Challenges are unauthenticated: the caller learns only that the key service is unavailable.
      const code = ConnectError.from(e).code === Code.Unavailable ? Code.Unavailable : Code.Internal;
      throw new ConnectError(
        "nonce key unavailable from the key service; retry later",
        code,
        undefined,
        undefined,
        e,
      );
    }
  }, { failureHoldMs: FAILURE_HOLD_MS, clock: options.clock });

  return {
    async challenge({ signal }) {
      return await (await nonces.get({ signal })).issue();
    },

    async verify({ attestation, purpose, requestDigest, signal }): Promise<VerifiedRequest> {
      const challengeNonces = await nonces.get({ signal });
      try {
        const verified = await verifyAttestedRequest({
          attestation,
          purpose,
          requestDigest,
          validator: options.validators.current().validator,
          nonces: challengeNonces,
          signal,
        });
        return {
          verification: verified.verification,
          seal: (plaintext) => sealResponse({ verified, purpose, plaintext: new Uint8Array(plaintext) }),
        };
      } catch (e) {
        let error = toConnectError(e);
        if (e instanceof ExchangeError) {
          // The attestation key that was checked, when the validator got that far: audit names it.
          Object.assign(error, { reason: e.reason, keyDigest: (e as { keyDigest?: string }).keyDigest });
        } else if (error.code === Code.Internal) {
          // A bug in a validator: the node sees "internal error", the service logs the cause.
          error = new ConnectError(error.rawMessage, Code.Internal, undefined, undefined, e);
          Object.assign(error, { reason: "verifier-error" });
        }
        throw error;
      }
    },
  };
}
