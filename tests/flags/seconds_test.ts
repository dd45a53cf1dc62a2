/**
 * parseSeconds (src/flags/flags.ts): every duration flag of every component
 * (timeouts, intervals), as milliseconds that a timer can hold.
 */
import assert from "node:assert/strict";
import { MAX_TIMEOUT_SECONDS, parseSeconds, UsageError } from "../../src/flags/flags.ts";

Deno.test("parseSeconds takes what a timer can hold and names the flag otherwise", async (t) => {
  const rows: { name: string; value: string; want: number | RegExp }[] = [
    { name: "whole seconds", value: "30", want: 30_000 },
    { name: "a fraction", value: "0.5", want: 500 },
    { name: "one millisecond", value: "0.001", want: 1 },
    { name: "the longest timer", value: String(MAX_TIMEOUT_SECONDS), want: 2_147_483_000 },
    {
      name: "one second more",
      value: "2147484",
      want: /^invalid --wait "2147484": at most 2147483 seconds$/,
    },
    {
      name: "less than a millisecond",
      value: "0.0001",
      want: /^invalid --wait "0.0001": at least 0.001 seconds$/,
    },
    { name: "zero", value: "0", want: /^invalid --wait "0": want a positive number$/ },
    { name: "a unit", value: "5s", want: /want a positive number/ },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      if (typeof row.want === "number") assert.equal(parseSeconds(row.value, "--wait"), row.want);
      else {
        const pattern = row.want;
        assert.throws(
          () => parseSeconds(row.value, "--wait"),
          (e) => e instanceof UsageError && pattern.test(e.message),
        );
      }
    });
  }
});
