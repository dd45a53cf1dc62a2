import assert from "node:assert/strict";
import { checkRejoinRequest, printable } from "../../src/joinservice/requestchecks.ts";

Deno.test("printable: a request field fit for one log line", async (t) => {
  const rows: { name: string; value: string; expected: string }[] = [
    { name: "plain text unchanged", value: "0f3c-uuid", expected: "0f3c-uuid" },
    { name: "line breaks escaped", value: "a\nb\rc", expected: "a\\u000ab\\u000dc" },
    { name: "ESC and DEL escaped", value: "\u001b[2Kok\u007f", expected: "\\u001b[2Kok\\u007f" },
    { name: "C1 CSI escaped", value: "\u009b31m", expected: "\\u009b31m" },
    {
      name: "cut to 80 characters before escaping",
      value: "x".repeat(79) + "\n" + "y".repeat(50),
      expected: "x".repeat(79) + "\\u000a",
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => assert.equal(printable(row.value), row.expected));
  }
});

Deno.test("a disk UUID that is none is quoted once, escaped and cut", () => {
  assert.throws(() => checkRejoinRequest({ diskUuid: "\u001b[2Jx" }), (error: Error) => {
    assert.equal(
      error.message,
      'disk_uuid must be a UUID like 0123abcd-0000-4000-8000-00000000cafe, got "\\u001b[2Jx"',
    );
    return true;
  });
  assert.throws(() => checkRejoinRequest({ diskUuid: "a".repeat(500) }), /got "a{79}…$/);
});
