import assert from "node:assert/strict";
import { ExchangeError } from "../../src/atls/errors.ts";
import {
  ChallengeNonces,
  DEFAULT_MAX_CLOCK_SKEW_MS,
  DEFAULT_NONCE_LIFETIME_MS,
  NONCE_LENGTH,
} from "../../src/atls/nonce.ts";
import { ManualClock } from "../support/manual_clock.ts";

const START = Date.UTC(2026, 0, 1);
const key = Uint8Array.from({ length: 32 }, (_, i) => i);
/** The replica of most tests: instances with this ID stand for one replica whose clock moves. */
const replicaId = new Uint8Array(16).fill(0x22);
const fromHex = (s: string) => Uint8Array.from(s.match(/../g)!, (b) => parseInt(b, 16));

function nonces(
  options: {
    clock?: ManualClock;
    maxTracked?: number;
    key?: Uint8Array;
    maxClockSkewMs?: number;
    replicaId?: Uint8Array | "random";
  } = {},
) {
  const clock = options.clock ?? new ManualClock(START);
  return {
    clock,
    nonces: new ChallengeNonces({
      key: options.key ?? key,
      replicaId: options.replicaId === "random" ? undefined : options.replicaId ?? replicaId,
      clock,
      maxTracked: options.maxTracked,
      maxClockSkewMs: options.maxClockSkewMs,
    }),
  };
}

async function rejectsWith(promise: Promise<unknown>, reason: string, message?: RegExp): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof ExchangeError, `want ExchangeError, got ${err}`);
    assert.equal(err.reason, reason);
    if (message) assert.match(err.message, message);
    return true;
  });
}

Deno.test("an issued nonce has the documented layout and is accepted once", async () => {
  const { nonces: n } = nonces();
  const { nonce, expiresAt } = await n.issue();
  assert.equal(nonce.length, NONCE_LENGTH);
  assert.equal(expiresAt, START + DEFAULT_NONCE_LIFETIME_MS);
  assert.equal(nonce.length, 89);
  const view = new DataView(nonce.buffer);
  assert.equal(view.getUint8(0), 2);
  assert.equal(Number(view.getBigUint64(1)), expiresAt);
  assert.equal(nonce.subarray(9, 25).toHex(), replicaId.toHex());
  const hmacKey = await crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const tag = new Uint8Array(await crypto.subtle.sign("HMAC", hmacKey, nonce.slice(0, 57)));
  assert.equal(nonce.subarray(57).toHex(), tag.toHex());

  await n.consume(nonce);
  assert.equal(n.trackedCount, 1);
});

Deno.test("issued nonces differ", async () => {
  const { nonces: n } = nonces();
  const a = await n.issue();
  const b = await n.issue();
  assert.notEqual(a.nonce.toHex(), b.nonce.toHex());
});

Deno.test("the documented nonce vector is accepted under its key until it expires", async () => {
  // Computed with Python's hmac and hashlib (docs/attested-exchange.md §3.1).
  const vector = fromHex(
    "02" + "0000019b76daa800" + "22".repeat(16) + "11".repeat(32) +
      "073983075532f1845005154e2417dbe26e4a9b2568481cf32c59436e6d1d76fe",
  );
  const expiry = Date.UTC(2026, 0, 1);
  await nonces({ clock: new ManualClock(expiry - 1) }).nonces.consume(vector);
  await rejectsWith(nonces({ clock: new ManualClock(expiry) }).nonces.consume(vector), "nonce-expired");
});

Deno.test("a replayed nonce is rejected", async () => {
  const { nonces: n } = nonces();
  const { nonce } = await n.issue();
  await n.consume(nonce);
  await rejectsWith(n.consume(nonce), "nonce-replayed", /already used/);
});

Deno.test("concurrent consumption of one nonce succeeds exactly once", async () => {
  const { nonces: n } = nonces();
  const { nonce } = await n.issue();
  const results = await Promise.allSettled(Array.from({ length: 8 }, () => n.consume(nonce)));
  assert.equal(results.filter((r) => r.status === "fulfilled").length, 1);
  for (const r of results) {
    if (r.status === "rejected") assert.equal((r.reason as ExchangeError).reason, "nonce-replayed");
  }
});

Deno.test("a nonce is rejected once expired", async () => {
  const { clock, nonces: n } = nonces();
  const { nonce, expiresAt } = await n.issue();
  clock.time = expiresAt - 1;
  const { nonce: second } = await n.issue();
  await n.consume(nonce); // the last millisecond of its life
  clock.time = expiresAt + DEFAULT_NONCE_LIFETIME_MS;
  await rejectsWith(n.consume(second), "nonce-expired", /expired \d+ ms ago/);
});

Deno.test("a nonce from another key is rejected as bad MAC", async () => {
  const other = nonces({ key: crypto.getRandomValues(new Uint8Array(32)) }).nonces;
  const { nonce } = await other.issue();
  await rejectsWith(nonces().nonces.consume(nonce), "nonce-bad-mac");
});

Deno.test("a nonce of another replica of the cluster is refused as such, and so is one from before a restart", async () => {
  const other = nonces({ replicaId: new Uint8Array(16).fill(0x33) }).nonces;
  await rejectsWith(
    nonces().nonces.consume((await other.issue()).nonce),
    "nonce-other-replica",
    /another replica/,
  );
  const beforeRestart = nonces({ replicaId: "random" }).nonces;
  const { nonce } = await beforeRestart.issue();
  await rejectsWith(nonces({ replicaId: "random" }).nonces.consume(nonce), "nonce-other-replica");
  await beforeRestart.consume(nonce);
});

