/**
 * The crypto floor of one join ticket (`tests/bench/join_load.ts`): the CPU
 * time its unavoidable crypto takes on one core, one operation at a time,
 * with the service's own functions (`seal`, the nonces, the digests).
 *
 * It runs in a process of its own ({@linkcode measureCryptoFloor}), held to
 * the first core (`taskset`):
 *
 * - CPU time is counted for a whole process, and the benchmark's own
 *   process, holding thousands of prepared requests and 32 connections,
 *   spent a level's garbage collection and housekeeping during the next
 *   level's floor;
 * - WebCrypto hands each operation to a thread of the runtime's pool; with
 *   the other core idle, that thread ran there, and every hop between the
 *   cores cost CPU time too (ECDSA verify 0.8–0.9 ms instead of 0.6–0.65).
 *
 * Measured in the benchmark's process, floors of 2.2 to 3.8 ms came out of
 * one run on a quiet machine. Each part is timed {@linkcode REPEATS} times
 * and its median kept.
 *
 * ```sh
 * deno run -P=tests --no-prompt tests/bench/crypto_floor.ts   # prints the floor as JSON
 * ```
 *
 * @module
 */
import process from "node:process";
import { generateKeyPair, seal } from "../../src/atls/hpke.ts";
import { ChallengeNonces, NONCE_LENGTH } from "../../src/atls/nonce.ts";
import { computeReportData, joinRequestDigest } from "../../src/atls/reportdata.ts";
import { systemClock } from "../../src/clock.ts";

/** One ticket's crypto: milliseconds of CPU per part, and their sum. */
export interface CryptoFloor {
  parts: Record<string, number>;
  totalMs: number;
}

const ECDSA = { name: "ECDSA", namedCurve: "P-256" } as const;
const ECDSA_SHA256 = { name: "ECDSA", hash: "SHA-256" } as const;
/** Runs of each operation per timing. */
const RUNS = 150;
/** Timings of each part; the median is kept. */
const REPEATS = 3;

/**
 * Measures the floor in a new process on the first core (this module run
 * as a script, with the benchmarks' permission set) and resolves to it.
 */
export async function measureCryptoFloor(): Promise<CryptoFloor> {
  const output = await new Deno.Command("taskset", {
    args: [
      "--cpu-list",
      "0",
      Deno.execPath(),
      "run",
      "-P=tests",
      "--no-prompt",
      new URL(import.meta.url).pathname,
    ],
    cwd: new URL("../..", import.meta.url).pathname,
    stdin: "null",
  }).output();
  if (!output.success) {
    throw new Error(`crypto floor: exited ${output.code}: ${new TextDecoder().decode(output.stderr)}`);
  }
  return JSON.parse(new TextDecoder().decode(output.stdout));
}

/**
 * Median CPU time of `fn`, in ms per run: {@linkcode REPEATS} timings of
 * {@linkcode RUNS} runs after a warm-up, each this process's CPU time (all
 * threads: WebCrypto's work runs on the runtime's pool), not the wall time,
 * which counts the waits for a core too.
 */
async function time(fn: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 20; i++) await fn();
  const timings: number[] = [];
  for (let repeat = 0; repeat < REPEATS; repeat++) {
    const start = process.cpuUsage();
    for (let i = 0; i < RUNS; i++) await fn();
    const { user, system } = process.cpuUsage(start);
    timings.push((user + system) / 1000 / RUNS);
  }
  return timings.sort((a, b) => a - b)[REPEATS >> 1];
}

/**
 * The crypto one ticket cannot do without, one operation at a time: verify
 * the quote's ECDSA signature and the CSR's, sign the kubelet certificate,
 * check the nonce MAC, hash the request and report data, seal the ticket
 * (X25519 HPKE).
 */
async function cryptoFloor(): Promise<CryptoFloor> {
  const ak = await crypto.subtle.generateKey(ECDSA, true, ["sign", "verify"]) as CryptoKeyPair;
  // The service imports each request's public key (the quote's as a JWK, the CSR's as SPKI), then
  // verifies. Verifying with a generated pair's own public key cost about twice that in Deno 2.9.6 (0.6
  // against 0.35 ms), which made an earlier floor about 1.35 times the service's real crypto.
  const akJwk = await crypto.subtle.exportKey("jwk", ak.publicKey);
  const akSpki = await crypto.subtle.exportKey("spki", ak.publicKey);
  const quote = crypto.getRandomValues(new Uint8Array(145));
  const quoteSignature = await crypto.subtle.sign(ECDSA_SHA256, ak.privateKey, quote);
  const csr = crypto.getRandomValues(new Uint8Array(300));
  const csrSignature = await crypto.subtle.sign(ECDSA_SHA256, ak.privateKey, csr);
  const tbs = crypto.getRandomValues(new Uint8Array(450));
  const nonces = new ChallengeNonces({ key: new Uint8Array(32), clock: systemClock, maxTracked: 1_000_000 });
  const issued = await Promise.all(Array.from({ length: 20 + REPEATS * RUNS }, () => nonces.issue()));
  let nextNonce = 0;
  const recipient = await generateKeyPair();
  const ticket = crypto.getRandomValues(new Uint8Array(3 * 1024));
  const nonceBytes = crypto.getRandomValues(new Uint8Array(NONCE_LENGTH));
  const fields = {
    diskUuid: crypto.randomUUID(),
    certificateRequest: csr,
    isControlPlane: false,
    hostPublicKey: new Uint8Array(),
    hostCertificatePrincipals: [],
  };
  const parts: Record<string, number> = {
    "ECDSA P-256 verify (quote signature; JWK imported)": await time(async () => {
      const key = await crypto.subtle.importKey("jwk", akJwk, ECDSA, false, ["verify"]);
      return crypto.subtle.verify(ECDSA_SHA256, key, quoteSignature, quote);
    }),
    "ECDSA P-256 verify (CSR self-signature; SPKI imported)": await time(async () => {
      const key = await crypto.subtle.importKey("spki", akSpki, ECDSA, false, ["verify"]);
      return crypto.subtle.verify(ECDSA_SHA256, key, csrSignature, csr);
    }),
    "ECDSA P-256 sign (kubelet certificate)": await time(
      () => crypto.subtle.sign(ECDSA_SHA256, ak.privateKey, tbs),
    ),
    // Issued beforehand: the load fetches its challenges before the timed window, as the service's issuing
    // is GetChallenge's, not the ticket's.
    "nonce HMAC check": await time(() => nonces.consume(issued[nextNonce++].nonce)),
    "request digest + report data (SHA-256)": await time(async () => {
      const requestDigest = await joinRequestDigest(fields);
      await computeReportData({
        purpose: "join",
        nonce: nonceBytes,
        publicKey: recipient.publicKey,
        requestDigest,
      });
    }),
    "HPKE seal of a 3 KiB ticket (X25519, AES-256-GCM)": await time(
      () => seal(recipient.publicKey, ticket, { info: new Uint8Array(8), aad: new Uint8Array(32) }),
    ),
  };
  return { parts, totalMs: Object.values(parts).reduce((a, b) => a + b, 0) };
}

if (import.meta.main) console.log(JSON.stringify(await cryptoFloor()));
