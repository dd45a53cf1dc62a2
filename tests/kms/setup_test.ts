import assert from "node:assert/strict";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { setupKms } from "../../src/kms/setup.ts";
import { encodeMasterSecretUri } from "../../src/kms/uri.ts";
import { HKDF_FF } from "./vectors.ts";

Deno.test("setupKms() builds the cluster KMS from storage://no-store and a master secret URI", async () => {
  const kmsUri = encodeMasterSecretUri({ key: HKDF_FF.secret, salt: HKDF_FF.salt });
  const kms = setupKms({ storageUri: "storage://no-store", kmsUri });
  assert.ok(kms instanceof ClusterKms);
  assert.equal((await kms.getDek("key-ffffffff-ffff-ffff-ffff-ffffffffffff", 32)).toHex(), HKDF_FF.output);
});

Deno.test("setupKms() reports a bad storage URI before a bad KMS URI", () => {
  assert.throws(() => setupKms({ storageUri: "storage://disk", kmsUri: "kms://vault" }), {
    name: "KmsError",
    message: "unknown storage type: disk",
  });
  assert.throws(() => setupKms({ storageUri: "storage://no-store", kmsUri: "kms://vault" }), {
    name: "KmsError",
    message: "unknown KMS type: vault",
  });
});
