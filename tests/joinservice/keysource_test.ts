import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";
import { createKeyServiceClient } from "../../src/keyservice/client.ts";
import { keySource } from "../../src/joinservice/keysource.ts";
import { Rejection } from "../../src/rpc/rejection.ts";

/** Awaits `call`, which must reject with a "key-service-unavailable" rejection (Unavailable). */
async function expectUnavailable(call: Promise<unknown>): Promise<Rejection> {
  const error = await call.then(() => undefined, (e: unknown) => e);
  assert.ok(error instanceof Rejection, `want a Rejection, got ${error}`);
  assert.equal(error.reason, "key-service-unavailable");
  assert.equal(Code[error.code], "Unavailable");
  return error;
}

Deno.test("a key service that accepts but never answers is unavailable to the join service, not a timeout", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const connection of listener) held.push(connection);
  })();
  try {
    using client = createKeyServiceClient({ endpoint: `127.0.0.1:${listener.addr.port}`, timeoutMs: 300 });
    const keys = keySource(client);
    const error = await expectUnavailable(keys.getDataKey("measurementSecret", 32, {}));
    assert.match(error.message, /^key service unavailable: /);
  } finally {
    listener.close();
    await accepting.catch(() => {});
    for (const connection of held) connection.close();
  }
});

Deno.test("a key service that refuses connections is unavailable to the join service", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  using client = createKeyServiceClient({ endpoint: `127.0.0.1:${port}`, timeoutMs: 2000 });
  const keys = keySource(client);
  await expectUnavailable(keys.getDataKey("measurementSecret", 32, {}));
});
