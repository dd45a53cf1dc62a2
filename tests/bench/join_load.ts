/**
 * Join service load benchmark (part of `deno task bench`).
 *
 * Starts a real cluster (join service and key service processes, the HTTPS
 * fake API server, swtpm) and measures tickets per second and p50/p99
 * latency at 1, 16 and 128 concurrent joiners, with the TPM (qemu-vtpm)
 * validator, plus the join service's peak RSS. Next to it, in the same run,
 * it measures the raw crypto floor of one ticket (the WebCrypto operations a
 * ticket cannot do without) on one core, and prints the ratio.
 *
 * Evidence is prepared before each level (challenge, TPM quote, CSR): swtpm
 * serves one quote at a time (~30 ms), so quoting inside the timed window
 * would measure swtpm rather than the join service.
 *
 * @module
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { ChallengeNonces } from "../../src/atls/nonce.ts";
import { systemClock } from "../../src/clock.ts";
import { generateKeyPair, seal } from "../../src/atls/hpke.ts";
import { computeReportData, joinRequestDigest } from "../../src/atls/reportdata.ts";
import { type PreparedJoinRequest, startJoinCluster } from "../support/join_cluster.ts";
import { processMemory } from "../support/process_memory.ts";
import { percentile } from "./stats.ts";

const LEVELS = [
  { concurrency: 1, tickets: 24 },
  { concurrency: 16, tickets: 96 },
  { concurrency: 128, tickets: 384 },
];

const ECDSA = { name: "ECDSA", namedCurve: "P-256" } as const;
const ECDSA_SHA256 = { name: "ECDSA", hash: "SHA-256" } as const;

await using cluster = await startJoinCluster({
  joinServiceFlags: [
    "--rate-per-peer",
    "100000",
    "--burst-per-peer",
    "100000",
    "--rate-global",
    "100000",
    "--burst-global",
    "100000",
    "--verify-queue",
    "4096",
  ],
});
const pid = cluster.joinService.process.pid;

console.log(
  `join service load: qemu-vtpm (swtpm, ECDSA P-256 AK), worker tickets, ${Deno.build.os} ${navigator.hardwareConcurrency} cores`,
);
console.log("concurrency  tickets  tickets/s  p50 ms  p99 ms  join-service peak RSS MiB");
const results: { concurrency: number; perSecond: number }[] = [];
for (const level of LEVELS) {
  const prepared: PreparedJoinRequest[] = [];
  for (let i = 0; i < level.tickets; i++) {
    prepared.push(
      await cluster.prepareJoinRequest({
        diskUuid: crypto.randomUUID(),
        nodeName: `worker-${level.concurrency}-${i}`,
        ips: [`10.0.${i >> 8}.${i & 255}`],
      }),
    );
  }
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: level.concurrency }, async () => {
    while (next < prepared.length) {
      const { request } = prepared[next++];
      const t = performance.now();
      const response = await cluster.joinService.client.issueJoinTicket(request);
      latencies.push(performance.now() - t);
      if (!response.sealed) throw new ConnectError("ticket without sealed payload", Code.Internal);
    }
  }));
  const elapsed = (performance.now() - started) / 1000;
  // The tickets are real: one more per level is opened and checked, outside the timed window.
  const sample = await cluster.requestTicket({ diskUuid: crypto.randomUUID(), nodeName: "sample" });
  if (sample.ticket.stateDiskKey.length !== 32 || !sample.ticket.token) {
    throw new Error("sample ticket incomplete");
  }
  latencies.sort((a, b) => a - b);
  const perSecond = level.tickets / elapsed;
  results.push({ concurrency: level.concurrency, perSecond });
  console.log(
    [
      String(level.concurrency).padStart(11),
      String(level.tickets).padStart(8),
      perSecond.toFixed(1).padStart(10),
      percentile(latencies, 0.5).toFixed(1).padStart(7),
      percentile(latencies, 0.99).toFixed(1).padStart(7),
      ((await processMemory(pid)).peakRssBytes / 2 ** 20).toFixed(1).padStart(26),
    ].join(" "),
  );
}

console.log("\nwhere a ticket's time goes (join service /metrics, all levels, mean ms per call):");
const metrics = await (await fetch(`${cluster.metricsUrl}/metrics`)).text();
for (const [, name, labels, sum] of metrics.matchAll(/^(join_\w+_seconds)_sum\{([^}]*)\} (\S+)$/gm)) {
  const count = new RegExp(
    `^${name}_count\\{${labels.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\} (\\S+)$`,
    "m",
  )
    .exec(metrics)?.[1];
  console.log(
    `  ${`${name.replace(/^join_|_seconds$/g, "")} ${labels}`.padEnd(64)} ${
      (Number(sum) / Number(count) * 1000).toFixed(2)
    }`,
  );
}

const floor = await cryptoFloor();
console.log("\nraw crypto floor of one ticket on one core (WebCrypto, this process, same run):");
for (const [name, ms] of Object.entries(floor.parts)) console.log(`  ${name.padEnd(48)} ${ms.toFixed(3)} ms`);
console.log(
  `  ${"total".padEnd(48)} ${floor.totalMs.toFixed(3)} ms = ${(1000 / floor.totalMs).toFixed(0)} tickets/s`,
);
for (const { concurrency, perSecond } of results) {
  console.log(
    `at ${concurrency} joiners the service reaches ${
      (perSecond / (1000 / floor.totalMs) * 100).toFixed(1)
    }% of the crypto floor`,
  );
}

/** Mean time of `fn` over `n` runs after a warm-up, in ms. */
async function time(n: number, fn: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < Math.min(20, n); i++) await fn();
  const start = performance.now();
  for (let i = 0; i < n; i++) await fn();
  return (performance.now() - start) / n;
}

