import assert from "node:assert/strict";
import * as asn1js from "asn1js";
import {
  derElement,
  DerError,
  derLength,
  derNodes,
  derNonNegativeInteger,
  derOid,
  derOidString,
  derSequence,
  derTime,
  derUnsignedInteger,
  readDer,
} from "../../src/x509/der.ts";

Deno.test("derUnsignedInteger encodes a magnitude minimally and never negative", () => {
  const cases: [number[], string][] = [
    [[], "020100"],
    [[0, 0], "020100"],
    [[0, 0x7f], "02017f"],
    [[0x80], "02020080"],
    [[0, 0, 0xff, 1], "020300ff01"],
  ];
  for (const [magnitude, hex] of cases) {
    assert.equal(derUnsignedInteger(Uint8Array.from(magnitude)).toHex(), hex);
  }
});

Deno.test("derOid, derTime and long lengths encode as asn1js reads them", () => {
  for (const oid of ["1.2.840.10045.4.3.2", "2.5.29.35", "1.3.6.1.4.1.311.21.20"]) {
    const parsed = asn1js.fromBER(derOid(oid));
    assert.equal((parsed.result as asn1js.ObjectIdentifier).valueBlock.toString(), oid);
  }
  assert.equal(
    new TextDecoder().decode(derTime(new Date(Date.UTC(2049, 11, 31, 23, 59, 59))).subarray(2)),
    "491231235959Z",
  );
  assert.equal(derTime(new Date(Date.UTC(2049, 0, 1)))[0], 0x17, "UTCTime until 2049");
  assert.equal(
    new TextDecoder().decode(derTime(new Date(Date.UTC(2050, 0, 2, 3, 4, 5))).subarray(2)),
    "20500102030405Z",
  );
  assert.equal(derTime(new Date(Date.UTC(2050, 0, 1)))[0], 0x18, "GeneralizedTime from 2050");
  const long = derElement(0x04, new Uint8Array(300));
  assert.equal(long.subarray(0, 4).toHex(), "0482012c");
  assert.equal(asn1js.fromBER(long).offset, 304);
});

Deno.test("readDer and derNodes read an element and the elements inside it, and refuse malformed ones", () => {
  const first = derUnsignedInteger(Uint8Array.of(5));
  const second = derElement(0x04, new Uint8Array(200));
  const sequence = readDer(derSequence(first, second), "test", 0x30);
  const nodes = derNodes(sequence.content, "test");
  assert.deepEqual(nodes.map((node) => [node.tag, node.encoded.toHex()]), [[0x02, first.toHex()], [
    0x04,
    second.toHex(),
  ]]);
  assert.equal(nodes[1].content.length, 200);
  const malformed = [
    Uint8Array.of(0x30, 0x03, 0x02, 0x05), // shorter than its length
    Uint8Array.of(0x30, 0x00, 0x00), // trailing byte
    Uint8Array.of(0x1f, 0x01, 0x00), // multi-byte tag
    Uint8Array.of(0x04, 0x85, 1, 0, 0, 0, 0), // 5 length bytes
    new Uint8Array(),
  ];
  for (const bytes of malformed) assert.throws(() => readDer(bytes, "test"), DerError, bytes.toHex());
  assert.throws(() => readDer(first, "test", 0x30), DerError, "another tag than asked for");
});

Deno.test("derOidString reads what derOid writes, and refuses truncated or padded arcs", () => {
  for (const oid of ["2.5.4.3", "1.2.840.113549.1.9.14", "0.9.2342.19200300.100.1.25", "2.999.3"]) {
    assert.equal(derOidString(derOid(oid).subarray(2), "test"), oid);
  }
  for (const content of [[0x55, 0x84], [0x80, 0x01], []]) {
    assert.throws(() => derOidString(Uint8Array.from(content), "test"), DerError);
  }
});

