/**
 * The console page's reading of an address the operator typed
 * (`src/console/web/call_errors.ts`), without a browser: the function is
 * plain TypeScript.
 */
import assert from "node:assert/strict";
import { baseUrlOf } from "../../src/console/web/call_errors.ts";

const EXAMPLE = "10.42.0.3:9001";

Deno.test("baseUrlOf: host:port or http(s)://host[:port], also on a scheme's default port", async (t) => {
  const rows: [name: string, address: string, want: string][] = [
    ["host:port", "10.42.0.3:9001", "http://10.42.0.3:9001"],
    ["spaces around it", "  10.42.0.3:9001 ", "http://10.42.0.3:9001"],
    ["a host name", "node.local.:9001", "http://node.local.:9001"],
    ["an IPv6 host in brackets", "[fd00::1]:9001", "http://[fd00::1]:9001"],
    ["http:// with a port", "http://10.42.0.3:9001", "http://10.42.0.3:9001"],
    ["https:// with a port", "https://node.example:8443", "https://node.example:8443"],
    ["a trailing slash", "10.42.0.3:9001/", "http://10.42.0.3:9001"],
    ["the scheme in capitals", "HTTPS://node.example:8443", "https://node.example:8443"],
    // The parser drops a scheme's default port from url.port; the address is still host:port.
    ["host:80", "10.42.0.3:80", "http://10.42.0.3"],
    ["http:// on port 80", "http://10.42.0.3:80", "http://10.42.0.3"],
    ["https:// on port 443 (a TLS proxy)", "https://node.example:443", "https://node.example"],
    ["IPv6 on port 80", "[fd00::1]:80", "http://[fd00::1]"],
    ["https:// without a port: 443", "https://node.example", "https://node.example"],
    ["http:// without a port: 80", "http://node.example/", "http://node.example"],
  ];
  for (const [name, address, want] of rows) {
    await t.step(name, () => assert.equal(baseUrlOf(address, EXAMPLE), want));
  }
});

Deno.test("baseUrlOf: anything else is refused in words naming the example", async (t) => {
  const rows: [name: string, address: string, want: RegExp][] = [
    ["nothing", "   ", /^Enter an address, e\.g\. 10\.42\.0\.3:9001\.$/],
    ["a host without a port or scheme", "10.42.0.3", /is not host:port/],
    ["an IPv6 host without a port", "[fd00::1]", /is not host:port/],
    ["an empty port", "10.42.0.3:", /is not host:port/],
    ["a path", "10.42.0.3:9001/init.API", /is not host:port/],
    ["a query", "http://10.42.0.3:9001?x=1", /is not host:port/],
    ["a fragment", "10.42.0.3:9001#x", /is not host:port/],
    ["user and password", "http://user:secret@10.42.0.3:9001", /is not host:port/],
    ["another scheme", "ftp://10.42.0.3:9001", /is not host:port/],
    ["a port out of range", "10.42.0.3:70000", /is not an address/],
    ["an unbracketed IPv6 address", "fd00::1:9001", /is not an address/],
  ];
  for (const [name, address, want] of rows) {
    await t.step(name, () => {
      assert.throws(() => baseUrlOf(address, EXAMPLE), (error: Error) => {
        assert.match(error.message, want);
        return true;
      });
    });
  }
});
