/**
 * freePort (src/net/free_port.ts): a port our own port-0 listeners cannot
 * take before its server binds it (they draw from Linux's ephemeral range,
 * 32768–60999 by default).
 */
import assert from "node:assert/strict";
import { freePort } from "../../src/net/free_port.ts";

Deno.test("freePort gives ports below the ephemeral range that a server can then bind", () => {
  for (let i = 0; i < 20; i++) {
    const port = freePort();
    assert.ok(port >= 20_000 && port < 32_768, `port ${port}`);
    Deno.listen({ hostname: "127.0.0.1", port }).close();
  }
});
