import assert from "node:assert/strict";
import { KmsError, type KmsFailure } from "../../src/kms/errors.ts";
import { encodeMasterSecretUri, parseKmsUri, parseStorageUri } from "../../src/kms/uri.ts";
import { CHAINED_EXAMPLE } from "./vectors.ts";

const utf8 = (s: string) => new TextEncoder().encode(s);

function assertKmsError(fn: () => unknown, reason: KmsFailure, message: string | RegExp) {
  assert.throws(fn, (err) => {
    assert.ok(err instanceof KmsError, `want a KmsError, got ${err}`);
    assert.equal(err.reason, reason);
    if (typeof message === "string") assert.equal(err.message, message);
    else assert.match(err.message, message);
    return true;
  });
}

Deno.test("encodeMasterSecretUri() uses padded base64url: the reference example", () => {
  const uri = encodeMasterSecretUri({ key: utf8("key"), salt: utf8("salt") });
  assert.equal(uri, "kms://cluster-kms?key=a2V5&salt=c2FsdA==");
  assert.deepEqual(parseKmsUri(uri), { key: utf8("key"), salt: utf8("salt") });
});

Deno.test("encodeMasterSecretUri() gives the chained example's URI", () => {
  const uri = encodeMasterSecretUri({ key: CHAINED_EXAMPLE.masterSecret, salt: CHAINED_EXAMPLE.masterSalt });
  assert.equal(uri, CHAINED_EXAMPLE.kmsUri);
});

Deno.test("master secret URIs round-trip, including bytes base64url encodes as - and _", () => {
  const key = Uint8Array.from({ length: 32 }, (_, i) => (i * 37 + 251) % 256);
  const salt = new Uint8Array(33).fill(0xfb); // "+" and "/" in standard base64
  const uri = encodeMasterSecretUri({ key, salt });
  const query = uri.slice(uri.indexOf("?"));
  assert.doesNotMatch(query, /[+/]/);
  assert.match(query, /-/);
  assert.match(query, /_/);
  assert.deepEqual(parseKmsUri(uri), { key, salt });
});

Deno.test("parseKmsUri() unescapes parameter values twice", () => {
  const want = { key: utf8("key"), salt: utf8("salt") };
  assert.deepEqual(parseKmsUri("kms://cluster-kms?key=a2V5&salt=c2FsdA%3D%3D"), want);
  assert.deepEqual(parseKmsUri("kms://cluster-kms?key=a2V5&salt=c2FsdA%253D%253D"), want);
  assert.deepEqual(
    parseKmsUri("kms://cluster-kms?salt=c2FsdA==&key=a2V5&key=b3RoZXI="),
    want,
    "first value wins",
  );
});

Deno.test("parseKmsUri() reports a missing or empty parameter by name", () => {
  const missingKey = 'missing query parameter "key"';
  const missingSalt = 'missing query parameter "salt"';
  assertKmsError(() => parseKmsUri("kms://cluster-kms?salt=c2FsdA=="), "invalid-uri", missingKey);
  assertKmsError(() => parseKmsUri("kms://cluster-kms?key=&salt=c2FsdA=="), "invalid-uri", missingKey);
  assertKmsError(() => parseKmsUri("kms://cluster-kms?key=a2V5"), "invalid-uri", missingSalt);
  assertKmsError(() => parseKmsUri("kms://cluster-kms"), "invalid-uri", missingKey);
  // A bad first-level escape drops the pair, as Go's url.Query() does.
  assertKmsError(() => parseKmsUri("kms://cluster-kms?key=%zz&salt=c2FsdA=="), "invalid-uri", missingKey);
  assertKmsError(() => parseKmsUri("kms://cluster-kms?key=a2V5;&salt=c2FsdA=="), "invalid-uri", missingKey);
});

Deno.test("parseKmsUri() rejects values that are not padded base64url, without echoing them", () => {
  for (
    const [key, message] of [
      ["c2VjcmV0", null], // valid: "secret"
      ["c2VjcmV0Zg", /^invalid query parameter "key": not padded base64url$/], // unpadded
      ["c2VjcmV0Zg%2B%2B", /^invalid query parameter "key": not padded base64url$/], // standard alphabet
      ["c2VjcmV0Zg!!", /^invalid query parameter "key": not padded base64url$/],
      ["c2VjcmV0Zg%25zz", /^invalid query parameter "key": invalid URL escape$/], // bad second-level escape
    ] as const
  ) {
    const uri = `kms://cluster-kms?key=${key}&salt=c2FsdA==`;
    if (message === null) {
      assert.deepEqual(parseKmsUri(uri).key, utf8("secret"));
      continue;
    }
    assertKmsError(() => parseKmsUri(uri), "invalid-uri", message);
    try {
      parseKmsUri(uri);
    } catch (err) {
      assert.ok(!(err as Error).message.includes("c2VjcmV0"), "the key must not appear in the error");
    }
  }
});

Deno.test("parseKmsUri() checks the scheme and the KMS type", () => {
  const query = "?key=a2V5&salt=c2FsdA==";
  assertKmsError(
    () => parseKmsUri(`http://cluster-kms${query}`),
    "invalid-uri",
    "invalid KMS URI: invalid scheme: http",
  );
  assertKmsError(
    () => parseKmsUri(`storage://cluster-kms${query}`),
    "invalid-uri",
    "invalid KMS URI: invalid scheme: storage",
  );
  assertKmsError(() => parseKmsUri(`cluster-kms${query}`), "invalid-uri", /^invalid KMS URI: missing scheme/);
  assertKmsError(() => parseKmsUri(""), "invalid-uri", /^invalid KMS URI: missing scheme/);
  assertKmsError(() => parseKmsUri(`kms://[${query}`), "invalid-uri", "invalid KMS URI: malformed URI");
  assertKmsError(() => parseKmsUri(`kms://vault${query}`), "unknown-backend", "unknown KMS type: vault");
  assertKmsError(() => parseKmsUri(`kms://${query}`), "unknown-backend", "unknown KMS type: ");
  for (const cloud of ["aws", "azure", "gcp"]) {
    assertKmsError(
      () => parseKmsUri(`kms://${cloud}?region=x&keyName=y`),
      "unsupported-backend",
      `KMS type ${cloud} is not supported: only cluster-kms is implemented`,
    );
  }
});

Deno.test("parseKmsUri() accepts an upper-case scheme, as Go's url.Parse does", () => {
  assert.deepEqual(parseKmsUri("KMS://cluster-kms?key=a2V5&salt=c2FsdA=="), {
    key: utf8("key"),
    salt: utf8("salt"),
  });
});

Deno.test("parseStorageUri() accepts storage://no-store", () => {
  assert.deepEqual(parseStorageUri("storage://no-store"), { type: "no-store" });
});

Deno.test("parseStorageUri() checks the scheme and the storage type", () => {
  assertKmsError(
    () => parseStorageUri("kms://no-store"),
    "invalid-uri",
    "invalid storage URI: invalid scheme: kms",
  );
  assertKmsError(() => parseStorageUri("no-store"), "invalid-uri", /^invalid storage URI: missing scheme/);
  assertKmsError(() => parseStorageUri("storage://disk"), "unknown-backend", "unknown storage type: disk");
  for (const cloud of ["aws", "azure", "gcp"]) {
    assertKmsError(
      () => parseStorageUri(`storage://${cloud}?bucket=b`),
      "unsupported-backend",
      `storage type ${cloud} is not supported: only no-store is implemented`,
    );
  }
});
