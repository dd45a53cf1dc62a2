/**
 * parseFlags (src/flags/flags.ts): node:util's parse errors as one short
 * line naming the flag and what is wrong with it.
 */
import assert from "node:assert/strict";
import { parseFlags, UsageError } from "../../src/flags/flags.ts";

Deno.test("parseFlags names the flag and what is wrong with it", async (t) => {
  const options = { out: { type: "string" }, "print-hex": { type: "boolean" } } as const;
  const rows: { name: string; args: string[]; want: string }[] = [
    { name: "an unknown flag", args: ["--bogus"], want: "unknown flag --bogus" },
    { name: "a value flag without its value", args: ["--out"], want: "flag --out needs a value" },
    {
      name: "a value flag followed by a flag",
      args: ["--out", "--print-hex"],
      want: 'flag --out needs a value (write --out=<value> for one starting with "-")',
    },
    {
      name: "a value given to a boolean flag",
      args: ["--print-hex=false"],
      want: "flag --print-hex takes no value",
    },
    {
      name: "a positional argument",
      args: ["k.bin"],
      want: "unexpected argument k.bin: the cli recover takes only flags",
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.throws(
        () => parseFlags(row.args, options, "cli recover"),
        (error) => error instanceof UsageError && error.message === row.want,
      );
    });
  }
});
