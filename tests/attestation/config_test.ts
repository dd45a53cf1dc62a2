import assert from "node:assert/strict";
import {
  ATTESTATION_CONFIG_MAX_BYTES,
  AttestationConfigError,
  type AttestationConfigFailure,
  diffAkTrust,
  parseAttestationConfig,
  readConfigText,
} from "../../src/attestation/config.ts";
import { marshalMeasurements } from "../../src/attestation/measurements.ts";

const A32 = "aa".repeat(32);
const KEY1 = "11".repeat(32);
const KEY2 = "22".repeat(32);
const MEASUREMENTS = { "4": { expected: A32, warnOnly: false }, "9": { expected: A32, warnOnly: true } };

function qemu(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ variant: "qemu-vtpm", measurements: MEASUREMENTS, ...extra });
}

function assertConfigError(
  text: string,
  variant: string,
  reason: AttestationConfigFailure,
  message: string | RegExp,
): void {
  assert.throws(
    () => parseAttestationConfig(text, { variant }),
    (error: unknown) => {
      assert.ok(error instanceof AttestationConfigError);
      assert.equal(error.reason, reason);
      if (typeof message === "string") assert.equal(error.message, message);
      else assert.match(error.message, message);
      return true;
    },
  );
}

Deno.test("a dummy config needs no measurements and no AK trust", () => {
  const config = parseAttestationConfig('{"variant":"dummy"}', { variant: "dummy" });
  assert.equal(config.variant, "dummy");
  assert.equal(config.measurements.size, 0);
  assert.deepEqual(config.akTrust, { kind: "any" });
  // Measurements are parsed (and checked) when present, and an akTrust is shape-checked but unused.
  const withAll = parseAttestationConfig(
    JSON.stringify({ variant: "dummy", measurements: MEASUREMENTS, akTrust: { allowedKeyDigests: [KEY1] } }),
    { variant: "dummy" },
  );
  assert.equal(withAll.measurements.size, 2);
  assert.deepEqual(withAll.akTrust, { kind: "any" });
});

Deno.test("a qemu-vtpm config with an AK allow-list", () => {
  const config = parseAttestationConfig(
    qemu({ akTrust: { allowedKeyDigests: [KEY1, KEY2.toUpperCase()] } }),
    {
      variant: "qemu-vtpm",
    },
  );
  assert.equal(config.variant, "qemu-vtpm");
  assert.equal(marshalMeasurements(config.measurements), JSON.stringify(MEASUREMENTS));
  assert.equal(config.akTrust.kind, "allow-list");
  assert.ok(config.akTrust.kind === "allow-list");
  assert.deepEqual([...config.akTrust.keyDigests].sort(), [KEY1, KEY2]);
});

Deno.test("a qemu-vtpm config may enforce one PCR of 0–15 and warn on others", () => {
  const measurements = {
    "0": { expected: A32, warnOnly: true },
    "15": { expected: "00".repeat(32), warnOnly: false },
    "7": { expected: A32, warnOnly: true },
  };
  const config = parseAttestationConfig(
    JSON.stringify({ variant: "qemu-vtpm", measurements, akTrust: { allowedKeyDigests: [KEY1] } }),
    { variant: "qemu-vtpm" },
  );
  assert.deepEqual([...config.measurements.keys()], [0, 7, 15]);
  assert.deepEqual([...config.measurements.values()].map((m) => m.warnOnly), [true, true, false]);
  // The TPM rules are qemu-vtpm's: a dummy config keeps any valid map (it never checks measurements).
  const dummy = parseAttestationConfig(
    JSON.stringify({
      variant: "dummy",
      measurements: { "20": { expected: "bb".repeat(48), warnOnly: true } },
    }),
    { variant: "dummy" },
  );
  assert.deepEqual([...dummy.measurements.keys()], [20]);
});

