import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  diffMeasurements,
  marshalMeasurements,
  measurementsDigest,
  MeasurementsError,
  parseMeasurements,
} from "../../src/attestation/measurements.ts";

const A32 = "aa".repeat(32);
const B32 = "bb".repeat(32);
const C48 = "cc".repeat(48);

Deno.test("parseMeasurements reads the object form, defaulting warnOnly to enforced", () => {
  const m = parseMeasurements({
    "4": { expected: A32, warnOnly: false },
    "9": { expected: B32, warnOnly: true },
    "12": { expected: A32 },
  });
  assert.deepEqual([...m.keys()], [4, 9, 12]);
  assert.equal(m.get(4)!.expected.toHex(), A32);
  assert.equal(m.get(4)!.warnOnly, false);
  assert.equal(m.get(9)!.expected.toHex(), B32);
  assert.equal(m.get(9)!.warnOnly, true);
  assert.equal(m.get(12)!.warnOnly, false);
});

Deno.test("parseMeasurements reads the legacy bare hex string as enforced", () => {
  const m = parseMeasurements({ "15": B32.toUpperCase(), "0": { expected: A32, warnOnly: true } });
  assert.equal(m.get(15)!.expected.toHex(), B32);
  assert.equal(m.get(15)!.warnOnly, false);
  assert.equal(m.get(0)!.warnOnly, true);
});

Deno.test("parseMeasurements accepts 48-byte (TDX) values and an empty map", () => {
  const m = parseMeasurements({ "0": C48, "4": { expected: C48, warnOnly: true } });
  assert.equal(m.get(0)!.expected.length, 48);
  assert.equal(m.get(4)!.expected.length, 48);
  assert.equal(parseMeasurements({}).size, 0);
});

Deno.test("parseMeasurements rejects bad input with errors naming the key", async (t) => {
  const base64Of32 = btoa(String.fromCharCode(...new Uint8Array(32).fill(0xaa)));
  const cases: [string, unknown, string, string | undefined][] = [
    [
      "31 bytes",
      { "4": { expected: "aa".repeat(31) } },
      'measurement "4": expected must be hex of 32 or 48 bytes, got 31 bytes',
      "4",
    ],
    [
      "legacy 33 bytes",
      { "9": "aa".repeat(33) },
      'measurement "9": expected must be hex of 32 or 48 bytes, got 33 bytes',
      "9",
    ],
    [
      "empty expected",
      { "4": { expected: "" } },
      'measurement "4": expected must be hex of 32 or 48 bytes, got 0 bytes',
      "4",
    ],
    [
      "base64",
      { "4": { expected: base64Of32 } },
      'measurement "4": expected must be hex of 32 or 48 bytes, got non-hex characters (base64 is not accepted)',
      "4",
    ],
    [
      "odd hex digits",
      { "4": { expected: "a".repeat(63) } },
      'measurement "4": expected must be hex of 32 or 48 bytes, got an odd number of hex digits (63)',
      "4",
    ],
    [
      "mixed lengths",
      { "4": A32, "9": C48 },
      'measurement "9": expected is 48 bytes but measurement "4" is 32 bytes; all measurements must have the same length',
      "9",
    ],
    ["index 24", { "24": A32 }, 'measurement "24": index must be a decimal integer from 0 to 23', "24"],
    ["negative index", { "-1": A32 }, 'measurement "-1": index must be a decimal integer from 0 to 23', "-1"],
    ["leading zero", { "04": A32 }, 'measurement "04": index must be a decimal integer from 0 to 23', "04"],
    [
      "not a number",
      { "pcr4": A32 },
      'measurement "pcr4": index must be a decimal integer from 0 to 23',
      "pcr4",
    ],
    ["fraction", { "4.0": A32 }, 'measurement "4.0": index must be a decimal integer from 0 to 23', "4.0"],
    [
      "unknown field",
      { "4": { expected: A32, warnonly: true } },
      'measurement "4": unknown field "warnonly" (known: expected, warnOnly)',
      "4",
    ],
    ["missing expected", { "4": { warnOnly: true } }, 'measurement "4": expected is missing', "4"],
    [
      "expected not a string",
      { "4": { expected: 42 } },
      'measurement "4": expected must be a hex string, got number',
      "4",
    ],
    [
      "warnOnly a string",
      { "4": { expected: A32, warnOnly: "true" } },
      'measurement "4": warnOnly must be a boolean, got string',
      "4",
    ],
    [
      "warnOnly null",
      { "4": { expected: A32, warnOnly: null } },
      'measurement "4": warnOnly must be a boolean, got null',
      "4",
    ],
    [
      "entry an array",
      { "4": [A32] },
      'measurement "4": want {"expected": "<hex>", "warnOnly": <bool>} or a hex string, got array',
      "4",
    ],
    [
      "map an array",
      [A32],
      'measurements must be an object of index to {"expected": "<hex>", "warnOnly": <bool>}, got array',
      undefined,
    ],
    [
      "map null",
      null,
      'measurements must be an object of index to {"expected": "<hex>", "warnOnly": <bool>}, got null',
      undefined,
    ],
  ];
  for (const [name, input, message, key] of cases) {
    await t.step(name, () => {
      assert.throws(
        () => parseMeasurements(input),
        (error: unknown) => {
          assert.ok(error instanceof MeasurementsError);
          assert.equal(error.message, message);
          assert.equal(error.key, key);
          return true;
        },
      );
    });
  }
});

