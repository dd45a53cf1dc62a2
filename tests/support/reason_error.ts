/** Asserting a rejection by one of the project's `ReasonError` types: its class, reason and message. */
import assert from "node:assert/strict";
import type { ReasonError } from "../../src/reason_error.ts";

/**
 * Asserts that `promise` rejects with an instance of `type` whose `reason`
 * is `reason` and whose message is `message` (or matches it).
 */
export async function assertRejectsWithReason<E extends ReasonError<string>>(
  promise: Promise<unknown>,
  // deno-lint-ignore no-explicit-any
  type: new (...args: any[]) => E,
  reason: E["reason"],
  message: string | RegExp,
): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof type, `expected ${type.name}, got ${error}`);
    if (typeof message === "string") assert.equal(error.message, message);
    else assert.match(error.message, message);
    assert.equal(error.reason, reason);
    return true;
  });
}
