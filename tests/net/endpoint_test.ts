import assert from "node:assert/strict";
import { EndpointError, parseEndpoint } from "../../src/net/endpoint.ts";

Deno.test("parseEndpoint() reads host:port with a DNS name, an IPv4 or a bracketed IPv6 address", () => {
  assert.deepEqual(parseEndpoint("key-service.kube-system:9000"), {
    host: "key-service.kube-system",
    port: 9000,
  });
  assert.deepEqual(parseEndpoint("10.0.0.1:6443"), { host: "10.0.0.1", port: 6443 });
  assert.deepEqual(parseEndpoint("[::1]:1"), { host: "[::1]", port: 1 });
  assert.deepEqual(parseEndpoint("[fd00::a:b]:65535"), { host: "[fd00::a:b]", port: 65535 });
  assert.deepEqual(parseEndpoint("localhost:9000"), { host: "localhost", port: 9000 });
});

Deno.test("parseEndpoint() names what is wrong", () => {
  const cases: [string, string][] = [
    ["", "no port"],
    ["key-service", "no port"],
    ["key-service:", "no port"],
    ["[::1]", "no port"],
    [":9000", "no host"],
    ["key-service:0", 'port "0" is not a number from 1 to 65535'],
    ["key-service:65536", 'port "65536" is not a number from 1 to 65535'],
    ["key-service:-1", 'port "-1" is not a number from 1 to 65535'],
    ["key-service:9000/x", 'port "9000/x" is not a number from 1 to 65535'],
    ["::1:9000", "an IPv6 address needs brackets, e.g. [::1]:9000"],
    ["http://key-service:9000", "not host:port"],
    ["a b:1", 'bad host "a b"'],
    ["[not-v6]:1", 'bad host "[not-v6]"'],
    [
      "[fe80::1%eth0]:9000",
      'bad host "[fe80::1%eth0]": an IPv6 zone (%…) cannot be used, URLs cannot carry it',
    ],
    ["-host:1", 'bad host "-host"'],
    ["999.1.1.1:1", "999.1.1.1 is not an IPv4 address"],
  ];
  for (const [value, message] of cases) {
    assert.throws(() => parseEndpoint(value), (err) => {
      assert.ok(err instanceof EndpointError, `${value}: ${err}`);
      assert.equal(err.message, message, value);
      return true;
    });
  }
});
