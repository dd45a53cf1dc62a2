import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { createKeyServiceClient } from "../../src/keyservice/client.ts";
import { keySource } from "../../src/joinservice/dependencies.ts";

Deno.test("a key service that accepts but never answers is Unavailable to the join service, not a timeout", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const connection of listener) held.push(connection);
  })();
  try {
    using client = createKeyServiceClient({ endpoint: `127.0.0.1:${listener.addr.port}`, timeoutMs: 300 });
    const keys = keySource(client);
    const error = await keys.getDataKey("measurementSecret", 32, {}).then(() => undefined, (e) => e);
    assert.ok(error instanceof ConnectError);
    assert.equal(Code[error.code], "Unavailable", error.rawMessage);
    assert.match(error.rawMessage, /^key service unavailable: /);
  } finally {
    listener.close();
    await accepting.catch(() => {});
    for (const connection of held) connection.close();
  }
});

Deno.test("a key service that refuses connections is Unavailable to the join service", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  using client = createKeyServiceClient({ endpoint: `127.0.0.1:${port}`, timeoutMs: 2000 });
  const keys = keySource(client);
  const error = await keys.getDataKey("measurementSecret", 32, {}).then(() => undefined, (e) => e);
  assert.ok(error instanceof ConnectError);
  assert.equal(Code[error.code], "Unavailable", error.rawMessage);
});
