import assert from "node:assert/strict";
import { UsageError } from "../../src/flags/flags.ts";
import { parseLocalApiFlags } from "../../src/localapi/flags.ts";

Deno.test("parseLocalApiFlags() persists under --state-dir, or keeps objects in memory with --in-memory", () => {
  const persisted = parseLocalApiFlags(["--pki-dir", "/p", "--state-dir", "/s"]);
  assert.ok(persisted !== "help");
  assert.equal(persisted.stateDir, "/s");
  const inMemory = parseLocalApiFlags(["--pki-dir", "/p", "--in-memory", "--port", "0"]);
  assert.ok(inMemory !== "help");
  assert.equal(inMemory.stateDir, undefined);
  assert.equal(inMemory.port, 0);
});

Deno.test("parseLocalApiFlags() wants the PKI directory and exactly one of --state-dir and --in-memory", () => {
  const cases: [string[], string][] = [
    [["--state-dir", "/s"], "--pki-dir is required"],
    [["--pki-dir", "/p"], "exactly one of --state-dir and --in-memory is required"],
    [
      ["--pki-dir", "/p", "--state-dir", "/s", "--in-memory"],
      "exactly one of --state-dir and --in-memory is required",
    ],
  ];
  for (const [args, message] of cases) {
    assert.throws(
      () => parseLocalApiFlags(args),
      (error) => error instanceof UsageError && error.message === message,
    );
  }
});

Deno.test("parseLocalApiFlags() reads the token cleaner's interval: 10 s by default", () => {
  const interval = (args: string[]) => {
    const flags = parseLocalApiFlags(["--pki-dir", "/p", "--in-memory", ...args]);
    assert.ok(flags !== "help");
    return flags.tokenCleanupIntervalMs;
  };
  assert.equal(interval([]), 10_000);
  assert.equal(interval(["--token-cleanup-interval", "0.5"]), 500);
  assert.throws(
    () => interval(["--token-cleanup-interval", "0"]),
    (error) =>
      error instanceof UsageError &&
      error.message === 'invalid --token-cleanup-interval "0": want a positive number',
  );
});
