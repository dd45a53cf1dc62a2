import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { asRejection, Rejection, toConnectError } from "../../src/rpc/rejection.ts";

Deno.test("a rejection reaches the client as its code and message only", () => {
  const rejection = new Rejection("rate-limit-peer", Code.ResourceExhausted, "slow down", {
    keyDigest: "ab".repeat(32),
    cause: new Error("the bucket is empty"),
  });
  const connect = toConnectError(rejection);
  assert.equal(connect.code, Code.ResourceExhausted);
  assert.equal(connect.rawMessage, "slow down");
  assert.equal(connect.cause, undefined);
});

Deno.test("during() names the failed step, except for an internal error", () => {
  const unavailable = new Rejection("api-server-unavailable", Code.Unavailable, "API server unavailable", {
    keyDigest: "cd".repeat(32),
  });
  const named = unavailable.during("getting components");
  assert.equal(named.message, "getting components: API server unavailable");
  assert.equal(named.step, "getting components");
  assert.deepEqual([named.reason, named.code, named.keyDigest], [
    "api-server-unavailable",
    Code.Unavailable,
    "cd".repeat(32),
  ]);

  const bug = new TypeError("x is undefined");
  const internal = asRejection(bug).during("recording joining node");
  assert.equal(internal.message, "internal error", "the client learns nothing of a bug");
  assert.equal(internal.step, "recording joining node");
  assert.equal(internal.cause, bug, "the log keeps the cause");
});

Deno.test("unexpected errors become internal rejections without their message", () => {
  const secretish = new Error("open /var/secret/master-key: permission denied");
  const rejection = asRejection(secretish);
  assert.deepEqual([rejection.reason, rejection.code, rejection.message], [
    "internal",
    Code.Internal,
    "internal error",
  ]);
  assert.equal(rejection.cause, secretish);
  assert.equal(asRejection("a string").code, Code.Internal);
  assert.equal(
    asRejection(new ConnectError("denied", Code.PermissionDenied)).reason,
    "internal",
    "a dependency's own ConnectError is unexpected here",
  );
});

Deno.test("rejections pass through; aborts and deadlines are canceled and deadline", () => {
  const original = new Rejection("malformed-request", Code.InvalidArgument, "bad");
  assert.equal(asRejection(original), original);
  const cases: [unknown, string, Code][] = [
    [new DOMException("aborted", "AbortError"), "canceled", Code.Canceled],
    [new DOMException("timed out", "TimeoutError"), "deadline", Code.DeadlineExceeded],
    [new ConnectError("the client went away", Code.Canceled), "canceled", Code.Canceled],
    [new ConnectError("the operation timed out", Code.DeadlineExceeded), "deadline", Code.DeadlineExceeded],
  ];
  for (const [error, reason, code] of cases) {
    const rejection = asRejection(error);
    assert.deepEqual([rejection.reason, rejection.code], [reason, code], String(error));
  }
});
