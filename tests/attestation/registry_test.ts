import assert from "node:assert/strict";
import { createValidator, knownVariants, UnknownVariantError } from "../../src/attestation/registry.ts";
import { createIssuer } from "../../src/attestation/issuers.ts";
import { DummyIssuer, DummyValidator } from "../../src/attestation/dummy.ts";
import { TpmValidator } from "../../src/attestation/tpm/validator.ts";
import { parseAttestationConfig } from "../../src/attestation/config.ts";
import { createLogger, silentLogger } from "../../src/log/logger.ts";

const A32 = "aa".repeat(32);

Deno.test("knownVariants lists the registered variants, sorted", () => {
  assert.deepEqual(knownVariants(), ["dummy", "qemu-vtpm"]);
});

Deno.test("an unknown variant is an error listing the known ones", async () => {
  const message = 'unknown attestation variant "x"; known: dummy, qemu-vtpm';
  assert.throws(
    () =>
      createValidator({
        variant: "x",
        measurements: new Map(),
        akTrust: { kind: "any" },
        controlPlanes: { kind: "any" },
      }, {
        logger: silentLogger,
      }),
    (error: unknown) => {
      assert.ok(error instanceof UnknownVariantError);
      assert.equal(error.message, message);
      assert.equal(error.variant, "x");
      return true;
    },
  );
  await assert.rejects(createIssuer("x", { logger: silentLogger }), { name: "UnknownVariantError", message });
  // No silent fallback to dummy for an empty name either.
  await assert.rejects(createIssuer("", { logger: silentLogger }), {
    message: 'unknown attestation variant ""; known: dummy, qemu-vtpm',
  });
});

Deno.test("dummy creates the dummy issuer and validator, which work together and warn", async () => {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger({ write: (line) => lines.push(JSON.parse(line)) });
  const config = parseAttestationConfig('{"variant":"dummy"}', { variant: "dummy" });
  const validator = createValidator(config, { logger });
  const issuer = await createIssuer("dummy", { logger });
  assert.ok(validator instanceof DummyValidator);
  assert.ok(issuer instanceof DummyIssuer);
  const reportData = crypto.getRandomValues(new Uint8Array(32));
  const verification = await validator.validate(await issuer.issue(reportData), reportData);
  assert.equal(verification.variant, "dummy");
  assert.ok(lines.some((line) => line.level === "warn" && String(line.msg).startsWith("INSECURE")));
});

Deno.test("qemu-vtpm creates a TPM validator from the config", () => {
  const config = parseAttestationConfig(
    JSON.stringify({ variant: "qemu-vtpm", measurements: { "4": A32 }, akTrust: { trustAnyKey: true } }),
    { variant: "qemu-vtpm" },
  );
  const validator = createValidator(config, { logger: silentLogger });
  assert.ok(validator instanceof TpmValidator);
  assert.equal(validator.variant, "qemu-vtpm");
});
