/**
 * freePort (src/net/free_port.ts): a port our own port-0 listeners cannot
 * take before its server binds it (they draw from Linux's ephemeral range,
 * 32768–60999 by default).
 */
import assert from "node:assert/strict";
import { freePort } from "../../src/net/free_port.ts";

Deno.test("freePort gives distinct ports below the ephemeral range that a server can then bind", () => {
  const ports = new Set<number>();
  for (let i = 0; i < 200; i++) {
    const port = freePort();
    assert.ok(!ports.has(port), `port ${port} handed out twice`);
    ports.add(port);
    assert.ok(port >= 20_000 && port < 32_768, `port ${port}`);
    Deno.listen({ hostname: "127.0.0.1", port }).close();
  }
});
