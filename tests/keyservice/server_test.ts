import assert from "node:assert/strict";
import { Code, createClient } from "@connectrpc/connect";
import { API } from "../../src/gen/kms/kms_pb.ts";
import { createKeyServiceClient } from "../../src/keyservice/client.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import type { DataKeySource } from "../../src/keyservice/server.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { HKDF_FF, HKDF_ZERO } from "../kms/vectors.ts";
import { withKeyService } from "./in_process_server.ts";
import { serveRpc } from "../../src/rpc/server.ts";
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

Deno.test("GetDataKeys answers each key as GetDataKey would; a bad request fails only its own key", async () => {
  const ffUuid = "ffffffff-ffff-ffff-ffff-ffffffffffff";
  await withKeyService(zeroKms(), async (endpoint, logs) => {
    using connection = connectRpc({ baseUrl: `http://${endpoint}`, protocol: "grpc" });
    const client = createClient(API, connection.transport);
    const { outcomes } = await client.getDataKeys({
      requests: [
        { dataKeyId: ZERO_UUID, length: 32 },
        { dataKeyId: "", length: 32 },
        { dataKeyId: ZERO_UUID, length: 0 },
        { dataKeyId: ZERO_UUID, length: 8161 },
        { dataKeyId: ffUuid, length: 16 },
      ],
    });
    assert.deepEqual(
      outcomes.map(({ outcome }) => outcome.case === "dataKey" ? outcome.value.toHex() : outcome.value),
      [
        HKDF_ZERO.output,
        { $typeName: "kms.DataKeyError", code: Code.InvalidArgument, message: "no data key ID specified" },
        {
          $typeName: "kms.DataKeyError",
          code: Code.InvalidArgument,
          message: "can't derive key with length zero",
        },
        {
          $typeName: "kms.DataKeyError",
          code: Code.InvalidArgument,
          message: "can't derive key with length 8161: the maximum is 8160 bytes",
        },
        (await zeroKms().getDek(`key-${ffUuid}`, 16)).toHex(),
      ],
    );
    const entry = JSON.parse(logs.at(-1)!);
    assert.deepEqual([entry.msg, entry.keys, entry.keyIds], ["GetDataKeys", 5, [
      ZERO_UUID,
      "",
      ZERO_UUID,
      ZERO_UUID,
    ]]);
    assert.ok(!logs.join("\n").includes(HKDF_ZERO.output), "no key in the logs");
  });
});

Deno.test("GetDataKeys refuses no keys, more than 64 keys and more than 16,320 bytes of keys", async () => {
  await withKeyService(zeroKms(), async (endpoint) => {
    using connection = connectRpc({ baseUrl: `http://${endpoint}`, protocol: "connect" });
    const client = createClient(API, connection.transport);
    await expectConnectError(
      client.getDataKeys({ requests: [] }),
      Code.InvalidArgument,
      "no data keys requested",
    );
    const requests = Array.from({ length: 65 }, (_, i) => ({ dataKeyId: `k${i}`, length: 1 }));
    await expectConnectError(
      client.getDataKeys({ requests }),
      Code.InvalidArgument,
      "65 data keys requested: the maximum is 64 per call",
    );
    assert.equal((await client.getDataKeys({ requests: requests.slice(0, 64) })).outcomes.length, 64);
    const long = [{ dataKeyId: "a", length: 8160 }, { dataKeyId: "b", length: 8160 }];
    assert.equal((await client.getDataKeys({ requests: long })).outcomes.length, 2);
    await expectConnectError(
      client.getDataKeys({ requests: [...long, { dataKeyId: "c", length: 1 }] }),
      Code.InvalidArgument,
      "16321 bytes of data keys requested: the maximum is 16320 per call",
    );
  });
});

Deno.test("a client's concurrent getDataKey calls go out together while one is in flight", async () => {
  const kms = zeroKms();
  const gate = Promise.withResolvers<void>();
  const gated: DataKeySource = {
    getDek: async (id, length) => {
      await gate.promise;
      return kms.getDek(id, length);
    },
  };
  await withKeyService(gated, async (endpoint, logs) => {
    using client = createKeyServiceClient({ endpoint });
    const ids = Array.from({ length: 6 }, (_, i) => `0000000${i}-0000-0000-0000-000000000000`);
    const keys = ids.map((id) => client.getDataKey(id, 32));
    while (logs.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    gate.resolve();
    const derived = await Promise.all(ids.map((id) => kms.getDek(`key-${id}`, 32)));
    assert.deepEqual(await Promise.all(keys), derived);
    const calls = logs.map((line) => JSON.parse(line)).map((entry) => [entry.msg, entry.keys ?? entry.keyId]);
    assert.deepEqual(calls, [["GetDataKey", ids[0]], ["GetDataKeys", 5]]);
  });
});

Deno.test("a client's keys all arrive from a key service without GetDataKeys, each by GetDataKey", async () => {
  const kms = zeroKms();
  const calls: string[] = [];
  const gate = Promise.withResolvers<void>();
  const server = await serveRpc({
    routes: (router) =>
      router.service(API, {
        async getDataKey(request) {
          calls.push(request.dataKeyId);
          await gate.promise;
          return { dataKey: await kms.getDek(`key-${request.dataKeyId}`, request.length) };
        },
      }),
    hostname: "127.0.0.1",
    port: 0,
  });
  try {
    using client = createKeyServiceClient({ endpoint: `127.0.0.1:${server.address.port}` });
    const ids = ["a", "b", "c", "d"];
    const keys = ids.map((id) => client.getDataKey(id, 32));
    while (calls.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    gate.resolve();
    const derived = await Promise.all(ids.map((id) => kms.getDek(`key-${id}`, 32)));
    assert.deepEqual(await Promise.all(keys), derived);
    assert.deepEqual(
      calls.toSorted(),
      ids,
      "after one refused GetDataKeys, each key in a GetDataKey of its own",
    );
  } finally {
    await server.shutdown();
  }
});
