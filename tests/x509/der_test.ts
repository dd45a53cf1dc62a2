import assert from "node:assert/strict";
import * as asn1js from "asn1js";
import {
  derElement,
  DerError,
  derNodes,
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
