/**
 * jsonSyntaxError (src/json/syntax_error.ts): a parse error as one line that
 * quotes none of the text.
 */
import assert from "node:assert/strict";
import { jsonSyntaxError } from "../../src/json/syntax_error.ts";

function parseError(text: string): unknown {
  try {
    JSON.parse(text);
  } catch (error) {
    return error;
  }
  throw new Error("parsed");
}

Deno.test("jsonSyntaxError keeps the parser's reason and position, never the text", async (t) => {
  const rows: { name: string; text: string; want: RegExp; notIn?: string }[] = [
    { name: "a word", text: "not json, secret-123", want: /^Unexpected token 'o'$/, notIn: "secret-123" },
    {
      name: "a longer text, whose excerpt V8 shortens with ... after it",
      text: '{"key": QmFzZTY0U2VjcmV0S2V5VmFsdWU=, "b": 2, "c": 3}',
      want: /^Unexpected token 'Q'$/,
      notIn: "QmFz",
    },
    {
      name: "an error deep in a longer text, shortened on both sides",
      text: '{"a": 1, "b": 2, "c": 3, "key": QmFzZTY0U2VjcmV0S2V5VmFsdWU=}',
      want: /^Unexpected token 'Q'$/,
      notIn: "QmFz",
    },
    {
      name: "a line break in the text",
      text: '{\n"key": x\nsecret',
      want: /^Unexpected token/,
      notIn: "secret",
    },
    { name: "cut short", text: '{"key": "abc', want: /^Unterminated string in JSON at position \d+/ },
    { name: "empty", text: "", want: /^Unexpected end of JSON input$/ },
    {
      name: "an escape sequence",
      text: "\x1b]0;pwned\x07",
      want: /^Unexpected token '\\u001b'$/,
      notIn: "pwned",
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      const message = jsonSyntaxError(parseError(row.text));
      assert.match(message, row.want);
      assert.ok(!message.includes("\n") && !message.includes("\x1b"), JSON.stringify(message));
      if (row.notIn) assert.ok(!message.includes(row.notIn), message);
    });
  }
});
