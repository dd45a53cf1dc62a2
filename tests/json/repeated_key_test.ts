/**
 * findRepeatedKey and describeRepeatedKey (src/json/repeated_key.ts): an
 * object's repeated key, which `JSON.parse` would let the last one win,
 * found with where it is.
 */
import assert from "node:assert/strict";
import { describeRepeatedKey, findRepeatedKey, type RepeatedKey } from "../../src/json/repeated_key.ts";

Deno.test("findRepeatedKey() tells keys from values, and one object from another", async (t) => {
  const rows: { name: string; json: string; want: RepeatedKey | undefined }[] = [
    { name: "the same key in sibling objects", json: '{"a":{"k":1},"b":{"k":2}}', want: undefined },
    { name: "the same key in objects of an array", json: '[{"k":1},{"k":2}]', want: undefined },
    { name: "a key equal to a value", json: '{"a":"b","b":"a"}', want: undefined },
    { name: "a value with quotes, colons and braces", json: '{"a":"\\",\\"a\\":{","b":1}', want: undefined },
    { name: "a key after an array value", json: '{"a":[1,{"a":2}],"b":3}', want: undefined },
    { name: "a key repeated after an array value", json: '{"a":[1,2],"a":3}', want: { key: "a", path: [] } },
    {
      name: "a key repeated after a nested object",
      json: '{"a":{"x":1},"b":2,"a":3}',
      want: { key: "a", path: [] },
    },
    {
      name: "a repeated key inside an array's object",
      json: '[{"k":1,"k":2}]',
      want: { key: "k", path: [0] },
    },
    { name: "keys differing only by escape", json: '{"\\"":1,"\\u0022":2}', want: { key: '"', path: [] } },
    {
      name: "deep: the keys and indexes to the object",
      json: '{"a":{"x":1},"b":[{"c":[0,{"d":1}]},{"c":[0,0,{"e":1,"e":2}]}]}',
      want: { key: "e", path: ["b", 1, "c", 2] },
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => assert.deepEqual(findRepeatedKey(row.json), row.want));
  }
});

Deno.test("describeRepeatedKey() names the key and where its object is", async (t) => {
  const rows: { name: string; repeated: RepeatedKey; want: string }[] = [
    {
      name: "top level",
      repeated: { key: "variant", path: [] },
      want: 'key "variant" is given twice at the top level',
    },
    {
      name: "nested",
      repeated: { key: "4", path: ["measurements"] },
      want: 'key "4" is given twice in measurements',
    },
    {
      name: "through arrays, odd keys quoted",
      repeated: { key: "\x1b[2J", path: ["items", 0, "a.b"] },
      want: 'key "\\u001b[2J" is given twice in items[0]["a.b"]',
    },
    {
      name: "a C1 control escaped too (JSON.stringify leaves it)",
      repeated: { key: "\x9b2J", path: ["\x9b"] },
      want: 'key "\\u009b2J" is given twice in ["\\u009b"]',
    },
    {
      name: "a long key and path segment: cut",
      repeated: { key: "k".repeat(100_000), path: ["p".repeat(100_000)] },
      want: `key "${"k".repeat(63)}… is given twice in ["${"p".repeat(63)}…]`,
    },
    {
      name: "a deep path: cut",
      repeated: { key: "k", path: Array(100_000).fill(0) },
      want: `key "k" is given twice in ${"[0]".repeat(66)}[0…`,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => assert.equal(describeRepeatedKey(row.repeated), row.want));
  }
});
