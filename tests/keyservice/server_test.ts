import assert from "node:assert/strict";
import { Code, createClient } from "@connectrpc/connect";
import { API } from "../../src/gen/kms/kms_pb.ts";
import { createKeyServiceClient } from "../../src/keyservice/client.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import type { DataKeySource } from "../../src/keyservice/server.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { HKDF_FF, HKDF_ZERO } from "../kms/vectors.ts";
import { withKeyService } from "./in_process_server.ts";
import { expectConnectError } from "../support/connect_error.ts";

const zeroKms = () => new ClusterKms(HKDF_ZERO.secret, HKDF_ZERO.salt);
const ZERO_UUID = "00000000-0000-0000-0000-000000000000";

Deno.test('GetDataKey derives HKDF(master, salt, "key-" + id, length) over gRPC', async () => {
  await withKeyService(zeroKms(), async (endpoint) => {
    using client = createKeyServiceClient({ endpoint, timeoutMs: 5000 });
    assert.equal((await client.getDataKey(ZERO_UUID, 32)).toHex(), HKDF_ZERO.output);
    assert.equal((await client.getDataKey(ZERO_UUID, 8160)).length, 8160);
    assert.equal((await client.getDataKey(ZERO_UUID, 1)).length, 1);
  });
  await withKeyService(new ClusterKms(HKDF_FF.secret, HKDF_FF.salt), async (endpoint) => {
    using client = createKeyServiceClient({ endpoint });
    assert.equal(
      (await client.getDataKey("ffffffff-ffff-ffff-ffff-ffffffffffff", 32)).toHex(),
      HKDF_FF.output,
    );
    const upper = await client.getDataKey("FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", 32);
    assert.notEqual(upper.toHex(), HKDF_FF.output, "the service does not lower-case IDs; callers do");
  });
});

Deno.test("GetDataKey checks length zero, then the ID, then the maximum length", async () => {
  await withKeyService(zeroKms(), async (endpoint) => {
    using client = createKeyServiceClient({ endpoint });
    await expectConnectError(
      client.getDataKey(ZERO_UUID, 0),
      Code.InvalidArgument,
      "can't derive key with length zero",
    );
    await expectConnectError(
      client.getDataKey("", 0),
      Code.InvalidArgument,
      "can't derive key with length zero",
    );
    await expectConnectError(client.getDataKey("", 32), Code.InvalidArgument, "no data key ID specified");
    await expectConnectError(client.getDataKey("", 8161), Code.InvalidArgument, "no data key ID specified");
    const tooLong = "can't derive key with length 8161: the maximum is 8160 bytes";
    await expectConnectError(client.getDataKey(ZERO_UUID, 8161), Code.InvalidArgument, tooLong);
    await expectConnectError(
      client.getDataKey(ZERO_UUID, 2 ** 32 - 1),
      Code.InvalidArgument,
      "can't derive key with length 4294967295: the maximum is 8160 bytes",
    );
  });
});

Deno.test("GetDataKey answers over the Connect protocol and gRPC-Web on the same port", async () => {
  await withKeyService(zeroKms(), async (endpoint) => {
    const baseUrl = `http://${endpoint}`;
    for (const protocol of ["connect", "grpc-web"] as const) {
      using connection = connectRpc({ baseUrl, protocol });
      const client = createClient(API, connection.transport);
      const response = await client.getDataKey({ dataKeyId: ZERO_UUID, length: 32 });
      assert.equal(response.dataKey.toHex(), HKDF_ZERO.output);
      await expectConnectError(
        client.getDataKey({ dataKeyId: "", length: 32 }),
        Code.InvalidArgument,
        "no data key ID specified",
      );
    }
  });
});

Deno.test("GetDataKey turns a KMS failure into Internal with its message", async () => {
  const failing: DataKeySource = { getDek: () => Promise.reject(new Error("kms unavailable")) };
  await withKeyService(failing, async (endpoint, logs) => {
    using client = createKeyServiceClient({ endpoint });
    await expectConnectError(client.getDataKey(ZERO_UUID, 32), Code.Internal, "kms unavailable");
    assert.ok(logs.some((line) => line.includes('"level":"error"') && line.includes("kms unavailable")));
  });
});

Deno.test("GetDataKey logs the key ID and length at debug, never the key", async () => {
  await withKeyService(zeroKms(), async (endpoint, logs) => {
    using client = createKeyServiceClient({ endpoint });
    const key = await client.getDataKey(ZERO_UUID, 32);
    await client.getDataKey("x".repeat(10_000), 32);
    const entries = logs.map((line) => JSON.parse(line));
    assert.deepEqual(entries[0], {
      ...entries[0],
      level: "debug",
      msg: "GetDataKey",
      keyId: ZERO_UUID,
      length: 32,
      peer: "127.0.0.1",
    });
    assert.equal(entries[1].keyId, `${"x".repeat(128)}…`, "long IDs are shortened in logs");
    const keyForms = [key.toHex(), btoa(String.fromCharCode(...key)), key.join(",")];
    for (const line of logs) for (const form of keyForms) assert.ok(!line.includes(form), line);
  });
});
