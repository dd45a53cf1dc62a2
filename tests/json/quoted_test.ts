/**
 * quoted() (src/json/quoted.ts): a value from elsewhere as JSON for an error
 * message, every control character escaped and cut short.
 */
import assert from "node:assert/strict";
import { quoted } from "../../src/json/quoted.ts";

Deno.test("quoted() escapes every control character and cuts long values", async (t) => {
  const rows: { name: string; value: unknown; max?: number; want: string }[] = [
    { name: "a plain string", value: "qemu-vtpm", want: '"qemu-vtpm"' },
    { name: "a number", value: 4, want: "4" },
    { name: "an object", value: { a: [1] }, want: '{"a":[1]}' },
    { name: "undefined", value: undefined, want: "undefined" },
    { name: "ESC and a line break (C0)", value: "\x1b[2J\n", want: '"\\u001b[2J\\n"' },
    { name: "the one-byte CSI (C1), which JSON.stringify leaves", value: "\x9b2J", want: '"\\u009b2J"' },
    { name: "DEL, which JSON.stringify leaves", value: "a\x7fb", want: '"a\\u007fb"' },
    { name: "a long value: cut to 64 characters", value: "x".repeat(1000), want: `"${"x".repeat(63)}…` },
    { name: "a long value: cut to max", value: "x".repeat(1000), max: 10, want: `"${"x".repeat(9)}…` },
    { name: "exactly max: not cut", value: "x".repeat(62), want: `"${"x".repeat(62)}"` },
  ];
  for (const row of rows) {
    await t.step(row.name, () => assert.equal(quoted(row.value, row.max), row.want));
  }
});
