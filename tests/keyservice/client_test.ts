import assert from "node:assert/strict";
import { freePort } from "../../src/net/free_port.ts";
import { Code, ConnectError } from "@connectrpc/connect";
import { createKeyServiceClient, isRetryableKeyServiceError } from "../../src/keyservice/client.ts";
import type { DataKeySource } from "../../src/keyservice/server.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { HKDF_ZERO } from "../kms/vectors.ts";
import { withKeyService } from "./in_process_server.ts";
import { expectConnectError } from "../support/connect_error.ts";

const ZERO_UUID = "00000000-0000-0000-0000-000000000000";

async function assertConnectError(
  call: Promise<unknown>,
  code: Code,
  retryable: boolean,
): Promise<ConnectError> {
  const caught = await expectConnectError(call, code);
  assert.equal(isRetryableKeyServiceError(caught), retryable);
  return caught;
}

/** A KMS whose answers wait until `release()`. */
function gatedKms(): DataKeySource & { release(): void } {
  const kms = new ClusterKms(HKDF_ZERO.secret, HKDF_ZERO.salt);
  const gate = Promise.withResolvers<void>();
  return {
    getDek: async (id, length) => {
      await gate.promise;
      return kms.getDek(id, length);
    },
    release: () => gate.resolve(),
  };
}

Deno.test("createKeyServiceClient() accepts host:port and rejects anything else", () => {
  for (const endpoint of ["127.0.0.1:9000", "key-service.kube-system:9000", "[::1]:9000", "localhost:1"]) {
    createKeyServiceClient({ endpoint });
  }
  for (
    const endpoint of [
      "",
      "key-service",
      "http://host:9000",
      "host:0",
      "host:65536",
      "host:9000/x",
      "a b:1",
      ":9000",
    ]
  ) {
    assert.throws(() => createKeyServiceClient({ endpoint }), {
      name: "TypeError",
      message: `invalid key service endpoint "${endpoint}": want host:port`,
    });
  }
});

Deno.test("getDataKey() reports an unreachable key service as Unavailable (retryable)", async () => {
  using client = createKeyServiceClient({ endpoint: `127.0.0.1:${freePort()}`, timeoutMs: 5000 });
  await assertConnectError(client.getDataKey(ZERO_UUID, 32), Code.Unavailable, true);
});

Deno.test("getDataKey() gives up at its deadline with DeadlineExceeded (retryable)", async () => {
  const kms = gatedKms();
  await withKeyService(kms, async (endpoint) => {
    using client = createKeyServiceClient({ endpoint, timeoutMs: 100 });
    const started = Date.now();
    await assertConnectError(client.getDataKey(ZERO_UUID, 32), Code.DeadlineExceeded, true);
    assert.ok(Date.now() - started < 2000, "the deadline holds");
    kms.release();
  });
});

Deno.test("getDataKey() stops when its signal aborts, with Canceled (not retryable)", async () => {
  const kms = gatedKms();
  await withKeyService(kms, async (endpoint) => {
    using client = createKeyServiceClient({ endpoint });
    const controller = new AbortController();
    const call = client.getDataKey(ZERO_UUID, 32, { signal: controller.signal });
    setTimeout(() => controller.abort(), 50);
    await assertConnectError(call, Code.Canceled, false);
    kms.release();
  });
});

Deno.test("getDataKey() passes InvalidArgument through (not retryable) and works again after", async () => {
  await withKeyService(new ClusterKms(HKDF_ZERO.secret, HKDF_ZERO.salt), async (endpoint) => {
    using client = createKeyServiceClient({ endpoint });
    const err = await assertConnectError(client.getDataKey(ZERO_UUID, 0), Code.InvalidArgument, false);
    assert.equal(err.rawMessage, "can't derive key with length zero");
    assert.equal((await client.getDataKey(ZERO_UUID, 32)).toHex(), HKDF_ZERO.output);
  });
});

Deno.test("getDataKey() rejects a key of the wrong length as Internal", async () => {
  const wrongLength: DataKeySource = { getDek: () => Promise.resolve(new Uint8Array(5)) };
  await withKeyService(wrongLength, async (endpoint) => {
    using client = createKeyServiceClient({ endpoint });
    const err = await assertConnectError(client.getDataKey(ZERO_UUID, 32), Code.Internal, false);
    assert.equal(err.rawMessage, "key service returned 5 bytes, want 32");
  });
});
