/**
 * The local cluster's command line (src/localcluster/flags.ts): defaults,
 * accepted values, and a UsageError naming the problem for everything else.
 */
import assert from "node:assert/strict";
import { UsageError } from "../../src/flags/flags.ts";
import { type ClusterCommand, DEFAULT_STATE_DIR, parseClusterArgs } from "../../src/localcluster/flags.ts";
import { consoleOrigin } from "../../src/console/address.ts";

Deno.test("parseClusterArgs accepts good command lines", async (t) => {
  const rows: { name: string; args: string[]; want: ClusterCommand | "help" }[] = [
    {
      name: "up: defaults are 1 control plane, 2 workers, auto network, 300 s, .dev/cluster",
      args: ["up"],
      want: {
        command: "up",
        stateDir: ".dev/cluster",
        controlPlanes: 1,
        workers: 2,
        network: "auto",
        timeoutMs: 300_000,
        corsAllowOrigins: ["http://127.0.0.1:9080"],
      },
    },
    {
      name: "up: every flag",
      args: [
        ...["up", "--state-dir", "/tmp/c", "--control-planes", "3", "--workers", "5"],
        ...["--network", "netns", "--timeout", "1.5"],
      ],
      want: {
        command: "up",
        stateDir: "/tmp/c",
        controlPlanes: 3,
        workers: 5,
        network: "netns",
        timeoutMs: 1_500,
        corsAllowOrigins: ["http://127.0.0.1:9080"],
      },
    },
    {
      name: "up: workers 0 is a control plane alone",
      args: ["up", "--workers", "0", "--network", "loopback"],
      want: {
        command: "up",
        stateDir: DEFAULT_STATE_DIR,
        controlPlanes: 1,
        workers: 0,
        network: "loopback",
        timeoutMs: 300_000,
        corsAllowOrigins: ["http://127.0.0.1:9080"],
      },
    },
    {
      name: "up: flags in --flag=value form",
      args: ["up", "--workers=0", "--state-dir=/tmp/d"],
      want: {
        command: "up",
        stateDir: "/tmp/d",
        controlPlanes: 1,
        workers: 0,
        network: "auto",
        timeoutMs: 300_000,
        corsAllowOrigins: ["http://127.0.0.1:9080"],
      },
    },
    {
      name: "up: 64 nodes are the most",
      args: ["up", "--control-planes", "4", "--workers", "60"],
      want: {
        command: "up",
        stateDir: DEFAULT_STATE_DIR,
        controlPlanes: 4,
        workers: 60,
        network: "auto",
        timeoutMs: 300_000,
        corsAllowOrigins: ["http://127.0.0.1:9080"],
      },
    },
    {
      name: "up: the browser ports allow the origins given instead of the console's default",
      args: [
        "up",
        "--cors-allow-origin",
        "http://127.0.0.1:9181",
        "--cors-allow-origin=https://console.example",
      ],
      want: {
        command: "up",
        stateDir: DEFAULT_STATE_DIR,
        controlPlanes: 1,
        workers: 2,
        network: "auto",
        timeoutMs: 300_000,
        corsAllowOrigins: ["http://127.0.0.1:9181", "https://console.example"],
      },
    },
    {
      name: "status: table by default",
      args: ["status"],
      want: { command: "status", stateDir: DEFAULT_STATE_DIR, output: "table" },
    },
    {
      name: "status: --output json",
      args: ["status", "--state-dir", "/tmp/c", "--output", "json"],
      want: { command: "status", stateDir: "/tmp/c", output: "json" },
    },
    { name: "down", args: ["down", "--state-dir", "/tmp/c"], want: { command: "down", stateDir: "/tmp/c" } },
    {
      name: "recover: 300 s and the console's origin by default",
      args: ["recover", "--state-dir", "/tmp/c"],
      want: {
        command: "recover",
        stateDir: "/tmp/c",
        timeoutMs: 300_000,
        corsAllowOrigins: [consoleOrigin()],
      },
    },
    {
      name: "recover: --timeout and --cors-allow-origin",
      args: ["recover", "--timeout", "90", "--cors-allow-origin", "https://console.example:8443"],
      want: {
        command: "recover",
        stateDir: DEFAULT_STATE_DIR,
        timeoutMs: 90_000,
        corsAllowOrigins: ["https://console.example:8443"],
      },
    },
    { name: "--help alone", args: ["--help"], want: "help" },
    { name: "-h", args: ["-h"], want: "help" },
    { name: "up --help", args: ["up", "--help"], want: "help" },
    {
      name: "--help wins over a bad command line",
      args: ["start", "--workers", "x", "--help"],
      want: "help",
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.deepEqual(parseClusterArgs(row.args), row.want);
    });
  }
});

