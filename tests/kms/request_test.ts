/**
 * requestKms (src/kms/request.ts): the KMS an operator's request to a node
 * names, checked the same way for the init and the recovery.
 */
import assert from "node:assert/strict";
import { KmsError } from "../../src/kms/errors.ts";
import { requestKms } from "../../src/kms/request.ts";

const b64url = (length: number, fill: number) =>
  new Uint8Array(length).fill(fill).toBase64({ alphabet: "base64url" });

Deno.test("requestKms accepts what the key service accepts and refuses the rest by name, never echoing values", async (t) => {
  const key = b64url(16, 7);
  const salt = b64url(32, 8);
  const rows: { name: string; kmsUri: string; storageUri?: string; want: string | RegExp }[] = [
    {
      name: "the shortest secret and salt the key service takes",
      kmsUri: `kms://cluster-kms?key=${key}&salt=${salt}`,
      want: "ok",
    },
    {
      name: "a 15-byte master secret",
      kmsUri: `kms://cluster-kms?key=${b64url(15, 7)}&salt=${salt}`,
      want: /^kms_uri: the master secret is 15 bytes, want at least 16$/,
    },
    {
      name: "a 31-byte salt",
      kmsUri: `kms://cluster-kms?key=${key}&salt=${b64url(31, 8)}`,
      want: /^kms_uri: the salt is 31 bytes, want at least 32$/,
    },
    { name: "no salt at all", kmsUri: `kms://cluster-kms?key=${key}`, want: /^kms_uri: / },
    {
      name: "a storage URI other than no-store",
      kmsUri: `kms://cluster-kms?key=${key}&salt=${salt}`,
      storageUri: "storage://s3",
      want: /^storage_uri: /,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      const request = { kmsUri: row.kmsUri, storageUri: row.storageUri ?? "" };
      if (row.want === "ok") {
        assert.equal(requestKms(request).masterSecret.key.length, 16);
        return;
      }
      assert.throws(() => requestKms(request), (error: unknown) => {
        assert.ok(error instanceof KmsError, String(error));
        assert.match(error.message, row.want as RegExp);
        assert.ok(!error.message.includes(key) && !error.message.includes(salt), "no value in the message");
        return true;
      });
    });
  }
});
