/**
 * IP addresses as bytes: parsing text (IPv4 dotted quads, IPv6 with `::`,
 * embedded IPv4 and zone IDs), CIDR networks, and the few classes of
 * addresses the services refuse or group by.
 *
 * @module
 */

/** An IPv4 (4 bytes) or IPv6 (16 bytes) address. */
export type IpAddress = Uint8Array<ArrayBuffer>;

/** A network: its first address and prefix length. */
export interface IpNetwork {
  /** The address with every bit past the prefix cleared. */
  address: IpAddress;
  /** Prefix length in bits. */
  prefixLength: number;
}

const IPV4_MAPPED_PREFIX = Uint8Array.of(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff);

/**
 * Parses an IP address: `10.0.0.1`, `fd00::7`, `::ffff:10.0.0.1`,
 * `[fd00::7]`, `fe80::1%eth0` (the zone is dropped). Returns undefined for
 * anything else. IPv4-mapped IPv6 addresses stay 16 bytes; see
 * {@linkcode unmapIpv4}.
 */
export function parseIp(text: string): IpAddress | undefined {
  const value = text.startsWith("[") && text.endsWith("]") ? text.slice(1, -1) : text;
  if (!value.includes(":")) return parseIpv4(value);
  const zone = value.indexOf("%");
  if (zone === -1) return parseIpv6(value);
  // An interface may have any name without a `/` (br_lan): a peer's address can carry it.
  return /^[^%/\s]+$/.test(value.slice(zone + 1)) ? parseIpv6(value.slice(0, zone)) : undefined;
}

/**
 * 4 or 6 for an IPv4 or IPv6 address written without brackets, 0 for
 * anything else: `node:net`'s `isIP` (which takes a zone of letters, digits,
 * `.`, `:` and `-` only), without loading `node:net` (the CLI parses its
 * flags before it loads the modules only its network commands need; see
 * `scripts/build.ts`).
 */
export function ipVersion(text: string): 0 | 4 | 6 {
  const zone = text.indexOf("%");
  if (text.startsWith("[") || (zone !== -1 && !/^[0-9A-Za-z.:-]+$/.test(text.slice(zone + 1)))) return 0;
  const address = parseIp(text);
  return address === undefined ? 0 : address.length === 4 ? 4 : 6;
}

/** The 4-byte address of an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`); any other address unchanged. */
export function unmapIpv4(address: IpAddress): IpAddress {
  if (address.length !== 16 || !startsWith(address, IPV4_MAPPED_PREFIX)) return address;
  return address.slice(12);
}

/** The usual text form: dotted quad, or RFC 5952 IPv6 (lower case, longest zero run as `::`). */
export function formatIp(address: Uint8Array): string {
  if (address.length === 4) return address.join(".");
  const groups = Array.from({ length: 8 }, (_, i) => (address[2 * i] << 8) | address[2 * i + 1]);
  let best = { start: -1, length: 0 };
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > best.length && j - i > 1) best = { start: i, length: j - i };
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best.start < 0) return hex.join(":");
  const head = hex.slice(0, best.start).join(":");
  const tail = hex.slice(best.start + best.length).join(":");
  return `${head}::${tail}`;
}

/** Parses `address/prefix` (e.g. `10.96.0.0/12`); host bits are cleared. Returns undefined when invalid. */
export function parseCidr(text: string): IpNetwork | undefined {
  const slash = text.lastIndexOf("/");
  if (slash < 0) return undefined;
  const address = parseIp(text.slice(0, slash));
  const prefix = text.slice(slash + 1);
  if (!address || !/^\d{1,3}$/.test(prefix)) return undefined;
  const prefixLength = Number(prefix);
  if (prefixLength > address.length * 8) return undefined;
  return { address: maskTo(address, prefixLength), prefixLength };
}

/** The network's first usable address (network address + 1): e.g. the Kubernetes API service's IP. */
export function firstAddress(network: IpNetwork): IpAddress {
  const address = new Uint8Array(network.address);
  for (let i = address.length - 1; i >= 0; i--) {
    address[i] = (address[i] + 1) & 0xff;
    if (address[i] !== 0) break;
  }
  return address;
}

/** `address` with every bit past `prefixLength` cleared. */
export function maskTo(address: IpAddress, prefixLength: number): IpAddress {
  const masked = new Uint8Array(address);
  for (let bit = prefixLength; bit < masked.length * 8; bit++) masked[bit >> 3] &= ~(0x80 >> (bit & 7));
  return masked;
}

/** Whether two addresses are the same (an IPv4-mapped IPv6 address equals its IPv4 address). */
export function ipEquals(a: Uint8Array, b: Uint8Array): boolean {
  const x = unmapIpv4(new Uint8Array(a));
  const y = unmapIpv4(new Uint8Array(b));
  return x.length === y.length && x.every((byte, i) => byte === y[i]);
}

/** Whether the address is a loopback address (127.0.0.0/8, ::1) or unspecified (0.0.0.0, ::). */
export function isLoopbackOrUnspecified(address: Uint8Array): boolean {
  const ip = unmapIpv4(new Uint8Array(address));
  if (ip.length === 4) return ip[0] === 127 || ip.every((byte) => byte === 0);
  return ip.subarray(0, 15).every((byte) => byte === 0) && (ip[15] === 0 || ip[15] === 1);
}

function parseIpv4(text: string): IpAddress | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  const bytes = new Uint8Array(4);
  for (const [i, part] of parts.entries()) {
    // No leading zeros: "010" is octal to some parsers and decimal to others.
    if (!/^(0|[1-9]\d{0,2})$/.test(part) || Number(part) > 255) return undefined;
    bytes[i] = Number(part);
  }
  return bytes;
}

function parseIpv6(text: string): IpAddress | undefined {
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  // Only the last 32 bits may be written as IPv4, so only in the last half.
  const groups = (half: string, last: boolean): number[] | undefined => {
    if (half === "") return [];
    const result: number[] = [];
    const parts = half.split(":");
    for (const [i, part] of parts.entries()) {
      if (last && i === parts.length - 1 && part.includes(".")) {
        const v4 = parseIpv4(part);
        if (!v4) return undefined;
        result.push((v4[0] << 8) | v4[1], (v4[2] << 8) | v4[3]);
      } else if (/^[0-9a-fA-F]{1,4}$/.test(part)) {
        result.push(parseInt(part, 16));
      } else {
        return undefined;
      }
    }
    return result;
  };
  const head = groups(halves[0], halves.length === 1);
  const tail = halves.length === 2 ? groups(halves[1], true) : [];
  if (!head || !tail) return undefined;
  if (halves.length === 1 ? head.length !== 8 : head.length + tail.length > 7) return undefined;
  const all = [...head, ...new Array(8 - head.length - tail.length).fill(0), ...tail];
  const bytes = new Uint8Array(16);
  all.forEach((group, i) => {
    bytes[2 * i] = group >> 8;
    bytes[2 * i + 1] = group & 0xff;
  });
  return bytes;
}

function startsWith(bytes: Uint8Array, prefix: Uint8Array): boolean {
  return prefix.every((byte, i) => bytes[i] === byte);
}
