import { Code } from "@connectrpc/connect";
import { createKeyServiceClient } from "../../src/keyservice/client.ts";
import { keySource } from "../../src/joinservice/dependencies.ts";
import { expectConnectError } from "../support/connect_error.ts";

Deno.test("a key service that accepts but never answers is Unavailable to the join service, not a timeout", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const connection of listener) held.push(connection);
  })();
  try {
    const keys = keySource(
      createKeyServiceClient({ endpoint: `127.0.0.1:${listener.addr.port}`, timeoutMs: 300 }),
    );
    await expectConnectError(
      keys.getDataKey("measurementSecret", 32, {}),
      Code.Unavailable,
      /^key service unavailable: /,
    );
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
  const keys = keySource(createKeyServiceClient({ endpoint: `127.0.0.1:${port}`, timeoutMs: 2000 }));
  await expectConnectError(keys.getDataKey("measurementSecret", 32, {}), Code.Unavailable);
});
