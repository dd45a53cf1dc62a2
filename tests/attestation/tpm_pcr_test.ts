/** Integration tests of the PCR helpers against a live swtpm. */
import assert from "node:assert/strict";
import { AttestationError } from "../../src/attestation/attestation.ts";
import { TpmIssuer } from "../../src/attestation/tpm/issuer.ts";
import { extendPcr15, isNodeBootstrapped, readPcr, readPcrs } from "../../src/attestation/tpm/pcr.ts";
import { TpmToolError } from "../../src/attestation/tpm/tools.ts";
import { TpmValidator } from "../../src/attestation/tpm/validator.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { sha256 } from "../support/digest.ts";
import { startSwtpm } from "../../src/localcluster/swtpm.ts";

Deno.test("tpm pcr: extending PCR 15 with the cluster ID marks the node and breaks a PCR15=0 policy", async () => {
  const swtpm = await startSwtpm();
  const tpm = { tcti: swtpm.tcti };
  const issuer = await TpmIssuer.create({ tcti: swtpm.tcti, logger: silentLogger, eventLogPath: null });
  try {
    const zero = new Uint8Array(32);
    const validator = new TpmValidator({
      measurements: new Map([[15, { expected: zero, warnOnly: false }]]),
      akTrust: { kind: "allow-list", keyDigests: new Set([issuer.keyDigest]) },
      logger: silentLogger,
    });
    assert.deepEqual(await readPcr(tpm, 15), zero);
    assert.equal(await isNodeBootstrapped(tpm), false);
    const before = crypto.getRandomValues(new Uint8Array(32));
    await validator.validate(await issuer.issue(before), before);

    const clusterId = crypto.getRandomValues(new Uint8Array(32));
    await extendPcr15(tpm, clusterId);
    const expected = await sha256(zero, await sha256(clusterId));
    assert.equal((await readPcr(tpm, 15)).toHex(), expected.toHex());
    assert.equal(await isNodeBootstrapped(tpm), true);

    const after = crypto.getRandomValues(new Uint8Array(32));
    await assert.rejects(validator.validate(await issuer.issue(after), after), (error: unknown) => {
      assert.ok(error instanceof AttestationError);
      assert.equal(error.reason, "measurement-mismatch");
      assert.deepEqual(error.mismatches, [{
        index: 15,
        expected: zero.toHex(),
        actual: expected.toHex(),
        enforced: true,
      }]);
      return true;
    });

    // A second extension chains on the first: PCR_Event semantics, not a reset.
    await extendPcr15(tpm, clusterId);
    assert.equal((await readPcr(tpm, 15)).toHex(), (await sha256(expected, await sha256(clusterId))).toHex());
  } finally {
    await issuer.close();
    await swtpm.stop();
  }
});

Deno.test("tpm pcr: readPcrs returns the SHA-256 bank in ascending order and rejects bad indices", async () => {
  const swtpm = await startSwtpm();
  const tpm = { tcti: swtpm.tcti };
  try {
    await extendPcr15(tpm, new TextEncoder().encode("order"));
    const values = await readPcrs(tpm, [15, 0, 15, 7]);
    assert.deepEqual([...values.keys()], [0, 7, 15]);
    assert.deepEqual(values.get(15), await readPcr(tpm, 15));
    assert.deepEqual(values.get(0), new Uint8Array(32));
    for (const bad of [-1, 24, 1.5, NaN]) await assert.rejects(readPcr(tpm, bad), RangeError);
    await assert.rejects(readPcrs(tpm, []), RangeError);
    await assert.rejects(extendPcr15(tpm, new Uint8Array()), RangeError);
  } finally {
    await swtpm.stop();
  }
});

Deno.test("tpm pcr: a failing tool gives a TpmToolError naming the tool and its stderr", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await assert.rejects(readPcr({ tcti: `swtpm:path=${dir}/no-such.sock` }, 15), (error: unknown) => {
      assert.ok(error instanceof TpmToolError);
      assert.equal(error.tool, "tpm2_pcrread");
      assert.notEqual(error.exitCode, 0);
      assert.match(error.message, /^tpm2_pcrread .* failed \(exit code \d+\): .*Could not load tcti/);
      return true;
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("tpm pcr: a TPM that never answers: the tool is killed at its deadline, a TpmToolError naming the TPM", async () => {
  const dir = await Deno.makeTempDir();
  // TCTI sockets (commands, and the control channel beside them) that accept and never answer: a hung TPM.
  const listeners = [`${dir}/tpm.sock`, `${dir}/tpm.sock.ctrl`].map((path) =>
    Deno.listen({ transport: "unix", path })
  );
  const held: Deno.Conn[] = [];
  const accepting = Promise.all(listeners.map(async (listener) => {
    for await (const conn of listener) held.push(conn);
  }));
  try {
    const tpm = { tcti: `swtpm:path=${dir}/tpm.sock`, toolTimeoutMs: 500 };
    const started = performance.now();
    await assert.rejects(readPcr(tpm, 15), (error: unknown) => {
      assert.ok(error instanceof TpmToolError, String(error));
      assert.equal(error.tool, "tpm2_pcrread");
      assert.equal(error.exitCode, null);
      assert.equal(
        error.message,
        `tpm2_pcrread: no answer from the TPM (swtpm:path=${dir}/tpm.sock) within 500 ms`,
      );
      return true;
    });
    assert.ok(performance.now() - started < 10_000, "killed at its deadline, not left waiting");
  } finally {
    for (const listener of listeners) listener.close();
    await accepting.catch(() => {});
    for (const conn of held) conn.close();
    await Deno.remove(dir, { recursive: true });
  }
});
