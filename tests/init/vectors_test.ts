/**
 * The test vectors of docs/attested-exchange.md §7.6: report data, HPKE
 * info strings, and one sealed InitRequest and InitSuccessResponse that must
 * open with keys derived (RFC 9180 DeriveKeyPair) from fixed seeds.
 */
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Aes256Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import type { HpkeKeyPair } from "../../src/atls/hpke.ts";
import { encodeReportDataInput, initAttestationRequestDigest } from "../../src/atls/reportdata.ts";
import { SealedSchema } from "../../src/gen/atls/v1/atls_pb.ts";
import {
  INIT_PURPOSE,
  INIT_REQUEST_INFO,
  INIT_RESPONSE_INFO,
  initReportData,
  openInitRequest,
  openInitSuccess,
} from "../../src/init/protocol.ts";

const hex = (s: string) => Uint8Array.fromHex(s.replaceAll(/\s/g, ""));
const suite = new CipherSuite({
  kem: new DhkemX25519HkdfSha256(),
  kdf: new HkdfSha256(),
  aead: new Aes256Gcm(),
});

async function derived(seedByte: number): Promise<HpkeKeyPair> {
  const keys = await suite.kem.deriveKeyPair(new Uint8Array(32).fill(seedByte));
  return { keys, publicKey: new Uint8Array(await suite.kem.serializePublicKey(keys.publicKey)) };
}

const NONCE = Uint8Array.from({ length: 32 }, (_, i) => i);
const NODE_PUBLIC_KEY = "41852320ff367495fa522c94cb83af391e4e89018392725bbf2098dd931bc424";
const CLIENT_PUBLIC_KEY = "6080bbe51005ea9acc863580ce57317d46bef6333558d5bfa97e461342985005";
const REPORT_DATA = "d7d75c8bcb8f6e3dd51cd1e14f1822c3cb76ab9ce8fceef4895a35e35a902252";

Deno.test("init vectors: keys derived from the seeds", async () => {
  assert.equal((await derived(0x01)).publicKey.toHex(), NODE_PUBLIC_KEY);
  assert.equal((await derived(0x02)).publicKey.toHex(), CLIENT_PUBLIC_KEY);
});

Deno.test("init vectors: report data and its input", async () => {
  const input = encodeReportDataInput({
    purpose: INIT_PURPOSE,
    nonce: NONCE,
    publicKey: hex(NODE_PUBLIC_KEY),
    requestDigest: await initAttestationRequestDigest(),
  });
  assert.equal(
    input.toHex(),
    "00000022636f6e7374656c6c6174696f6e2d74732061747465737465642065786368616e6765" +
      "0000000101" + "00000010696e69742d6174746573746174696f6e" +
      "00000020000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" +
      "00000020" + NODE_PUBLIC_KEY +
      "00000020e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  );
  assert.equal((await initReportData(NONCE, hex(NODE_PUBLIC_KEY))).toHex(), REPORT_DATA);
});

Deno.test("init vectors: HPKE info strings", () => {
  const prefix = "00000022636f6e7374656c6c6174696f6e2d74732061747465737465642065786368616e6765" +
    "0000000101" + "00000010696e69742d6174746573746174696f6e";
  assert.equal(INIT_REQUEST_INFO.toHex(), prefix + "0000000772657175657374");
  assert.equal(INIT_RESPONSE_INFO.toHex(), prefix + "00000008726573706f6e7365");
});

Deno.test("init vectors: the sealed request opens with the node's key, the sealed success with the client's", async () => {
  const request = await openInitRequest(
    await derived(0x01),
    create(SealedSchema, {
      encapsulatedKey: hex("9a369304039577b831034130529ecb874f56c074d1bdb0104e6de997d0d2ea36"),
      ciphertext: hex(
        "7f18c196133c0bbef27fc8e02c8df72ec9071808e25d8c72929435ed7517090642d28a8023388dfb796a6125bfc6d2b0fcead2fcdf24465166e3b03c",
      ),
    }),
    hex(REPORT_DATA),
  );
  assert.equal(request.kubernetesVersion, "v1.30.2");
  assert.equal(request.clientPublicKey.toHex(), CLIENT_PUBLIC_KEY);

  const sealedSuccess = create(SealedSchema, {
    encapsulatedKey: hex("84f0c7e5ba049497ea953c5c1eec808a7ed6e0b492d2a66362d501c42e650a5d"),
    ciphertext: hex(
      "8aa7369b4b9e5dff112f8a87fe14faedd5414d2ea49f6eddf6a9d4583faa7f3bf87abdfeca42ed39539a45544784ea78d078ead2e494ba96f3ea64a4ce64",
    ),
  });
  const success = await openInitSuccess(await derived(0x02), sealedSuccess, hex(REPORT_DATA));
  assert.equal(new TextDecoder().decode(success.kubeconfig), "kubeconfig");
  assert.equal(success.clusterId.toHex(), "cc".repeat(32));

  // Neither opens as the other direction, nor under other report data.
  await assert.rejects(openInitRequest(await derived(0x02), sealedSuccess, hex(REPORT_DATA)));
  await assert.rejects(openInitSuccess(await derived(0x02), sealedSuccess, new Uint8Array(32)));
});
