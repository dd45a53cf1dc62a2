import assert from "node:assert/strict";
import { parse as parseYaml } from "yaml";
import { parseApplyPatch } from "../../src/localapi/apply_patch.ts";

Deno.test("parseApplyPatch() reads JSON as the YAML parser does", async (t) => {
  const rows: { name: string; body: string }[] = [
    {
      name: "an object",
      body: '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"a":"YQ=="}}',
    },
    {
      name: "nesting, arrays, numbers, booleans, null",
      body: '{"a":[1,2.5,-3e2,{"b":true}],"c":null,"d":{}}',
    },
    { name: "whitespace and newlines", body: ' {\n  "a" : [ "x" , "y" ]\n}\n' },
    { name: "escapes", body: '{"a\\"b":"c\\\\d\\u00e9\\n","e":"\\/"}' },
    {
      name: "YAML block style (not JSON)",
      body: "kind: JoiningNode\nmetadata:\n  name: n\nspec:\n  name: n\n",
    },
    { name: "YAML flow style with bare words", body: "{kind: JoiningNode, spec: {name: n}}" },
  ];
  for (const row of rows) {
    await t.step(row.name, () => assert.deepEqual(parseApplyPatch(row.body), parseYaml(row.body)));
  }
});

Deno.test("parseApplyPatch() refuses what YAML refuses, a repeated key included", async (t) => {
  const rows: { name: string; body: string }[] = [
    { name: "not YAML", body: "a: [unclosed" },
    { name: "repeated key in JSON", body: '{"a":1,"a":2}' },
    { name: "repeated key in a nested JSON object", body: '{"a":{"b":1,"c":{"d":1,"d":1}}}' },
    { name: "repeated key, once escaped", body: '{"a":1,"\\u0061":2}' },
    { name: "repeated key in YAML", body: "a: 1\na: 2\n" },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.throws(() => parseYaml(row.body), "the YAML parser refuses it too");
      assert.throws(() => parseApplyPatch(row.body));
    });
  }
});
