import assert from "node:assert/strict";
import { parseFlags, UsageError } from "../../src/flags/flags.ts";
import { CONNECTION_LIMIT_OPTIONS, parseConnectionLimits } from "../../src/flags/connection_limits.ts";
import { DEFAULT_CONNECTION_LIMITS } from "../../src/rpc/limits.ts";

function limits(args: string[]) {
  return parseConnectionLimits(parseFlags(args, CONNECTION_LIMIT_OPTIONS, "test"));
}

Deno.test("connection-limit flags set the limits, timeouts in seconds", () => {
  assert.deepEqual(
    limits([
      "--max-connections=10",
      "--max-connections-per-peer=2",
      "--max-streams-per-connection=5",
      "--max-calls-in-progress=4",
      "--max-calls-waiting=7",
      "--handshake-timeout=2.5",
      "--idle-timeout=0.5",
      "--request-timeout=3",
    ]),
    {
      maxConnections: 10,
      maxConnectionsPerPeer: 2,
      maxConcurrentStreams: 5,
      maxCallsInProgress: 4,
      maxCallsWaiting: 7,
      handshakeTimeoutMs: 2500,
      idleTimeoutMs: 500,
      requestTimeoutMs: 3000,
    },
  );
});

Deno.test("connection-limit flags default to DEFAULT_CONNECTION_LIMITS; --max-calls-waiting may be 0", () => {
  assert.deepEqual(limits([]), {
    maxConnections: DEFAULT_CONNECTION_LIMITS.maxConnections,
    maxConnectionsPerPeer: DEFAULT_CONNECTION_LIMITS.maxConnectionsPerPeer,
    maxConcurrentStreams: DEFAULT_CONNECTION_LIMITS.maxConcurrentStreams,
    maxCallsInProgress: 32,
    maxCallsWaiting: 2048,
    handshakeTimeoutMs: 10_000,
    idleTimeoutMs: DEFAULT_CONNECTION_LIMITS.idleTimeoutMs,
    requestTimeoutMs: DEFAULT_CONNECTION_LIMITS.requestTimeoutMs,
  });
  assert.equal(limits(["--max-calls-waiting", "0"]).maxCallsWaiting, 0);
});

Deno.test("connection-limit flags reject what is not a positive number (or, waiting calls, 0), naming the flag", async (t) => {
  const rows: { args: string[]; message: string }[] = [
    { args: ["--max-connections=0"], message: 'invalid --max-connections "0": want a positive number' },
    {
      args: ["--max-connections-per-peer=1.5"],
      message: 'invalid --max-connections-per-peer "1.5": want a whole number',
    },
    {
      args: ["--max-streams-per-connection=x"],
      message: 'invalid --max-streams-per-connection "x": want a positive number',
    },
    { args: ["--idle-timeout=-1"], message: 'invalid --idle-timeout "-1": want a positive number' },
    {
      args: ["--handshake-timeout=2147484"],
      message: 'invalid --handshake-timeout "2147484": at most 2147483 seconds',
    },
    { args: ["--request-timeout="], message: 'invalid --request-timeout "": want a positive number' },
    {
      args: ["--max-calls-in-progress=0"],
      message: 'invalid --max-calls-in-progress "0": want a positive number',
    },
    {
      args: ["--max-calls-in-progress=2.5"],
      message: 'invalid --max-calls-in-progress "2.5": want a whole number',
    },
    {
      args: ["--max-calls-waiting=-1"],
      message: 'invalid --max-calls-waiting "-1": want a whole number, 0 or more',
    },
    {
      args: ["--max-calls-waiting=1.5"],
      message: 'invalid --max-calls-waiting "1.5": want a whole number, 0 or more',
    },
    {
      args: ["--max-calls-waiting=lots"],
      message: 'invalid --max-calls-waiting "lots": want a whole number, 0 or more',
    },
    {
      args: ["--max-streams-per-connection=99999999999"],
      message: 'invalid --max-streams-per-connection "99999999999": at most 4294967295',
    },
    {
      args: ["--max-calls-waiting=4294967296"],
      message: 'invalid --max-calls-waiting "4294967296": at most 4294967295',
    },
    { args: ["--handshake-timeout=0"], message: 'invalid --handshake-timeout "0": want a positive number' },
    {
      args: ["--handshake-timeout=ten"],
      message: 'invalid --handshake-timeout "ten": want a positive number',
    },
  ];
  for (const row of rows) {
    await t.step(row.args.join(" "), () => {
      assert.throws(
        () => limits(row.args),
        (err) => err instanceof UsageError && err.message === row.message,
      );
    });
  }
});