Deno.test("a qemu-vtpm config that trusts any key explicitly", () => {
  const config = parseAttestationConfig(qemu({ akTrust: { trustAnyKey: true } }), { variant: "qemu-vtpm" });
  assert.deepEqual(config.akTrust, { kind: "any" });
  assert.deepEqual(config.controlPlanes, { kind: "allow-list", keyDigests: new Set() }, "no control planes");
});

Deno.test("the control-plane role is bound to the keys the operator names", () => {
  const parse = (akTrust: unknown, variant = "qemu-vtpm") =>
    parseAttestationConfig(
      variant === "dummy" ? JSON.stringify({ variant, akTrust }) : qemu({ akTrust }),
      { variant },
    ).controlPlanes;
  const none = { kind: "allow-list", keyDigests: new Set() };
  assert.deepEqual(
    parse({ allowedKeyDigests: [KEY1, KEY2] }),
    none,
    "unnamed: no key may join as a control plane",
  );
  assert.deepEqual(
    parse({ allowedKeyDigests: [KEY1, KEY2], controlPlaneKeyDigests: [KEY2.toUpperCase()] }),
    { kind: "allow-list", keyDigests: new Set([KEY2]) },
  );
  assert.deepEqual(parse({ allowedKeyDigests: [KEY1], controlPlaneKeyDigests: [] }), none);
  assert.deepEqual(
    parse({ trustAnyKey: true, controlPlaneKeyDigests: [KEY1] }),
    { kind: "allow-list", keyDigests: new Set([KEY1]) },
    "with trustAnyKey a listed key still binds the role to its TPM",
  );
  assert.deepEqual(parse({ trustAnyKey: true, controlPlaneAnyKey: true }), { kind: "any" });
  assert.deepEqual(parse({ trustAnyKey: true, controlPlaneAnyKey: true }, "dummy"), { kind: "any" });
  assert.deepEqual(parse(undefined, "dummy"), none, "dummy control planes need the explicit opt-in");
  assert.deepEqual(parse({ trustAnyKey: true }, "dummy"), none);
});

