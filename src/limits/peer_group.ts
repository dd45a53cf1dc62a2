/**
 * Which peers share a budget: one IPv4 address, or one IPv6 /64.
 *
 * An IPv6 host usually holds a whole /64 (SLAAC, privacy addresses), so a
 * limit per IPv6 address is a limit per attempt; the /64 is what one host
 * or site controls. IPv4-mapped IPv6 peers (`::ffff:10.0.0.7`, as a
 * dual-stack listener reports IPv4 clients) count as their IPv4 address.
 *
 * @module
 */
import { formatIp, maskTo, parseIp, unmapIpv4 } from "../net/ip.ts";

/** Prefix length of an IPv6 peer group. */
export const IPV6_PEER_PREFIX_LENGTH = 64;

/**
 * The group of a peer address, for per-peer limits: the IPv4 address itself
 * (`"10.0.0.7"`), or the IPv6 /64 as `"2001:db8:1:2::/64"`. A string that
 * is not an IP address (e.g. "unknown") is its own group.
 */
export function peerGroup(address: string): string {
  const parsed = parseIp(address);
  if (!parsed) return address;
  const ip = unmapIpv4(parsed);
  if (ip.length === 4) return formatIp(ip);
  return `${formatIp(maskTo(ip, IPV6_PEER_PREFIX_LENGTH))}/${IPV6_PEER_PREFIX_LENGTH}`;
}
