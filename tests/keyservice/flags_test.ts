import assert from "node:assert/strict";
import { KEY_SERVICE_USAGE, parseKeyServiceFlags } from "../../src/keyservice/flags.ts";
import { UsageError } from "../../src/flags/flags.ts";
import { DEFAULT_CONNECTION_LIMITS } from "../../src/rpc/limits.ts";

/** The limits the flags give when none is set. */
const DEFAULT_LIMITS = {
  maxConnections: DEFAULT_CONNECTION_LIMITS.maxConnections,
  maxConnectionsPerPeer: DEFAULT_CONNECTION_LIMITS.maxConnectionsPerPeer,
  maxConcurrentStreams: DEFAULT_CONNECTION_LIMITS.maxConcurrentStreams,
  maxCallsInProgress: DEFAULT_CONNECTION_LIMITS.maxCallsInProgress,
  maxCallsWaiting: DEFAULT_CONNECTION_LIMITS.maxCallsWaiting,
  handshakeTimeoutMs: DEFAULT_CONNECTION_LIMITS.handshakeTimeoutMs,
  idleTimeoutMs: DEFAULT_CONNECTION_LIMITS.idleTimeoutMs,
  requestTimeoutMs: DEFAULT_CONNECTION_LIMITS.requestTimeoutMs,
};

Deno.test("parseKeyServiceFlags() defaults to the original's settings", () => {
  assert.deepEqual(parseKeyServiceFlags([]), {
    port: 9000,
    listenAddress: "0.0.0.0",
    masterSecretPath: "/var/config/mastersecret",
    saltPath: "/var/config/salt",
    logLevel: "info",
    limits: DEFAULT_LIMITS,
  });
});

Deno.test("parseKeyServiceFlags() reads every flag, in both --flag value and --flag=value forms", () => {
  assert.deepEqual(
    parseKeyServiceFlags([
      "--port=0",
      "--listen-address",
      "::1",
      "--master-secret",
      "/tmp/m",
      "--salt=/tmp/s",
      "--log-level",
      "debug",
    ]),
    {
      port: 0,
      listenAddress: "::1",
      masterSecretPath: "/tmp/m",
      saltPath: "/tmp/s",
      logLevel: "debug",
      limits: DEFAULT_LIMITS,
    },
  );
  assert.equal(parseKeyServiceFlags(["--help"]), "help");
  assert.match(KEY_SERVICE_USAGE, /--master-secret <file>/);
});

const LISTEN_ADDRESS_ERROR = (value: string) =>
  `invalid --listen-address "${value}": want an IP address, e.g. 0.0.0.0, 127.0.0.1 or ::`;

Deno.test("parseKeyServiceFlags() rejects a bad command line with a one-line message", () => {
  const cases: [string[], string][] = [
    [["--bogus"], "unknown flag --bogus"],
    [["-v"], "unknown flag -v"],
    [["extra"], "unexpected argument extra: the key service takes only flags"],
    [["--port"], "flag --port needs a value"],
    [["--port", "70000"], 'invalid --port "70000": want a number from 0 to 65535'],
    [["--port=-1"], 'invalid --port "-1": want a number from 0 to 65535'],
    [["--port", "-1"], 'invalid --port "-1": want a number from 0 to 65535'],
    [["--port", "-0.5"], 'invalid --port "-0.5": want a number from 0 to 65535'],
    [["--salt", "-x"], 'flag --salt needs a value (write --salt=<value> for one starting with "-")'],
    [["--port", "--", "-1"], 'flag --port needs a value (write --port=<value> for one starting with "-")'],
    [["--port", "90a"], 'invalid --port "90a": want a number from 0 to 65535'],
    [["--log-level", "trace"], 'invalid log level "trace": want one of debug, info, warn, error'],
    // Names every object inherits are no levels either.
    [["--log-level", "toString"], 'invalid log level "toString": want one of debug, info, warn, error'],
    [["--log-level", "__proto__"], 'invalid log level "__proto__": want one of debug, info, warn, error'],
    [["--salt="], "--salt must not be empty"],
    [["--listen-address", "nonsense"], LISTEN_ADDRESS_ERROR("nonsense")],
    [["--listen-address", "999.1.1.1"], LISTEN_ADDRESS_ERROR("999.1.1.1")],
    [["--listen-address", "[::1]"], LISTEN_ADDRESS_ERROR("[::1]")],
    [["--listen-address="], LISTEN_ADDRESS_ERROR("")],
  ];
  // Every numeric flag says what is wrong with a negative number ("--flag -1" is not "--flag" without a value).
  for (
    const flag of [
      "--max-connections",
      "--max-connections-per-peer",
      "--max-streams-per-connection",
      "--max-calls-in-progress",
      "--handshake-timeout",
      "--idle-timeout",
      "--request-timeout",
    ]
  ) {
    cases.push([[flag, "-1"], `invalid ${flag} "-1": want a positive number`]);
  }
  cases.push([
    ["--max-calls-waiting", "-1"],
    'invalid --max-calls-waiting "-1": want a whole number, 0 or more',
  ]);
  for (const [args, message] of cases) {
    assert.throws(() => parseKeyServiceFlags(args), (err) => {
      assert.ok(err instanceof UsageError, `${args}: ${err}`);
      assert.equal(err.message, message);
      return true;
    });
  }
});