Deno.test("invalid attestation configs are rejected with errors naming the field", async (t) => {
  const hint =
    'list the trusted attestation key digests ({"akTrust": {"allowedKeyDigests": ["<64 hex>", ...]}}) or set {"akTrust": {"trustAnyKey": true}} explicitly';
  const cases: [string, string, string, AttestationConfigFailure, string | RegExp][] = [
    [
      "invalid JSON, with its position",
      '{"variant": "qemu-vtpm",, }',
      "qemu-vtpm",
      "invalid-json",
      /^attestation config: invalid JSON: .*position 24 \(line 1 column 25\)/,
    ],
    [
      "empty file",
      "",
      "qemu-vtpm",
      "invalid-json",
      "attestation config: invalid JSON: Unexpected end of JSON input",
    ],
    [
      "a measurement given twice (JSON.parse would keep the last)",
      `{"variant": "qemu-vtpm", "measurements": {"4": {"expected": "${A32}"}, "4": {"expected": "${
        "bb".repeat(32)
      }"}}}`,
      "qemu-vtpm",
      "invalid-config",
      'attestation config: key "4" is given twice in measurements: give each key once',
    ],
    [
      "a top-level key given twice",
      `{"variant": "qemu-vtpm", "variant": "dummy", "measurements": ${JSON.stringify(MEASUREMENTS)}}`,
      "qemu-vtpm",
      "invalid-config",
      'attestation config: key "variant" is given twice at the top level: give each key once',
    ],
    [
      "not an object",
      "[]",
      "qemu-vtpm",
      "invalid-config",
      "attestation config: want a JSON object, got array",
    ],
    [
      "unknown top-level field",
      qemu({ akTrust: { trustAnyKey: true }, measurement: {} }),
      "qemu-vtpm",
      "invalid-config",
      'attestation config: unknown field "measurement" (known: variant, measurements, akTrust)',
    ],
    [
      "missing variant",
      JSON.stringify({ measurements: MEASUREMENTS }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: variant is missing (known: dummy, qemu-vtpm)",
    ],
    [
      "variant of the wrong type",
      JSON.stringify({ variant: 5 }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: variant must be a string, got number",
    ],
    [
      "unknown variant",
      JSON.stringify({ variant: "qemu-tdx" }),
      "qemu-vtpm",
      "invalid-config",
      'attestation config: unknown attestation variant "qemu-tdx"; known: dummy, qemu-vtpm',
    ],
    [
      "variant differs from the service's",
      '{"variant":"dummy"}',
      "qemu-vtpm",
      "variant-mismatch",
      'attestation config: the config is for attestation variant "dummy" but this service runs "qemu-vtpm"; the variant is fixed at start and never changes at runtime',
    ],
    [
      "missing akTrust",
      qemu(),
      "qemu-vtpm",
      "invalid-config",
      `attestation config: akTrust is missing: ${hint}`,
    ],
    [
      "empty akTrust",
      qemu({ akTrust: {} }),
      "qemu-vtpm",
      "invalid-config",
      `attestation config: akTrust is empty: ${hint}`,
    ],
    [
      "empty allow-list",
      qemu({ akTrust: { allowedKeyDigests: [] } }),
      "qemu-vtpm",
      "invalid-config",
      `attestation config: akTrust: allowedKeyDigests is empty: ${hint}`,
    ],
    [
      "trustAnyKey false",
      qemu({ akTrust: { trustAnyKey: false } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: trustAnyKey must be true when present, got false; to restrict the keys, list them in allowedKeyDigests",
    ],
    [
      "both trust modes",
      qemu({ akTrust: { trustAnyKey: true, allowedKeyDigests: [KEY1] } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: set either allowedKeyDigests or trustAnyKey, not both",
    ],
    [
      "unknown akTrust field",
      qemu({ akTrust: { allowedKeys: [KEY1] } }),
      "qemu-vtpm",
      "invalid-config",
      'attestation config: akTrust: unknown field "allowedKeys" (known: allowedKeyDigests, trustAnyKey, controlPlaneKeyDigests, controlPlaneAnyKey)',
    ],
    [
      "akTrust of the wrong type",
      qemu({ akTrust: true }),
      "qemu-vtpm",
      "invalid-config",
      `attestation config: akTrust must be an object, got boolean; ${hint}`,
    ],
    [
      "allow-list of the wrong type",
      qemu({ akTrust: { allowedKeyDigests: KEY1 } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: allowedKeyDigests must be an array, got string",
    ],
    [
      "short key digest",
      qemu({ akTrust: { allowedKeyDigests: [KEY1, "abcd"] } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: allowedKeyDigests[1] must be 64 hex digits (a SHA-256 digest), got 4 characters",
    ],
    [
      "key digest not a string",
      qemu({ akTrust: { allowedKeyDigests: [1] } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: allowedKeyDigests[0] must be 64 hex digits (a SHA-256 digest), got number",
    ],
    [
      "duplicate key digest",
      qemu({ akTrust: { allowedKeyDigests: [KEY1, KEY1.toUpperCase()] } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: allowedKeyDigests[1] is listed twice",
    ],
    [
      "missing measurements",
      JSON.stringify({ variant: "qemu-vtpm", akTrust: { trustAnyKey: true } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: measurements are missing: a qemu-vtpm config must list the expected measurements",
    ],
    [
      "empty measurements",
      JSON.stringify({ variant: "qemu-vtpm", measurements: {}, akTrust: { trustAnyKey: true } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: measurements are empty: a qemu-vtpm config must list at least one expected measurement",
    ],
    [
      "qemu-vtpm measurements that are all warnOnly",
      JSON.stringify({
        variant: "qemu-vtpm",
        measurements: { "4": { expected: A32, warnOnly: true }, "9": { expected: A32, warnOnly: true } },
        akTrust: { trustAnyKey: true },
      }),
      "qemu-vtpm",
      "invalid-config",
      'attestation config: measurements "4", "9" are all warnOnly: a qemu-vtpm config must enforce at least one measurement, or any boot chain is accepted',
    ],
    [
      "qemu-vtpm measurement of 48 bytes (a TDX value)",
      JSON.stringify({
        variant: "qemu-vtpm",
        measurements: { "0": "bb".repeat(48), "4": "cc".repeat(48) },
        akTrust: { trustAnyKey: true },
      }),
      "qemu-vtpm",
      "invalid-config",
      'attestation config: measurement "0": expected is 48 bytes, but qemu-vtpm measurements are SHA-256 PCR values of 32 bytes',
    ],
    [
      "qemu-vtpm enforced measurement of a PCR the issuer does not quote",
      JSON.stringify({
        variant: "qemu-vtpm",
        measurements: { "4": A32, "16": A32 },
        akTrust: { trustAnyKey: true },
      }),
      "qemu-vtpm",
      "invalid-config",
      'attestation config: measurement "16": qemu-vtpm evidence reports PCRs 0 to 15 only, so PCR 16 could never match',
    ],
    [
      "qemu-vtpm warn-only measurement of PCR 23",
      JSON.stringify({
        variant: "qemu-vtpm",
        measurements: { "4": A32, "23": { expected: A32, warnOnly: true } },
        akTrust: { allowedKeyDigests: [KEY1] },
      }),
      "qemu-vtpm",
      "invalid-config",
      'attestation config: measurement "23": qemu-vtpm evidence reports PCRs 0 to 15 only, so PCR 23 could never match',
    ],
    [
      "invalid measurement",
      JSON.stringify({ variant: "dummy", measurements: { "4": { expected: "aa".repeat(31) } } }),
      "dummy",
      "invalid-config",
      'attestation config: measurement "4": expected must be hex of 32 or 48 bytes, got 31 bytes',
    ],
    [
      "a control-plane key that is not trusted",
      qemu({ akTrust: { allowedKeyDigests: [KEY1], controlPlaneKeyDigests: [KEY2] } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: controlPlaneKeyDigests[0] is not in allowedKeyDigests; a control plane's key must be trusted too",
    ],
    [
      "a control-plane key that is not a digest",
      qemu({ akTrust: { allowedKeyDigests: [KEY1], controlPlaneKeyDigests: [KEY1, "x"] } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: controlPlaneKeyDigests[1] must be 64 hex digits (a SHA-256 digest), got 1 characters",
    ],
    [
      "a control-plane key listed twice",
      qemu({ akTrust: { allowedKeyDigests: [KEY1], controlPlaneKeyDigests: [KEY1, KEY1.toUpperCase()] } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: controlPlaneKeyDigests[1] is listed twice",
    ],
    [
      "control-plane keys not in a list",
      qemu({ akTrust: { allowedKeyDigests: [KEY1], controlPlaneKeyDigests: KEY1 } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: controlPlaneKeyDigests must be an array, got string",
    ],
    [
      "controlPlaneAnyKey with an allow-list",
      qemu({ akTrust: { allowedKeyDigests: [KEY1], controlPlaneAnyKey: true } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: controlPlaneAnyKey needs trustAnyKey; with allowedKeyDigests, list the control planes' keys in controlPlaneKeyDigests",
    ],
    [
      "controlPlaneAnyKey set to false",
      qemu({ akTrust: { trustAnyKey: true, controlPlaneAnyKey: false } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: controlPlaneAnyKey must be true when present, got false; to choose the control planes, list their keys in controlPlaneKeyDigests",
    ],
    [
      "both ways of naming control planes",
      qemu({ akTrust: { trustAnyKey: true, controlPlaneAnyKey: true, controlPlaneKeyDigests: [KEY1] } }),
      "qemu-vtpm",
      "invalid-config",
      "attestation config: akTrust: set either controlPlaneKeyDigests or controlPlaneAnyKey, not both",
    ],
    [
      "control-plane key digests for dummy evidence, which has no key",
      JSON.stringify({ variant: "dummy", akTrust: { trustAnyKey: true, controlPlaneKeyDigests: [KEY1] } }),
      "dummy",
      "invalid-config",
      'attestation config: akTrust: controlPlaneKeyDigests cannot match dummy evidence, which has no attestation key; allow control planes with {"trustAnyKey": true, "controlPlaneAnyKey": true}',
    ],
    [
      "dummy control planes without trustAnyKey",
      JSON.stringify({ variant: "dummy", akTrust: { controlPlaneAnyKey: true } }),
      "dummy",
      "invalid-config",
      `attestation config: akTrust is empty: ${hint}`,
    ],
  ];
  for (const [name, text, variant, code, message] of cases) {
    await t.step(name, () => assertConfigError(text, variant, code, message));
  }
});

Deno.test("names and values from the file are quoted escaped and cut in errors", async (t) => {
  const long = "x".repeat(100_000);
  const cut = `"${"x".repeat(63)}…`;
  const known = "(known: variant, measurements, akTrust)";
  const rows: { name: string; text: string; want: string }[] = [
    {
      name: "an unknown field with an escape sequence",
      text: JSON.stringify({ variant: "dummy", "\x1b[2Jx": 1 }),
      want: `unknown field "\\u001b[2Jx" ${known}`,
    },
    {
      name: "an unknown field with the one-byte CSI (C1), which JSON.stringify leaves as it is",
      text: JSON.stringify({ variant: "dummy", "\x9b2J": 1 }),
      want: `unknown field "\\u009b2J" ${known}`,
    },
    {
      name: "a long unknown field",
      text: `{"variant":"dummy","${long}":1}`,
      want: `unknown field ${cut} ${known}`,
    },
    {
      name: "an unknown akTrust field with an escape sequence",
      text: JSON.stringify({ variant: "dummy", akTrust: { "\x1b]0;x\x07": 1 } }),
      want:
        'akTrust: unknown field "\\u001b]0;x\\u0007" (known: allowedKeyDigests, trustAnyKey, controlPlaneKeyDigests, controlPlaneAnyKey)',
    },
    {
      name: "a long variant",
      text: JSON.stringify({ variant: long }),
      want: `unknown attestation variant ${cut}; known: dummy, qemu-vtpm`,
    },
    {
      name: "a variant with an escape sequence",
      text: JSON.stringify({ variant: "\x1b[2J" }),
      want: 'unknown attestation variant "\\u001b[2J"; known: dummy, qemu-vtpm',
    },
    {
      name: "a long trustAnyKey",
      text: JSON.stringify({ variant: "dummy", akTrust: { trustAnyKey: long } }),
      want:
        `akTrust: trustAnyKey must be true when present, got ${cut}; to restrict the keys, list them in allowedKeyDigests`,
    },
    {
      name: "a long controlPlaneAnyKey",
      text: JSON.stringify({ variant: "dummy", akTrust: { trustAnyKey: true, controlPlaneAnyKey: long } }),
      want:
        `akTrust: controlPlaneAnyKey must be true when present, got ${cut}; to choose the control planes, list their keys in controlPlaneKeyDigests`,
    },
    {
      name: "a measurement index with an escape sequence",
      text: JSON.stringify({ variant: "dummy", measurements: { "\x1b[2J": A32 } }),
      want: 'measurement "\\u001b[2J": index must be a decimal integer from 0 to 23',
    },
    {
      name: "a long measurement index",
      text: JSON.stringify({ variant: "dummy", measurements: { [long]: A32 } }),
      want: `measurement ${cut}: index must be a decimal integer from 0 to 23`,
    },
    {
      name: "an unknown measurement field with an escape sequence",
      text: JSON.stringify({ variant: "dummy", measurements: { "4": { expected: A32, "\x1b[2J": 1 } } }),
      want: 'measurement "4": unknown field "\\u001b[2J" (known: expected, warnOnly)',
    },
    {
      name: "a long key given twice",
      text: `{"variant":"dummy","${long}":1,"${long}":2}`,
      want: `key ${cut} is given twice at the top level: give each key once`,
    },
  ];
  for (const row of rows) {
    await t.step(
      row.name,
      () => assertConfigError(row.text, "dummy", "invalid-config", `attestation config: ${row.want}`),
    );
  }
});

Deno.test("the source of a config names it in errors", () => {
  assert.throws(
    () => parseAttestationConfig("{}", { variant: "dummy", source: "attestation config /var/config/x" }),
    { message: "attestation config /var/config/x: variant is missing (known: dummy, qemu-vtpm)" },
  );
});

Deno.test("readConfigText reads text and reports unreadable and non-UTF-8 files", async () => {
  const dir = await Deno.makeTempDir({ prefix: "attestation-config-" });
  try {
    await Deno.writeTextFile(`${dir}/config`, '{"variant":"dummy"}');
    assert.equal(await readConfigText(`${dir}/config`), '{"variant":"dummy"}');

    await assert.rejects(readConfigText(`${dir}/missing`), (error: unknown) => {
      assert.ok(error instanceof AttestationConfigError);
      assert.equal(error.reason, "unreadable");
      assert.match(error.message, new RegExp(`^cannot read attestation config ${dir}/missing: No such file`));
      return true;
    });

    await Deno.writeFile(`${dir}/binary`, new Uint8Array([0x7b, 0xff, 0x7d]));
    await assert.rejects(readConfigText(`${dir}/binary`), (error: unknown) => {
      assert.ok(error instanceof AttestationConfigError);
      assert.equal(error.reason, "invalid-json");
      assert.equal(error.message, `attestation config ${dir}/binary: not UTF-8 text`);
      return true;
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("readConfigText refuses a file over 1 MiB without quoting it", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "attestation-config-" });
  const dummy = '{"variant":"dummy"}';
  const padded = (size: number) => dummy + " ".repeat(size - dummy.length);
  try {
    const rows: { name: string; text: string; want?: string }[] = [
      { name: "exactly 1 MiB: read", text: padded(ATTESTATION_CONFIG_MAX_BYTES) },
      {
        name: "one byte more: refused",
        text: padded(ATTESTATION_CONFIG_MAX_BYTES + 1),
        want: `${ATTESTATION_CONFIG_MAX_BYTES + 1} bytes, larger than the 1048576 bytes`,
      },
      {
        name: "a 50 MB variant: refused, not quoted",
        text: JSON.stringify({ variant: "v".repeat(50_000_000) }),
        want: `50000014 bytes, larger than the 1048576 bytes`,
      },
    ];
    for (const row of rows) {
      await t.step(row.name, async () => {
        const path = `${dir}/config`;
        await Deno.writeTextFile(path, row.text);
        if (row.want === undefined) {
          assert.equal(await readConfigText(path), row.text);
          return;
        }
        await assert.rejects(readConfigText(path), (error: unknown) => {
          assert.ok(error instanceof AttestationConfigError, String(error));
          assert.equal(error.reason, "invalid-config");
          assert.equal(
            error.message,
            `attestation config ${path}: ${row.want} an attestation config may have`,
          );
          return true;
        });
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("diffAkTrust reports mode changes and added and removed keys", () => {
  const list = (...keys: string[]) => ({ kind: "allow-list" as const, keyDigests: new Set(keys) });
  assert.equal(diffAkTrust(list(KEY1), list(KEY1)), undefined);
  assert.equal(diffAkTrust({ kind: "any" }, { kind: "any" }), undefined);
  assert.deepEqual(diffAkTrust(list(KEY1), list(KEY2)), {
    from: "allow-list",
    to: "allow-list",
    addedKeys: [KEY2],
    removedKeys: [KEY1],
  });
  assert.deepEqual(diffAkTrust(list(KEY1), { kind: "any" }), {
    from: "allow-list",
    to: "any",
    addedKeys: [],
    removedKeys: [],
  });
  assert.deepEqual(diffAkTrust({ kind: "any" }, list(KEY1)), {
    from: "any",
    to: "allow-list",
    addedKeys: [],
    removedKeys: [],
  });
});