Deno.test("marshalMeasurements is canonical: numeric key order, lower-case hex, warnOnly always present", () => {
  const m = parseMeasurements(JSON.parse(`{"15":"${B32.toUpperCase()}","4":{"expected":"${A32}"},"11":{
    "warnOnly": true, "expected": "${A32}"}}`));
  const expected = `{"4":{"expected":"${A32}","warnOnly":false},"11":{"expected":"${A32}","warnOnly":true},` +
    `"15":{"expected":"${B32}","warnOnly":false}}`;
  assert.equal(marshalMeasurements(m), expected);
  // The canonical form parses back to the same canonical form.
  assert.equal(marshalMeasurements(parseMeasurements(JSON.parse(expected))), expected);
  // Insertion order of the map does not matter.
  const reversed = new Map([...m].reverse());
  assert.equal(marshalMeasurements(reversed), expected);
  assert.equal(marshalMeasurements(new Map()), "{}");
});

Deno.test("measurementsDigest is SHA-256 of the canonical JSON, stable across spellings", async () => {
  const a = parseMeasurements({ "4": { expected: A32, warnOnly: false }, "12": B32 });
  const b = parseMeasurements({ "12": { expected: B32.toUpperCase() }, "4": A32 });
  const digest = await measurementsDigest(a);
  assert.match(digest, /^[0-9a-f]{64}$/);
  assert.equal(digest, createHash("sha256").update(marshalMeasurements(a)).digest("hex"));
  assert.equal(await measurementsDigest(b), digest);
  const warnOnly = parseMeasurements({ "4": { expected: A32, warnOnly: true }, "12": B32 });
  assert.notEqual(await measurementsDigest(warnOnly), digest);
});

Deno.test("diffMeasurements lists added, removed and changed indices", () => {
  const before = parseMeasurements({ "4": A32, "8": A32, "9": { expected: A32, warnOnly: true }, "12": A32 });
  const after = parseMeasurements({
    "4": A32,
    "9": { expected: A32, warnOnly: false },
    "12": B32,
    "15": A32,
  });
  assert.deepEqual(diffMeasurements(before, after), { added: [15], removed: [8], changed: [9, 12] });
  assert.deepEqual(diffMeasurements(after, after), { added: [], removed: [], changed: [] });
  assert.deepEqual(diffMeasurements(new Map(), before), { added: [4, 8, 9, 12], removed: [], changed: [] });
});
