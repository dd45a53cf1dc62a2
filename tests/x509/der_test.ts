import assert from "node:assert/strict";
import * as asn1js from "asn1js";
import {
  derChildren,
  derElement,
  DerError,
  derOid,
  derSequence,
  derTime,
  derUnsignedInteger,
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

Deno.test("derChildren slices the elements of a SEQUENCE and refuses a malformed one", () => {
  const first = derUnsignedInteger(Uint8Array.of(5));
  const second = derElement(0x04, new Uint8Array(200));
  const children = derChildren(derSequence(first, second), "test");
  assert.deepEqual(children.map((c) => c.toHex()), [first.toHex(), second.toHex()]);
  assert.throws(() => derChildren(Uint8Array.of(0x30, 0x03, 0x02, 0x05), "test"), DerError);
});
