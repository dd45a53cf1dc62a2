/**
 * "host:port" endpoints (the key service's, the API server's): the one
 * parser for them, used by the flag parsers and the clients alike.
 *
 * @module
 */
import { ipVersion } from "./ip.ts";

/** A parsed "host:port". */
export interface Endpoint {
  /** The host as written: a DNS name, an IPv4 address, or an IPv6 address in brackets ("[::1]"). */
  host: string;
  /** The port, 1–65535. */
  port: number;
}

/** A value that is not "host:port". The message says what is wrong, for the caller to prefix. */
export class EndpointError extends Error {
  /** Creates the error; `message` says what is wrong, without naming the flag. */
  constructor(message: string) {
    super(message);
    this.name = "EndpointError";
  }
}

/** "host:port" or "[v6]:port"; the host a DNS name or an address. */
const ENDPOINT = /^(\[[^\]]*\]|[^:[\]]*):([^:]*)$/;
/** What a DNS name or an IPv4 address may hold. */
const HOST_NAME = /^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$/;

/**
 * Parses "host:port" ("key-service.kube-system:9000", "10.0.0.1:6443",
 * "[::1]:9000").
 *
 * @throws {EndpointError} naming the problem: no port, a port that is not a
 * number from 1 to 65535, an IPv6 address without brackets, or a bad host.
 */
export function parseEndpoint(value: string): Endpoint {
  const match = ENDPOINT.exec(value);
  if (!match) {
    if (!value.includes(":") || /^\[[^\]]*\]$/.test(value)) throw new EndpointError("no port");
    if (!value.startsWith("[") && ipVersion(value.slice(0, value.lastIndexOf(":"))) === 6) {
      throw new EndpointError("an IPv6 address needs brackets, e.g. [::1]:9000");
    }
    throw new EndpointError("not host:port");
  }
  const [, host, portText] = match;
  if (host === "") throw new EndpointError("no host");
  if (host.startsWith("[") && host.includes("%")) {
    throw new EndpointError(`bad host "${host}": an IPv6 zone (%…) cannot be used, URLs cannot carry it`);
  }
  if (portText === "") throw new EndpointError("no port");
  if (host.startsWith("[") ? ipVersion(host.slice(1, -1)) !== 6 : !HOST_NAME.test(host)) {
    throw new EndpointError(`bad host "${host}"`);
  }
  if (/^[\d.]+$/.test(host) && ipVersion(host) !== 4) {
    throw new EndpointError(`${host} is not an IPv4 address`);
  }
  const port = /^\d{1,5}$/.test(portText) ? Number(portText) : NaN;
  if (!(port >= 1 && port <= 65535)) {
    throw new EndpointError(`port "${portText}" is not a number from 1 to 65535`);
  }
  return { host, port };
}

/** "host:port" for a URL or a flag, IPv6 addresses in brackets ("[::1]:9000"). */
export function joinHostPort(host: string, port: number): string {
  return `${host.includes(":") && !host.startsWith("[") ? `[${host}]` : host}:${port}`;
}
