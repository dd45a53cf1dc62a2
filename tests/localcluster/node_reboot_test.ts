/**
 * A local node's reboot (real swtpm, real cryptsetup on a file-backed
 * LUKS2 disk): what `/run` keeps across it.
 */
import assert from "node:assert/strict";
import { nodePaths } from "../../src/bootstrapper/node_paths.ts";
import { LuksStateDisk } from "../../src/bootstrapper/state_disk.ts";
import { bootNodeTpm, prepareNode, rebootNode } from "../../src/localcluster/node.ts";

Deno.test("a node's reboot empties /run's key file of an initialized disk, and keeps a fresh disk's", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "node-reboot-" });
  try {
    const node = await prepareNode({ dir, name: "worker-0" });
    const keyFile = nodePaths(node.root).initialPassphrase;
    const firstBootKey = await Deno.readFile(keyFile);
    await (await bootNodeTpm(node)).stop();

    await t.step("a disk never initialized (the node never joined): its first-boot key stays", async () => {
      await (await rebootNode(node)).stop();
      assert.deepEqual(await Deno.readFile(keyFile), firstBootKey);
    });

    await t.step("an initialized disk: the key file is gone until the rejoin writes it", async () => {
      const disk = new LuksStateDisk({
        device: node.disk,
        initialPassphraseFile: keyFile,
        pbkdf: { type: "pbkdf2", forceIterations: 1000 },
      });
      const record = { measurementSalt: new Uint8Array(32), measurementSecret: new Uint8Array(32) };
      await disk.changePassphrase(crypto.getRandomValues(new Uint8Array(32)), record);
      assert.ok(await disk.isInitialized());
      await (await rebootNode(node)).stop();
      await assert.rejects(Deno.stat(keyFile), Deno.errors.NotFound);
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
