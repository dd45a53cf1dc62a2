import assert from "node:assert/strict";
import { type JoinServiceFlags, parseJoinServiceFlags } from "../../src/joinservice/flags.ts";
import { UsageError } from "../../src/flags/flags.ts";
import { formatIp } from "../../src/net/ip.ts";

/** The flags every join service needs; a case adds its own after them (later flags win). */
const REQUIRED = [
  "--attestation-variant",
  "dummy",
  "--key-service-endpoint",
  "key-service.kube-system:9000",
  "--api-server-endpoint",
  "10.0.0.1:6443",
];

function assertUsageError(args: string[], message: string) {
  assert.throws(() => parseJoinServiceFlags(args), (err) => {
    assert.ok(err instanceof UsageError, `${args.join(" ")}: ${err}`);
    assert.equal(err.message, message, args.join(" "));
    return true;
  });
}

Deno.test("parseJoinServiceFlags() reads addresses, endpoints and numbers", () => {
  const flags = parseJoinServiceFlags([
    ...REQUIRED,
    ...["--listen-address", "::", "--metrics-address", "127.0.0.1", "--port", "0", "--metrics-port=65535"],
    ...["--key-service-endpoint", "[::1]:9000", "--tls-cert", "/c", "--tls-key", "/k"],
    ...["--rate-per-peer", "0.5", "--burst-global", "7", "--nonce-lifetime", "1.5"],
    ...["--bootstrap-token-ttl", "30"],
  ]);
  assert.ok(flags !== "help");
  assert.equal(flags.listenAddress, "::");
  assert.equal(flags.metricsAddress, "127.0.0.1");
  assert.equal(flags.port, 0);
  assert.equal(flags.metricsPort, 65535);
  assert.equal(flags.keyServiceEndpoint, "[::1]:9000");
  assert.equal(flags.apiServerEndpoint, "10.0.0.1:6443");
  assert.deepEqual([flags.tlsCert, flags.tlsKey], ["/c", "/k"]);
  assert.deepEqual([flags.ratePerPeer, flags.burstGlobal, flags.nonceLifetimeMs], [0.5, 7, 1500]);
  assert.equal(flags.bootstrapTokenTtlMs, 30_000);
});

Deno.test("parseJoinServiceFlags() reads the bootstrap token TTL: 15 minutes by default, 10 s to a day", () => {
  const ttl = (args: string[]) => {
    const flags = parseJoinServiceFlags([...REQUIRED, ...args]);
    assert.ok(flags !== "help");
    return flags.bootstrapTokenTtlMs;
  };
  assert.equal(ttl([]), 15 * 60_000);
  assert.equal(ttl(["--bootstrap-token-ttl", "10"]), 10_000);
  assert.equal(ttl(["--bootstrap-token-ttl", "86400"]), 86_400_000);
  for (const value of ["9.5", "86401"]) {
    assertUsageError(
      [...REQUIRED, "--bootstrap-token-ttl", value],
      `invalid --bootstrap-token-ttl "${value}": want 10 to 86400 seconds`,
    );
  }
});

Deno.test("parseJoinServiceFlags() says what is wrong with a negative number, for every numeric flag", () => {
  const wants: Record<string, string> = {
    "--port": "want a number from 0 to 65535",
    "--metrics-port": "want a number from 0 to 65535",
    "--rate-per-peer": "want a positive number",
    "--burst-per-peer": "want a positive number",
    "--rate-global": "want a positive number",
    "--burst-global": "want a positive number",
    "--verify-concurrency": "want a positive number",
    "--verify-queue": "want a positive number",
    "--nonce-lifetime": "want a positive number",
    "--bootstrap-token-ttl": "want a positive number",
    "--max-connections": "want a positive number",
    "--max-connections-per-peer": "want a positive number",
    "--max-streams-per-connection": "want a positive number",
    "--max-calls-in-progress": "want a positive number",
    "--max-calls-waiting": "want a whole number, 0 or more",
    "--handshake-timeout": "want a positive number",
    "--idle-timeout": "want a positive number",
    "--request-timeout": "want a positive number",
  };
  for (const [flag, want] of Object.entries(wants)) {
    for (const value of ["-1", "-2.5", "abc"]) {
      assertUsageError([...REQUIRED, flag, value], `invalid ${flag} "${value}": ${want}`);
    }
  }
});

Deno.test("parseJoinServiceFlags() refuses listen addresses that are not IP addresses", () => {
  for (const flag of ["--listen-address", "--metrics-address"]) {
    for (const value of ["nonsense", "999.1.1.1", "localhost", "[::1]", "10.0.0.1:80", ""]) {
      assertUsageError(
        [...REQUIRED, `${flag}=${value}`],
        `invalid ${flag} "${value}": want an IP address, e.g. 0.0.0.0, 127.0.0.1 or ::`,
      );
    }
  }
});

