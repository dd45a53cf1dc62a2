import assert from "node:assert/strict";
import {
  computeReportData,
  encodeReportDataInput,
  initAttestationRequestDigest,
  joinRequestDigest,
  type JoinRequestFields,
  rejoinRequestDigest,
  sealInfo,
} from "../../src/atls/reportdata.ts";

// The worked example of docs/attested-exchange.md ("Test vectors"), computed
// independently of this code (Python hashlib).
const nonce = Uint8Array.from({ length: 73 }, (_, i) => i);
const publicKey = Uint8Array.from({ length: 32 }, (_, i) => 0x80 + i);
const diskUuid = "00000000-0000-4000-8000-000000000001";
const join: JoinRequestFields = {
  diskUuid,
  certificateRequest: Uint8Array.of(0x30, 0x82, 0x01, 0x00),
  isControlPlane: true,
  hostPublicKey: new TextEncoder().encode("ssh-ed25519 AAAA"),
  hostCertificatePrincipals: ["node-1", "10.0.0.1"],
};

Deno.test("request digests match the documented vectors", async () => {
  assert.equal(
    (await rejoinRequestDigest({ diskUuid })).toHex(),
    "843af12a623e5615ddfe33f2e98ae345e11318b96b3bbf8e0008f95b71dd335b",
  );
  assert.equal(
    (await joinRequestDigest(join)).toHex(),
    "071ff91bb27eb60fb6677d6f3dadf9581fc25c1d38cecc72246e939971457da1",
  );
  assert.equal(
    (await initAttestationRequestDigest()).toHex(),
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  );
});

Deno.test("report data encoding and digest match the documented rejoin vector", async () => {
  const requestDigest = await rejoinRequestDigest({ diskUuid });
  const input = { purpose: "rejoin" as const, nonce, publicKey, requestDigest };
  assert.equal(
    encodeReportDataInput(input).toHex(),
    "00000022636f6e7374656c6c6174696f6e2d74732061747465737465642065786368616e6765" + // label
      "0000000101" + // version
      "0000000672656a6f696e" + // purpose "rejoin"
      "00000049" + nonce.toHex() +
      "00000020" + publicKey.toHex() +
      "00000020843af12a623e5615ddfe33f2e98ae345e11318b96b3bbf8e0008f95b71dd335b",
  );
  assert.equal(
    (await computeReportData(input)).toHex(),
    "4ac0265865c4385a9e8e532418b312a4b27c95bccdf754fe9aacd7bad389a7a9",
  );
});

Deno.test("report data matches the documented join and init-attestation vectors", async () => {
  assert.equal(
    (await computeReportData({
      purpose: "join",
      nonce,
      publicKey,
      requestDigest: await joinRequestDigest(join),
    })).toHex(),
    "84a96c65e0ef3156bfbb935f0667f6f121d508a78f3ab257ae0e903232aca7ea",
  );
  assert.equal(
    (await computeReportData({
      purpose: "init-attestation",
      nonce,
      publicKey,
      requestDigest: await initAttestationRequestDigest(),
    })).toHex(),
    "74492ab79eddd1e4f75e2435ae3c668e05c4630e8ae4257fdec92aa1db13301e",
  );
});

Deno.test("HPKE info matches the documented encoding", () => {
  assert.equal(
    sealInfo("rejoin", "response").toHex(),
    "00000022636f6e7374656c6c6174696f6e2d74732061747465737465642065786368616e6765" +
      "0000000101" + "0000000672656a6f696e" + "00000008726573706f6e7365",
  );
  assert.notEqual(sealInfo("join", "response").toHex(), sealInfo("rejoin", "response").toHex());
  assert.notEqual(
    sealInfo("init-attestation", "request").toHex(),
    sealInfo("init-attestation", "response").toHex(),
  );
});

Deno.test("every bound input changes the report data", async () => {
  const requestDigest = await rejoinRequestDigest({ diskUuid });
  const base = { purpose: "rejoin" as const, nonce, publicKey, requestDigest };
  const reference = (await computeReportData(base)).toHex();
  const flip = (bytes: Uint8Array) => {
    const copy = new Uint8Array(bytes);
    copy[copy.length - 1] ^= 1;
    return copy;
  };
  const variants = [
    { ...base, purpose: "join" as const },
    { ...base, nonce: flip(nonce) },
    { ...base, publicKey: flip(publicKey) },
    { ...base, requestDigest: flip(requestDigest) },
  ];
  for (const variant of variants) assert.notEqual((await computeReportData(variant)).toHex(), reference);
});

Deno.test("length prefixes keep field boundaries apart", async () => {
  // Without length prefixes these two requests would concatenate to the same bytes.
  const a = await joinRequestDigest({
    ...join,
    diskUuid: "ab",
    certificateRequest: Uint8Array.fromHex("63"),
  });
  const b = await joinRequestDigest({
    ...join,
    diskUuid: "a",
    certificateRequest: Uint8Array.fromHex("6263"),
  });
  assert.notEqual(a.toHex(), b.toHex());
  const onePrincipal = await joinRequestDigest({ ...join, hostCertificatePrincipals: ["node-110.0.0.1"] });
  assert.notEqual(onePrincipal.toHex(), (await joinRequestDigest(join)).toHex());
  const empty = await joinRequestDigest({ ...join, hostCertificatePrincipals: [""] });
  assert.notEqual(
    empty.toHex(),
    (await joinRequestDigest({ ...join, hostCertificatePrincipals: [] })).toHex(),
  );
});

Deno.test("each join field is bound, the role included", async () => {
  const reference = (await joinRequestDigest(join)).toHex();
  const changed: JoinRequestFields[] = [
    { ...join, diskUuid: diskUuid.replace("1", "2") },
    { ...join, certificateRequest: Uint8Array.of(0x30, 0x82, 0x01, 0x01) },
    { ...join, isControlPlane: false },
    { ...join, hostPublicKey: new Uint8Array(0) },
    { ...join, hostCertificatePrincipals: ["10.0.0.1", "node-1"] },
  ];
  for (const fields of changed) assert.notEqual((await joinRequestDigest(fields)).toHex(), reference);
});

Deno.test("the disk UUID is bound exactly as sent, case included", async () => {
  const lower = await rejoinRequestDigest({ diskUuid: "8f1c7c3e-5b0a-4c2e-9d3a-1f2e3d4c5b6a" });
  const upper = await rejoinRequestDigest({ diskUuid: "8F1C7C3E-5B0A-4C2E-9D3A-1F2E3D4C5B6A" });
  assert.notEqual(lower.toHex(), upper.toHex());
});

Deno.test("a request digest of the wrong length is refused", () => {
  assert.throws(
    () => encodeReportDataInput({ purpose: "join", nonce, publicKey, requestDigest: new Uint8Array(31) }),
    { name: "RangeError", message: /request digest must be 32 bytes, got 31/ },
  );
});
