import assert from "node:assert/strict";
import { FileClusterMarker, filePcr15Path } from "../../src/bootstrapper/file_marker.ts";

Deno.test("the file-backed PCR 15 starts at zero and extends as a TPM's SHA-256 bank does", async () => {
  const root = await Deno.makeTempDir();
  try {
    const marker = new FileClusterMarker(filePcr15Path(root));
    assert.equal(await marker.isBound(), false);
    const clusterId = new Uint8Array(32).fill(7);
    await marker.mark(clusterId);
    assert.equal(await marker.isBound(), true);
    const event = new Uint8Array(await crypto.subtle.digest("SHA-256", clusterId));
    const want = new Uint8Array(
      await crypto.subtle.digest("SHA-256", new Uint8Array([...new Uint8Array(32), ...event])),
    );
    assert.equal((await marker.read()).toHex(), want.toHex());
    assert.equal((await Deno.stat(filePcr15Path(root))).mode! & 0o777, 0o600);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
