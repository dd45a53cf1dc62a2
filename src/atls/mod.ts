/**
 * Application-layer attested exchange (docs/attested-exchange.md): nonces,
 * report data, HPKE sealing, and the verifier's and attester's halves.
 *
 * @module
 */
export * from "./attester.ts";
export * from "./errors.ts";
export * from "./hpke.ts";
export * from "./nonce.ts";
export * from "./reportdata.ts";
export * from "./verifier.ts";
