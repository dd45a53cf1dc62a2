import assert from "node:assert/strict";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import {
  CLUSTER_ID_INFO,
  dataKeyInfo,
  DEK_PREFIX,
  deriveClusterId,
  deriveMeasurementSecret,
  deriveStateDiskKey,
  MEASUREMENT_SECRET_KEY_ID,
  stateDiskKeyId,
} from "../../src/kms/keys.ts";
import { setupKms } from "../../src/kms/setup.ts";
import { CHAINED_EXAMPLE, HKDF_CLUSTER_ID, HKDF_FF, HKDF_MEASUREMENT_SECRET, HKDF_ZERO } from "./vectors.ts";

Deno.test("key IDs and info strings are the original's", () => {
  assert.equal(DEK_PREFIX, "key-");
  assert.equal(MEASUREMENT_SECRET_KEY_ID, "measurementSecret");
  assert.equal(CLUSTER_ID_INFO, "key-clusterID");
  assert.equal(dataKeyInfo("measurementSecret"), "key-measurementSecret");
  assert.equal(
    stateDiskKeyId("0123ABCD-0000-4000-8000-00000000CAFE"),
    "0123abcd-0000-4000-8000-00000000cafe",
  );
});

Deno.test("deriveClusterId() gives the HKDFClusterID vector", async () => {
  const id = await deriveClusterId(HKDF_CLUSTER_ID.secret, HKDF_CLUSTER_ID.salt);
  assert.equal(id.toHex(), HKDF_CLUSTER_ID.output);
});

Deno.test("deriveClusterId() changes with the secret and with the salt", async () => {
  const { secret, salt, output } = HKDF_CLUSTER_ID;
  const otherSalt = salt.slice();
  otherSalt[0] ^= 1;
  const otherSecret = secret.slice();
  otherSecret[0] ^= 1;
  assert.notEqual((await deriveClusterId(secret, otherSalt)).toHex(), output);
  assert.notEqual((await deriveClusterId(otherSecret, salt)).toHex(), output);
});

Deno.test("deriveMeasurementSecret() gives the HKDFMeasurementSecret vector", async () => {
  const kms = new ClusterKms(HKDF_MEASUREMENT_SECRET.secret, HKDF_MEASUREMENT_SECRET.salt);
  assert.equal((await deriveMeasurementSecret(kms)).toHex(), HKDF_MEASUREMENT_SECRET.output);
});

Deno.test("deriveStateDiskKey() gives the HKDFZero and HKDF0xFF vectors", async () => {
  const zero = new ClusterKms(HKDF_ZERO.secret, HKDF_ZERO.salt);
  assert.equal(
    (await deriveStateDiskKey(zero, "00000000-0000-0000-0000-000000000000")).toHex(),
    HKDF_ZERO.output,
  );
  const ff = new ClusterKms(HKDF_FF.secret, HKDF_FF.salt);
  assert.equal(
    (await deriveStateDiskKey(ff, "ffffffff-ffff-ffff-ffff-ffffffffffff")).toHex(),
    HKDF_FF.output,
  );
});

Deno.test("deriveStateDiskKey() lower-cases the disk UUID", async () => {
  const ff = new ClusterKms(HKDF_FF.secret, HKDF_FF.salt);
  assert.equal(
    (await deriveStateDiskKey(ff, "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")).toHex(),
    HKDF_FF.output,
  );
});

Deno.test("the chained example: KMS URI → measurement secret → cluster ID, and the disk key", async () => {
  const kms = setupKms({ storageUri: "storage://no-store", kmsUri: CHAINED_EXAMPLE.kmsUri });
  const measurementSecret = await deriveMeasurementSecret(kms);
  assert.equal(measurementSecret.toHex(), CHAINED_EXAMPLE.measurementSecret);
  const clusterId = await deriveClusterId(measurementSecret, CHAINED_EXAMPLE.measurementSalt);
  assert.equal(clusterId.toHex(), CHAINED_EXAMPLE.clusterId);
  assert.equal((await deriveStateDiskKey(kms, CHAINED_EXAMPLE.diskUuid)).toHex(), CHAINED_EXAMPLE.diskKey);
  const direct = new ClusterKms(CHAINED_EXAMPLE.masterSecret, CHAINED_EXAMPLE.masterSalt);
  assert.equal((await deriveMeasurementSecret(direct)).toHex(), CHAINED_EXAMPLE.measurementSecret);
});