Deno.test("parseJoinServiceFlags() refuses an endpoint without a port, or otherwise not host:port", () => {
  const cases: [string, string, string][] = [
    ["--key-service-endpoint", "key-service", "no port"],
    ["--key-service-endpoint", "key-service:", "no port"],
    ["--key-service-endpoint", "key-service:0", 'port "0" is not a number from 1 to 65535'],
    ["--key-service-endpoint", "::1:9000", "an IPv6 address needs brackets, e.g. [::1]:9000"],
    ["--key-service-endpoint", "http://key-service:9000", "not host:port"],
    ["--api-server-endpoint", "10.0.0.1", "no port"],
    ["--api-server-endpoint", "999.0.0.1:6443", "999.0.0.1 is not an IPv4 address"],
  ];
  for (const [flag, value, reason] of cases) {
    const example = flag === "--api-server-endpoint" ? "10.0.0.1:6443" : "key-service.kube-system:9000";
    assertUsageError(
      [...REQUIRED, flag, value],
      `invalid ${flag} "${value}": ${reason} (want host:port, e.g. ${example})`,
    );
  }
});

Deno.test("parseJoinServiceFlags() wants --tls-cert and --tls-key together", () => {
  assertUsageError(
    [...REQUIRED, "--tls-cert", "/c"],
    "--tls-cert needs --tls-key (give both, or neither for a self-signed certificate)",
  );
  assertUsageError(
    [...REQUIRED, "--tls-key", "/k"],
    "--tls-key needs --tls-cert (give both, or neither for a self-signed certificate)",
  );
});

Deno.test("parseJoinServiceFlags() wants an http(s) metadata URL without credentials", () => {
  const base = REQUIRED.filter((_, i, all) =>
    all[i] !== "--api-server-endpoint" && all[i - 1] !== "--api-server-endpoint"
  );
  assertUsageError(
    [...base, "--metadata-url", "ftp://x"],
    "invalid --metadata-url: scheme ftp, want http://host:port",
  );
  assertUsageError(
    [...base, "--metadata-url", "ftp://admin:hunter2@169.254.169.254"],
    "invalid --metadata-url: no user or password in the URL",
  );
  assertUsageError(
    [...base, "--metadata-url", "http//h"],
    "invalid --metadata-url: not a URL (want http://host:port)",
  );
  assertUsageError(
    [...base, "--metadata-url", "http://user:pw@127.0.0.1:1/"],
    "invalid --metadata-url: no user or password in the URL",
  );
  assert.equal(
    (parseJoinServiceFlags([...base, "--metadata-url", "http://10.42.0.1:8080/"]) as JoinServiceFlags)
      .metadataUrl,
    "http://10.42.0.1:8080",
  );
});

Deno.test("parseJoinServiceFlags() reads the challenge lifetime: 120 s by default, 1 s to an hour", async (t) => {
  const rows: { name: string; args: string[]; ms?: number; error?: string }[] = [
    { name: "default", args: [], ms: 120_000 },
    { name: "lowest", args: ["--nonce-lifetime", "1"], ms: 1_000 },
    { name: "highest", args: ["--nonce-lifetime", "3600"], ms: 3_600_000 },
    {
      name: "below a second",
      args: ["--nonce-lifetime", "0.5"],
      error: 'invalid --nonce-lifetime "0.5": want 1 to 3600 seconds',
    },
    {
      name: "over an hour",
      args: ["--nonce-lifetime", "3601"],
      error: 'invalid --nonce-lifetime "3601": want 1 to 3600 seconds',
    },
  ];
  for (const { name, args, ms, error } of rows) {
    await t.step(name, () => {
      if (error) return assertUsageError([...REQUIRED, ...args], error);
      const flags = parseJoinServiceFlags([...REQUIRED, ...args]);
      assert.ok(flags !== "help");
      assert.equal(flags.nonceLifetimeMs, ms);
    });
  }
});

Deno.test("parseJoinServiceFlags() wants one of --api-server-endpoint and --metadata-url, not both", () => {
  assertUsageError(
    [...REQUIRED, "--metadata-url", "http://10.42.0.1:8080"],
    "give only one of --api-server-endpoint and --metadata-url",
  );
  assertUsageError(
    REQUIRED.slice(0, 4),
    "one of --api-server-endpoint and --metadata-url is required",
  );
});

Deno.test("parseJoinServiceFlags() reads the service network: kubeadm's 10.96.0.0/12 by default", async (t) => {
  const network = (args: string[]) => {
    const flags = parseJoinServiceFlags([...REQUIRED, ...args]);
    assert.ok(flags !== "help");
    return `${formatIp(flags.serviceNetwork.address)}/${flags.serviceNetwork.prefixLength}`;
  };
  await t.step("default", () => assert.equal(network([]), "10.96.0.0/12"));
  await t.step(
    "IPv4",
    () => assert.equal(network(["--service-cluster-ip-range", "172.20.0.0/16"]), "172.20.0.0/16"),
  );
  await t.step(
    "IPv6",
    () => assert.equal(network(["--service-cluster-ip-range", "fd00:10::/108"]), "fd00:10::/108"),
  );
  for (const value of ["10.96.0.0", "10.96.0.0/33", "nonsense", ""]) {
    await t.step(`refused: ${JSON.stringify(value)}`, () => {
      assertUsageError(
        [...REQUIRED, `--service-cluster-ip-range=${value}`],
        `invalid --service-cluster-ip-range "${value}": want a CIDR like 10.96.0.0/12`,
      );
    });
  }
});
