/**
 * The one assertion for RPC failures: a call rejects with a
 * {@linkcode ConnectError} of the expected code.
 *
 * @module
 */
import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * Awaits `call` (a promise, or a function returning one), which must reject
 * with a ConnectError whose code is `code` and whose raw message equals
 * `message` (a string) or matches it (a RegExp); resolves to that error so
 * the test can check more of it.
 */
export async function expectConnectError(
  call: Promise<unknown> | (() => Promise<unknown>),
  code: Code,
  message?: string | RegExp,
): Promise<ConnectError> {
  const settled = await (typeof call === "function" ? call() : call).then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  if (!("error" in settled)) assert.fail(`want ConnectError ${Code[code]}, got a result`);
  const { error } = settled;
  assert.ok(error instanceof ConnectError, `want ConnectError ${Code[code]}, got ${error}`);
  assert.equal(Code[error.code], Code[code], error.rawMessage);
  if (typeof message === "string") assert.equal(error.rawMessage, message);
  else if (message) assert.match(error.rawMessage, message);
  return error;
}
