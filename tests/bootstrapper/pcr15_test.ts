/** The PCR 15 marker and the "node bound" check against a real swtpm (reference §3.2). */
import assert from "node:assert/strict";
import { NodeLock } from "../../src/bootstrapper/nodelock.ts";
import { isNodeBound, TpmClusterMarker } from "../../src/bootstrapper/pcr15.ts";
import { readPcr } from "../../src/attestation/tpm/pcr.ts";
import { TpmToolError } from "../../src/attestation/tpm/tools.ts";
import { sha256 } from "../support/digest.ts";
import { startSwtpm } from "../../src/localcluster/swtpm.ts";

Deno.test("pcr15: a fresh TPM is not bound; the marker makes PCR 15 = SHA256(0^32 ‖ SHA256(id)) and bound", async () => {
  const swtpm = await startSwtpm();
  const tpm = { tcti: swtpm.tcti };
  try {
    assert.equal(await isNodeBound(tpm), false);
    // A fixed ID whose PCR value has a zero byte (at 24): bound means "not all zeros", not "no zero byte".
    const clusterId = new Uint8Array(32);
    clusterId[0] = 5;
    await new TpmClusterMarker(tpm).mark(clusterId);
    const expected = await sha256(new Uint8Array(32), await sha256(clusterId));
    assert.equal(expected[24], 0);
    assert.equal((await readPcr(tpm, 15)).toHex(), expected.toHex());
    assert.equal(await isNodeBound(tpm), true);
  } finally {
    await swtpm.stop();
  }
});

Deno.test("pcr15: through the node lock, concurrent winners extend PCR 15 exactly once", async () => {
  const swtpm = await startSwtpm();
  const tpm = { tcti: swtpm.tcti };
  try {
    const lock = new NodeLock(new TpmClusterMarker(tpm));
    const clusterId = crypto.getRandomValues(new Uint8Array(32));
    const results = await Promise.all(Array.from({ length: 10 }, () => lock.tryLock(clusterId)));
    assert.equal(results.filter((won) => won).length, 1);
    // One extend only: a second would chain on the first and give another value.
    const once = await sha256(new Uint8Array(32), await sha256(clusterId));
    assert.equal((await readPcr(tpm, 15)).toHex(), once.toHex());
  } finally {
    await swtpm.stop();
  }
});

Deno.test("pcr15: an unreachable TPM is an error, not 'unbound'", async () => {
  const tpm = { tcti: "swtpm:path=/nonexistent/tpm.sock" };
  await assert.rejects(isNodeBound(tpm), TpmToolError);
  await assert.rejects(new TpmClusterMarker(tpm).mark(new Uint8Array(32).fill(1)), TpmToolError);
});