Deno.test("a nonce whose replica ID was altered is rejected as bad MAC", async () => {
  const { nonces: n } = nonces();
  const { nonce } = await n.issue();
  const moved = new Uint8Array(nonce);
  moved[9] ^= 0x01;
  await rejectsWith(n.consume(moved), "nonce-bad-mac");
});

Deno.test("a nonce whose expiry was altered is rejected as bad MAC", async () => {
  const { nonces: n } = nonces();
  const { nonce } = await n.issue();
  const extended = new Uint8Array(nonce);
  extended[8] ^= 0x01; // expiry one ms further away
  await rejectsWith(n.consume(extended), "nonce-bad-mac");
});

Deno.test("malformed nonces are rejected before the MAC is checked", async () => {
  const { nonces: n } = nonces();
  const { nonce } = await n.issue();
  await rejectsWith(n.consume(nonce.subarray(0, 88)), "nonce-malformed", /must be 89 bytes, got 88/);
  await rejectsWith(n.consume(new Uint8Array(0)), "nonce-malformed", /got 0/);
  await rejectsWith(n.consume(new Uint8Array([...nonce, 0])), "nonce-malformed", /got 90/);
  const wrongVersion = new Uint8Array(nonce);
  wrongVersion[0] = 1;
  await rejectsWith(n.consume(wrongVersion), "nonce-malformed", /unsupported nonce version 1/);
  const lengthOfVersion1 = Uint8Array.of(3, ...nonce.subarray(1, 73));
  await rejectsWith(n.consume(lengthOfVersion1), "nonce-malformed", /must be 89 bytes, got 73/);
});

Deno.test("a nonce of the earlier format (version 1, an older replica's) asks for a new challenge", async () => {
  const { nonces: n } = nonces();
  const version1 = Uint8Array.of(1, ...crypto.getRandomValues(new Uint8Array(72)));
  await rejectsWith(n.consume(version1), "nonce-other-replica", /earlier format/);
});

Deno.test("a nonce expiring beyond this verifier's lifetime plus skew is not yet valid", async () => {
  // Issued before this replica's clock was stepped back by 5 minutes.
  const ahead = new ManualClock(START + 5 * 60 * 1000);
  const { nonce } = await nonces({ clock: ahead }).nonces.issue();
  await rejectsWith(nonces().nonces.consume(nonce), "nonce-not-yet-valid");
  const slightlyAhead = new ManualClock(START + 10_000);
  await nonces().nonces.consume((await nonces({ clock: slightlyAhead }).nonces.issue()).nonce);
});

Deno.test("when full, new nonces are refused as retryable until tracked ones are forgotten", async () => {
  const skew = 500;
  const { clock, nonces: n } = nonces({ maxTracked: 2, maxClockSkewMs: skew });
  const first = await n.issue();
  clock.time += 1000;
  const second = await n.issue();
  const third = await n.issue();
  await n.consume(first.nonce);
  await n.consume(second.nonce);
  await rejectsWith(n.consume(third.nonce), "nonce-capacity", /retry/);
  // Full does not mean forgetful: both consumed nonces are still refused as replays.
  await rejectsWith(n.consume(first.nonce), "nonce-replayed");
  await rejectsWith(n.consume(second.nonce), "nonce-replayed");
  assert.equal(n.trackedCount, 2);

  // The first is forgotten once expired for the allowed skew; the second and third are alive.
  clock.time = first.expiresAt + skew;
  await n.consume(third.nonce);
  assert.equal(n.trackedCount, 2);
  await rejectsWith(n.consume(second.nonce), "nonce-replayed");
  await rejectsWith(n.consume(third.nonce), "nonce-replayed");
});

Deno.test("nonces expired for longer than the skew are pruned from the single-use set", async () => {
  const { clock, nonces: n } = nonces();
  for (let i = 0; i < 5; i++) await n.consume((await n.issue()).nonce);
  assert.equal(n.trackedCount, 5);
  clock.time += DEFAULT_NONCE_LIFETIME_MS;
  await n.consume((await n.issue()).nonce);
  assert.equal(n.trackedCount, 6, "expired, still remembered for the skew");
  clock.time += DEFAULT_MAX_CLOCK_SKEW_MS;
  await n.consume((await n.issue()).nonce);
  assert.equal(n.trackedCount, 2);
});

Deno.test("a clock stepped back by up to the skew does not let a used nonce in again", async () => {
  const { clock, nonces: n } = nonces();
  const used = await n.issue();
  await n.consume(used.nonce);
  // Time passes beyond its expiry; another call prunes; then NTP steps the clock back.
  clock.time = used.expiresAt + 1000;
  await n.consume((await n.issue()).nonce);
  clock.time = used.expiresAt - 1;
  await rejectsWith(n.consume(used.nonce), "nonce-replayed");
});

Deno.test("options are validated", () => {
  const clock = new ManualClock(START);
  assert.throws(
    () => new ChallengeNonces({ key: new Uint8Array(16), clock }),
    /nonce key must be 32 bytes, got 16/,
  );
  assert.throws(
    () => new ChallengeNonces({ key, clock, lifetimeMs: 0 }),
    /lifetimeMs must be a positive integer/,
  );
  assert.throws(
    () => new ChallengeNonces({ key, clock, maxTracked: -1 }),
    /maxTracked must be a positive integer/,
  );
  assert.throws(
    () => new ChallengeNonces({ key, clock, replicaId: new Uint8Array(15) }),
    /replica ID must be 16 bytes, got 15/,
  );
});