Deno.test("lengths must be DER: definite, in the fewest bytes, and inside the input and the parent", async (t) => {
  const content = (length: number) => new Uint8Array(length);
  const ok: [string, Uint8Array][] = [
    ["short form 0", Uint8Array.of(0x04, 0x00)],
    ["short form 127", Uint8Array.of(0x04, 0x7f, ...content(127))],
    ["long form 128", Uint8Array.of(0x04, 0x81, 0x80, ...content(128))],
    ["long form 256", Uint8Array.of(0x04, 0x82, 0x01, 0x00, ...content(256))],
  ];
  for (const [label, bytes] of ok) {
    await t.step(`accepted: ${label}`, () => {
      assert.equal(readDer(bytes, "test").encoded.length, bytes.length);
    });
  }
  const refused: [string, Uint8Array][] = [
    ["long form for a length below 128 (81 05)", Uint8Array.of(0x04, 0x81, 0x05, ...content(5))],
    ["long form for 0 (81 00)", Uint8Array.of(0x04, 0x81, 0x00)],
    ["long form 127 (81 7f)", Uint8Array.of(0x04, 0x81, 0x7f, ...content(127))],
    ["a leading zero length byte (82 00 80)", Uint8Array.of(0x04, 0x82, 0x00, 0x80, ...content(128))],
    ["four length bytes for 5 (84 00 00 00 05)", Uint8Array.of(0x04, 0x84, 0, 0, 0, 5, ...content(5))],
    ["indefinite length (80 … 00 00)", Uint8Array.of(0x30, 0x80, 0x05, 0x00, 0x00, 0x00)],
    ["the reserved length byte ff", Uint8Array.of(0x04, 0xff, ...content(8))],
    ["length past the end", Uint8Array.of(0x04, 0x05, 0x00)],
    ["length 2^32 − 1 past the end", Uint8Array.of(0x04, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00)],
    ["length bytes missing", Uint8Array.of(0x04, 0x82, 0x01)],
    ["five length bytes", Uint8Array.of(0x04, 0x85, 0x01, 0, 0, 0, 0)],
    ["eight length bytes (over 2^53)", Uint8Array.of(0x04, 0x88, 0x00, 0x20, 0, 0, 0, 0, 0, 1)],
    ["a high tag number (1f)", Uint8Array.of(0x1f, 0x21, 0x00)],
    ["a tag without a length", Uint8Array.of(0x30)],
  ];
  for (const [label, bytes] of refused) {
    await t.step(`refused: ${label}`, () => {
      assert.throws(() => readDer(bytes, "test"), DerError);
      // derLength refuses the header, or gives a length past the input, which its callers refuse.
      const length = derLength(bytes);
      assert.ok(length === undefined || length > bytes.length, `derLength gave ${length}`);
    });
  }
  await t.step("refused: an element whose length runs past its parent's end", () => {
    // SEQUENCE of 3 content bytes whose OCTET STRING claims 5: the 2 bytes after the SEQUENCE are not its.
    const bytes = Uint8Array.of(0x30, 0x03, 0x04, 0x05, 0x00, 0x00, 0x00);
    const outer = derNodes(bytes, "test");
    assert.equal(outer.length, 2, "the outer reading stops at the SEQUENCE's end");
    assert.throws(() => derNodes(outer[0].content, "test"), DerError);
  });
});

Deno.test("derNonNegativeInteger reads minimal non-negative INTEGERs and refuses the rest", () => {
  const ok: [number[], string][] = [[[0x00], "00"], [[0x7f], "7f"], [[0x00, 0x80], "80"], [
    [0x01, 0x00],
    "0100",
  ]];
  for (const [content, magnitude] of ok) {
    assert.equal(derNonNegativeInteger(Uint8Array.from(content), "test").toHex(), magnitude);
  }
  const refused = [[], [0x80], [0xff, 0x01], [0x00, 0x7f], [0x00, 0x00, 0x80]];
  for (const content of refused) {
    assert.throws(() => derNonNegativeInteger(Uint8Array.from(content), "test"), DerError, `${content}`);
  }
});

Deno.test("derOidString refuses arcs beyond 2^53 and an empty OID, and never loses precision", () => {
  const arc = (value: bigint) => {
    const bytes = [Number(value & 0x7fn)];
    for (let rest = value >> 7n; rest > 0n; rest >>= 7n) bytes.unshift(0x80 | Number(rest & 0x7fn));
    return bytes;
  };
  const largest = 2n ** 46n - 1n; // the largest arc read (any larger one is refused, never rounded)
  assert.equal(derOidString(Uint8Array.from([0x2a, ...arc(largest)]), "test"), `1.2.${largest}`);
  for (const value of [2n ** 53n, 2n ** 53n + 1n, 2n ** 64n]) {
    assert.throws(() => derOidString(Uint8Array.from([0x2a, ...arc(value)]), "test"), DerError, `${value}`);
  }
});