Deno.test("parseClusterArgs refuses bad command lines with a UsageError naming the problem", async (t) => {
  const rows: { name: string; args: string[]; want: RegExp }[] = [
    { name: "no command", args: [], want: /^missing command: one of up, down, status, recover$/ },
    {
      name: "unknown command",
      args: ["start"],
      want: /^unknown command "start": one of up, down, status, recover$/,
    },
    { name: "a flag where the command goes", args: ["--workers", "1"], want: /^unknown command "--workers"/ },
    { name: "unknown flag", args: ["up", "--nodes", "3"], want: /unknown flag --nodes/ },
    { name: "stray argument", args: ["up", "now"], want: /unexpected argument now/ },
    { name: "empty state dir", args: ["down", "--state-dir", ""], want: /^--state-dir must not be empty$/ },
    {
      name: "negative workers",
      args: ["up", "--workers", "-1"],
      want: /^invalid --workers "-1": want a positive number$/,
    },
    {
      name: "fractional workers",
      args: ["up", "--workers", "1.5"],
      want: /^invalid --workers "1.5": want a whole number$/,
    },
    { name: "workers not a number", args: ["up", "--workers", "two"], want: /^invalid --workers "two"/ },
    {
      name: "zero control planes",
      args: ["up", "--control-planes", "0"],
      want: /^invalid --control-planes "0": want a positive number$/,
    },
    {
      name: "empty control planes",
      args: ["up", "--control-planes", ""],
      want: /^invalid --control-planes ""/,
    },
    {
      name: "too many nodes",
      args: ["up", "--control-planes", "5", "--workers", "60"],
      want: /^at most 64 nodes: got 65$/,
    },
    {
      name: "bad --network",
      args: ["up", "--network", "bridge"],
      want: /^invalid --network "bridge": want netns, loopback or auto$/,
    },
    {
      name: "zero --timeout",
      args: ["up", "--timeout", "0"],
      want: /^invalid --timeout "0": want a positive number$/,
    },
    {
      name: "a wildcard origin",
      args: ["up", "--cors-allow-origin", "*"],
      want: /^--cors-allow-origin: invalid origin "\*": wildcards are not allowed/,
    },
    {
      name: "an origin with a path",
      args: ["up", "--cors-allow-origin", "http://127.0.0.1:9080/"],
      want: /^--cors-allow-origin: invalid origin "http:\/\/127\.0\.0\.1:9080\/"/,
    },
    {
      name: "bad --output",
      args: ["status", "--output", "yaml"],
      want: /^invalid --output "yaml": want table or json$/,
    },
    { name: "flag without a value", args: ["status", "--output"], want: /--output/ },
    {
      name: "an up flag given to status",
      args: ["status", "--workers", "3"],
      want: /^--workers is not a flag of cluster status$/,
    },
    {
      name: "an up flag given to down",
      args: ["down", "--network=netns"],
      want: /^--network is not a flag of cluster down$/,
    },
    {
      name: "the cluster's shape given to recover (it is the stopped cluster's)",
      args: ["recover", "--workers", "3"],
      want: /^--workers is not a flag of cluster recover$/,
    },
    {
      name: "a flag given twice",
      args: ["up", "--workers", "1", "--workers", "3"],
      want: /^--workers is given twice \(cluster up\)$/,
    },
    {
      name: "zero --timeout of recover",
      args: ["recover", "--timeout", "0"],
      want: /^invalid --timeout "0": want a positive number$/,
    },
    {
      name: "a status flag given to up",
      args: ["up", "--output", "json"],
      want: /^--output is not a flag of cluster up$/,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.throws(() => parseClusterArgs(row.args), (error) => {
        assert.ok(error instanceof UsageError, `a UsageError, got ${error}`);
        assert.match(error.message, row.want);
        return true;
      });
    });
  }
});
