import assert from "node:assert/strict";
import { parseFlags, UsageError } from "../../src/flags/flags.ts";
import { CONNECTION_LIMIT_OPTIONS, parseConnectionLimits } from "../../src/flags/connection_limits.ts";

function limits(args: string[]) {
  return parseConnectionLimits(parseFlags(args, CONNECTION_LIMIT_OPTIONS, "test"));
}

Deno.test("connection-limit flags set the limits, timeouts in seconds", () => {
  assert.deepEqual(
    limits([
      "--max-connections=10",
      "--max-connections-per-peer=2",
      "--max-streams-per-connection=5",
      "--idle-timeout=0.5",
      "--request-timeout=3",
    ]),
    {
      maxConnections: 10,
      maxConnectionsPerPeer: 2,
      maxConcurrentStreams: 5,
      idleTimeoutMs: 500,
      requestTimeoutMs: 3000,
    },
  );
});

Deno.test("connection-limit flags reject what is not a positive number, naming the flag", async (t) => {
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
    { args: ["--request-timeout="], message: 'invalid --request-timeout "": want a positive number' },
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
