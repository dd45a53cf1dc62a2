import assert from "node:assert/strict";
import { isIP } from "node:net";
import {
  firstAddress,
  formatIp,
  ipEquals,
  ipVersion,
  isLoopbackOrUnspecified,
  parseCidr,
  parseIp,
  unmapIpv4,
} from "../../src/net/ip.ts";
import { peerGroup } from "../../src/limits/peer_group.ts";

Deno.test("parseIp reads IPv4, IPv6 (with ::, embedded IPv4 last, brackets, zones) and nothing else", () => {
  const cases: [string, string | undefined][] = [
    ["10.0.0.1", "10.0.0.1"],
    ["255.255.255.255", "255.255.255.255"],
    ["fd00::7", "fd00::7"],
    ["FD00:0:0:0:0:0:0:7", "fd00::7"],
    ["::", "::"],
    ["::1", "::1"],
    ["1::", "1::"],
    ["[2001:db8::1]", "2001:db8::1"],
    ["fe80::1%eth0", "fe80::1"],
    ["::ffff:10.0.0.1", "::ffff:a00:1"],
    ["2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"],
    ["1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"],
    ["256.0.0.1", undefined],
    ["010.0.0.1", undefined],
    ["10.0.0", undefined],
    ["10.0.0.1.2", undefined],
    ["1:2:3:4:5:6:7:8:9", undefined],
    ["1::2::3", undefined],
    ["1:2:3:4:5:6:7::8", undefined],
    ["12345::", undefined],
    ["fd00::g", undefined],
    ["1.2.3.4::ffff", undefined],
    ["::1.2.3.4:ffff", undefined],
    ["10.0.0.1%eth0", undefined],
    ["fe80::1%br_lan", "fe80::1"],
    ["fe80::1%", undefined],
    ["fe80::1%eth0%1", undefined],
    ["fe80::1%a/b", undefined],
    ["", undefined],
    ["unknown", undefined],
    ["*", undefined],
  ];
  for (const [text, want] of cases) {
    const parsed = parseIp(text);
    assert.equal(parsed === undefined ? undefined : formatIp(parsed), want, text);
  }
});

Deno.test("ipVersion answers as node:net's isIP", async (t) => {
  const rows: [string, string, 0 | 4 | 6][] = [
    ["IPv4", "10.0.0.1", 4],
    ["IPv6", "fd00::7", 6],
    ["IPv6 with a zone", "fe80::1%eth0", 6],
    ["IPv6 with embedded IPv4", "::ffff:10.0.0.1", 6],
    ["bracketed IPv6", "[::1]", 0],
    ["IPv4 with a zone", "10.0.0.1%eth0", 0],
    ["IPv4 before ::", "1.2.3.4::ffff", 0],
    ["a zone with an underscore", "fe80::1%eth_0", 0],
    ["an empty zone", "fe80::1%", 0],
    ["a leading zero", "010.0.0.1", 0],
    ["a host name", "localhost", 0],
    ["nothing", "", 0],
  ];
  for (const [name, text, version] of rows) {
    await t.step(name, () => {
      assert.equal(ipVersion(text), version);
      assert.equal(isIP(text), version, "node:net agrees");
    });
  }
});

Deno.test("ipVersion agrees with node:net's isIP on 50,000 generated near-addresses", () => {
  const pieces = [
    ...["0", "1", "01", "12", "123", "255", "256", "ff", "FFFF", "fffff", "fe80", "a:b", "g", "0x1", " "],
    ...["1.2.3.4", "1.2.3", "255.255.255.255", "::ffff:", "[", "]", "%", "%eth0", "%1", "%a.b", "%_", "%-"],
  ];
  const separators = ["", ".", ":", "::"];
  let seed = 12345;
  const next = (bound: number) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % bound;
  };
  for (let i = 0; i < 50_000; i++) {
    let text = "";
    for (let parts = 1 + next(6); parts > 0; parts--) {
      text += pieces[next(pieces.length)] + separators[next(separators.length)];
    }
    assert.equal(ipVersion(text), isIP(text), JSON.stringify(text));
  }
});

Deno.test("IPv4-mapped IPv6 addresses equal their IPv4 address", () => {
  assert.equal(formatIp(unmapIpv4(parseIp("::ffff:127.0.0.1")!)), "127.0.0.1");
  assert.ok(ipEquals(parseIp("::ffff:10.96.0.1")!, parseIp("10.96.0.1")!));
  assert.ok(!ipEquals(parseIp("10.96.0.1")!, parseIp("10.96.0.2")!));
  assert.ok(!ipEquals(parseIp("::a60:1")!, parseIp("10.96.0.1")!), "only the ::ffff: prefix maps");
});

Deno.test("parseCidr clears host bits; firstAddress is the network address plus one", () => {
  const network = parseCidr("10.96.0.0/12")!;
  assert.equal(formatIp(network.address), "10.96.0.0");
  assert.equal(formatIp(firstAddress(network)), "10.96.0.1");
  assert.equal(formatIp(firstAddress(parseCidr("10.100.7.9/12")!)), "10.96.0.1");
  assert.equal(formatIp(firstAddress(parseCidr("fd00:10:96::/108")!)), "fd00:10:96::1");
  assert.equal(formatIp(firstAddress(parseCidr("10.0.0.255/32")!)), "10.0.1.0", "carries into the next byte");
  for (const bad of ["10.96.0.0", "10.96.0.0/33", "fd00::/129", "x/12", "10.96.0.0/-1", "10.96.0.0/1a"]) {
    assert.equal(parseCidr(bad), undefined, bad);
  }
});

Deno.test("loopback and unspecified addresses, in both families", () => {
  for (const ip of ["127.0.0.1", "127.255.0.9", "0.0.0.0", "::1", "::", "::ffff:127.0.0.1"]) {
    assert.ok(isLoopbackOrUnspecified(parseIp(ip)!), ip);
  }
  for (const ip of ["10.0.0.1", "128.0.0.1", "::2", "fd00::1", "::ffff:10.0.0.1"]) {
    assert.ok(!isLoopbackOrUnspecified(parseIp(ip)!), ip);
  }
});

Deno.test("peerGroup: an IPv4 address, or an IPv6 /64", () => {
  assert.equal(peerGroup("10.0.0.7"), "10.0.0.7");
  assert.equal(peerGroup("::ffff:10.0.0.7"), "10.0.0.7");
  assert.equal(peerGroup("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64");
  assert.equal(peerGroup("2001:DB8:1:2::ffff"), "2001:db8:1:2::/64");
  assert.equal(peerGroup("[fd00::1]"), "fd00::/64");
  assert.equal(peerGroup("fe80::1:2:3:4%br_lan"), "fe80::/64", "a zone node:net would refuse");
  assert.equal(peerGroup("::1"), "::/64");
  assert.equal(peerGroup("unknown"), "unknown");
});