/**
 * The WebCrypto work one ticket cannot avoid: verify the quote's ECDSA
 * signature and the CSR's, sign the kubelet certificate, check the nonce
 * MAC, hash the request and report data, seal the ticket (X25519 HPKE).
 */
async function cryptoFloor(): Promise<{ parts: Record<string, number>; totalMs: number }> {
  const ak = await crypto.subtle.generateKey(ECDSA, false, ["sign", "verify"]) as CryptoKeyPair;
  const quote = crypto.getRandomValues(new Uint8Array(145));
  const quoteSignature = await crypto.subtle.sign(ECDSA_SHA256, ak.privateKey, quote);
  const csr = crypto.getRandomValues(new Uint8Array(300));
  const csrSignature = await crypto.subtle.sign(ECDSA_SHA256, ak.privateKey, csr);
  const tbs = crypto.getRandomValues(new Uint8Array(450));
  const nonces = new ChallengeNonces({
    key: new Uint8Array(32),
    clock: systemClock,
    maxTracked: 1_000_000,
  });
  const recipient = await generateKeyPair();
  const ticket = crypto.getRandomValues(new Uint8Array(3 * 1024));
  const nonceBytes = crypto.getRandomValues(new Uint8Array(73));
  const fields = {
    diskUuid: crypto.randomUUID(),
    certificateRequest: csr,
    isControlPlane: false,
    hostPublicKey: new Uint8Array(),
    hostCertificatePrincipals: [],
  };
  const n = 300;
  const parts: Record<string, number> = {
    "ECDSA P-256 verify (quote signature)": await time(
      n,
      () => crypto.subtle.verify(ECDSA_SHA256, ak.publicKey, quoteSignature, quote),
    ),
    "ECDSA P-256 verify (CSR self-signature)": await time(
      n,
      () => crypto.subtle.verify(ECDSA_SHA256, ak.publicKey, csrSignature, csr),
    ),
    "ECDSA P-256 sign (kubelet certificate)": await time(
      n,
      () => crypto.subtle.sign(ECDSA_SHA256, ak.privateKey, tbs),
    ),
    "nonce issue + HMAC check": await time(n, async () => await nonces.consume((await nonces.issue()).nonce)),
    "request digest + report data (SHA-256)": await time(n, async () => {
      const requestDigest = await joinRequestDigest(fields);
      await computeReportData({
        purpose: "join",
        nonce: nonceBytes,
        publicKey: recipient.publicKey,
        requestDigest,
      });
    }),
    "HPKE seal of a 3 KiB ticket (X25519, AES-256-GCM)": await time(
      n,
      () => seal(recipient.publicKey, ticket, { info: new Uint8Array(8), aad: new Uint8Array(32) }),
    ),
  };
  const totalMs = Object.values(parts).reduce((a, b) => a + b, 0);
  return { parts, totalMs };
}
