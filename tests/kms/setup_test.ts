import assert from "node:assert/strict";
import { toHex } from "../../src/attestation/attestation.ts";
import { ClusterKMS } from "../../src/kms/cluster_kms.ts";
import { setupKMS } from "../../src/kms/setup.ts";
import { encodeMasterSecretUri } from "../../src/kms/uri.ts";
import { HKDF_FF } from "./vectors.ts";

Deno.test("setupKMS() builds the cluster KMS from storage://no-store and a master secret URI", async () => {
  const kmsUri = encodeMasterSecretUri({ key: HKDF_FF.secret, salt: HKDF_FF.salt });
  const kms = setupKMS({ storageUri: "storage://no-store", kmsUri });
  assert.ok(kms instanceof ClusterKMS);
  assert.equal(toHex(await kms.getDEK("key-ffffffff-ffff-ffff-ffff-ffffffffffff", 32)), HKDF_FF.output);
});

Deno.test("setupKMS() reports a bad storage URI before a bad KMS URI", () => {
  assert.throws(() => setupKMS({ storageUri: "storage://disk", kmsUri: "kms://vault" }), {
    name: "KmsError",
    message: "unknown storage type: disk",
  });
  assert.throws(() => setupKMS({ storageUri: "storage://no-store", kmsUri: "kms://vault" }), {
    name: "KmsError",
    message: "unknown KMS type: vault",
  });
});
