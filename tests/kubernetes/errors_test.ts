import assert from "node:assert/strict";
import { errorFromResponse, isKubernetesError, unavailableError } from "../../src/kubernetes/errors.ts";

Deno.test("errorFromResponse: takes reason, message and details from a Status body", () => {
  const body = JSON.stringify({
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message: 'secrets "x" already exists',
    reason: "AlreadyExists",
    details: { name: "x", kind: "secrets" },
    code: 409,
  });
  const error = errorFromResponse("create secrets kube-system/x", 409, body);
  assert.equal(error.reason, "AlreadyExists");
  assert.equal(error.code, 409);
  assert.equal(
    error.message,
    'kubernetes: create secrets kube-system/x: AlreadyExists (409): secrets "x" already exists',
  );
  assert.deepEqual(error.details, { name: "x", kind: "secrets" });
  assert.ok(isKubernetesError(error, "AlreadyExists"));
  assert.ok(!isKubernetesError(error, "Conflict"));
});

Deno.test("errorFromResponse: without a Status body the HTTP code gives the reason; the body is not quoted", () => {
  const html = "<html><body>upstream token=secret-value</body></html>";
  const gateway = errorFromResponse("get secrets a/b", 502, html);
  assert.equal(gateway.reason, "Unknown");
  assert.equal(gateway.message, "kubernetes: get secrets a/b: Unknown (502)");
  assert.equal(gateway.retryable, true, "a load balancer's 5xx is transient");
  const tooMany = errorFromResponse("get secrets a/b", 429, "");
  assert.equal(tooMany.reason, "TooManyRequests");
  assert.equal(tooMany.retryable, true);
  const unknownReason = errorFromResponse(
    "get secrets a/b",
    418,
    JSON.stringify({ kind: "Status", reason: "Teapot" }),
  );
  assert.equal(unknownReason.reason, "Unknown");
  assert.equal(unknownReason.retryable, false);
});

Deno.test("errorFromResponse: a long server message is cut", () => {
  const error = errorFromResponse(
    "get x",
    500,
    JSON.stringify({ kind: "Status", message: "m".repeat(5000) }),
  );
  assert.equal(error.reason, "InternalError");
  assert.equal(error.serverMessage.length, 1001);
});

Deno.test("errorFromResponse: Status fields of the wrong type are ignored, not a TypeError", async (t) => {
  const rows: [string, string][] = [
    ["a message object with a length", '{"kind":"Status","message":{"length":5000}}'],
    ["a numeric message", '{"kind":"Status","message":7}'],
    ["an array message", '{"kind":"Status","message":["a","b"]}'],
    [
      "a reason array and details that are not an object",
      '{"kind":"Status","reason":["NotFound"],"details":"x"}',
    ],
    ["details that are an array", '{"kind":"Status","details":[{"name":"x"}]}'],
  ];
  for (const [name, body] of rows) {
    await t.step(name, () => {
      const error = errorFromResponse("get x", 500, body);
      assert.equal(error.reason, "InternalError");
      assert.equal(error.code, 500);
      assert.equal(error.serverMessage, "");
      assert.equal(error.message, "kubernetes: get x: InternalError (500)");
      assert.equal(error.details, undefined);
    });
  }
});

Deno.test("unavailableError: names the request and the transport cause chain", () => {
  const cause = new TypeError("fetch failed", { cause: new Error("tcp connect error: Connection refused") });
  const error = unavailableError("get secrets a/b", "cannot reach the API server at https://h:6443", cause);
  assert.equal(error.reason, "Unavailable");
  assert.equal(error.code, 0);
  assert.equal(
    error.message,
    "kubernetes: get secrets a/b: cannot reach the API server at https://h:6443: fetch failed: tcp connect error: Connection refused",
  );
  assert.equal(error.cause, cause);
  assert.ok(error.retryable);
});
