import assert from "node:assert/strict";
import { toHex } from "../../src/attestation/attestation.ts";
import { ClusterKMS } from "../../src/kms/cluster_kms.ts";
import {
  CLUSTER_ID_INFO,
  dataKeyInfo,
  DEK_PREFIX,
  deriveClusterID,
  deriveMeasurementSecret,
  deriveStateDiskKey,
  MEASUREMENT_SECRET_KEY_ID,
  stateDiskKeyID,
} from "../../src/kms/keys.ts";
import { setupKMS } from "../../src/kms/setup.ts";
import { CHAINED_EXAMPLE, HKDF_CLUSTER_ID, HKDF_FF, HKDF_MEASUREMENT_SECRET, HKDF_ZERO } from "./vectors.ts";

Deno.test("key IDs and info strings are the original's", () => {
  assert.equal(DEK_PREFIX, "key-");
  assert.equal(MEASUREMENT_SECRET_KEY_ID, "measurementSecret");
  assert.equal(CLUSTER_ID_INFO, "key-clusterID");
  assert.equal(dataKeyInfo("measurementSecret"), "key-measurementSecret");
  assert.equal(
    stateDiskKeyID("0123ABCD-0000-4000-8000-00000000CAFE"),
    "0123abcd-0000-4000-8000-00000000cafe",
  );
});

Deno.test("deriveClusterID() gives the HKDFClusterID vector", async () => {
  const id = await deriveClusterID(HKDF_CLUSTER_ID.secret, HKDF_CLUSTER_ID.salt);
  assert.equal(toHex(id), HKDF_CLUSTER_ID.output);
});

Deno.test("deriveClusterID() changes with the secret and with the salt", async () => {
  const { secret, salt, output } = HKDF_CLUSTER_ID;
  const otherSalt = salt.slice();
  otherSalt[0] ^= 1;
  const otherSecret = secret.slice();
  otherSecret[0] ^= 1;
  assert.notEqual(toHex(await deriveClusterID(secret, otherSalt)), output);
  assert.notEqual(toHex(await deriveClusterID(otherSecret, salt)), output);
});

Deno.test("deriveMeasurementSecret() gives the HKDFMeasurementSecret vector", async () => {
  const kms = new ClusterKMS(HKDF_MEASUREMENT_SECRET.secret, HKDF_MEASUREMENT_SECRET.salt);
  assert.equal(toHex(await deriveMeasurementSecret(kms)), HKDF_MEASUREMENT_SECRET.output);
});

Deno.test("deriveStateDiskKey() gives the HKDFZero and HKDF0xFF vectors", async () => {
  const zero = new ClusterKMS(HKDF_ZERO.secret, HKDF_ZERO.salt);
  assert.equal(
    toHex(await deriveStateDiskKey(zero, "00000000-0000-0000-0000-000000000000")),
    HKDF_ZERO.output,
  );
  const ff = new ClusterKMS(HKDF_FF.secret, HKDF_FF.salt);
  assert.equal(toHex(await deriveStateDiskKey(ff, "ffffffff-ffff-ffff-ffff-ffffffffffff")), HKDF_FF.output);
});

Deno.test("deriveStateDiskKey() lower-cases the disk UUID", async () => {
  const ff = new ClusterKMS(HKDF_FF.secret, HKDF_FF.salt);
  assert.equal(toHex(await deriveStateDiskKey(ff, "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")), HKDF_FF.output);
});

Deno.test("the chained example: KMS URI → measurement secret → cluster ID, and the disk key", async () => {
  const kms = setupKMS({ storageUri: "storage://no-store", kmsUri: CHAINED_EXAMPLE.kmsUri });
  const measurementSecret = await deriveMeasurementSecret(kms);
  assert.equal(toHex(measurementSecret), CHAINED_EXAMPLE.measurementSecret);
  const clusterID = await deriveClusterID(measurementSecret, CHAINED_EXAMPLE.measurementSalt);
  assert.equal(toHex(clusterID), CHAINED_EXAMPLE.clusterID);
  assert.equal(toHex(await deriveStateDiskKey(kms, CHAINED_EXAMPLE.diskUUID)), CHAINED_EXAMPLE.diskKey);
  const direct = new ClusterKMS(CHAINED_EXAMPLE.masterSecret, CHAINED_EXAMPLE.masterSalt);
  assert.equal(toHex(await deriveMeasurementSecret(direct)), CHAINED_EXAMPLE.measurementSecret);
});
