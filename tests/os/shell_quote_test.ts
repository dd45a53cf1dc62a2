/** src/os/shell_quote.ts: every value comes back from sh as itself. */
import assert from "node:assert/strict";
import { shellQuote } from "../../src/os/shell_quote.ts";
import { runToExit } from "../../src/os/service_process.ts";

Deno.test("shellQuote: sh reads each quoted value back unchanged", async (t) => {
  const values = ["/plain/path", "", "with space", "o'q/p", '$HOME `id` "x"', "a\nb", "-n", "a,b;c&d|e*"];
  for (const value of values) {
    await t.step(JSON.stringify(value), async () => {
      const result = await runToExit("sh", ["-c", `printf %s ${shellQuote(value)}`]);
      assert.equal(result.code, 0);
      assert.equal(result.stdoutLines.join("\n"), value);
    });
  }
});
