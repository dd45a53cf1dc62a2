/**
 * The browser-listener flags the bootstrapper and the join service take
 * (see `src/rpc/browser_server.ts`): off unless `--browser-port` is given,
 * and no web origin allowed unless named with `--cors-allow-origin`.
 *
 * @module
 */
import { OriginError, parseOrigin } from "../rpc/cors.ts";
import { parseListenAddress, parsePort, UsageError } from "./flags.ts";

/** Where a browser listener listens and which pages may call it. */
export interface BrowserListenerFlags {
  /** The port (0 picks a free one). */
  port: number;
  /** The address it binds. */
  address: string;
  /** Web origins whose pages may call (exact origins). */
  allowedOrigins: string[];
}

/** The flags' `parseArgs` options; spread them into a component's options. */
export const BROWSER_LISTENER_OPTIONS = {
  "browser-port": { type: "string" },
  "browser-address": { type: "string" },
  "cors-allow-origin": { type: "string", multiple: true },
} as const;

/**
 * The flags' lines for a component's `--help` (33-column flag column, as the
 * services use); `rpcs` names what the listener serves.
 */
export function browserListenerUsage(rpcs: string): string {
  return `  --browser-port <port>            also serve ${rpcs} (read-only) to web pages on this
                                   port, plain HTTP (default: off; see the README)
  --browser-address <addr>         IP address for --browser-port (default: --listen-address)
  --cors-allow-origin <origin>     a web origin whose pages may call the browser port, exactly as
                                   browsers send it, e.g. http://127.0.0.1:9080; repeat it or
                                   separate origins with commas (default: none)
`;
}

/**
 * Reads the flags' values; undefined when `--browser-port` is absent.
 * `listenAddress` is the component's main address, the default.
 *
 * @throws {UsageError} naming the flag: a bad port, address or origin, or
 * `--browser-address`/`--cors-allow-origin` without `--browser-port`.
 */
export function parseBrowserListener(
  values: { "browser-port"?: string; "browser-address"?: string; "cors-allow-origin"?: string[] },
  listenAddress: string,
): BrowserListenerFlags | undefined {
  const origins = (values["cors-allow-origin"] ?? []).flatMap((value) => value.split(",")).map((value) =>
    value.trim()
  );
  const allowedOrigins = origins.map((origin) => {
    try {
      return parseOrigin(origin);
    } catch (error) {
      if (error instanceof OriginError) throw new UsageError(`--cors-allow-origin: ${error.message}`);
      throw error;
    }
  });
  if (values["browser-port"] === undefined) {
    if (values["browser-address"] !== undefined || allowedOrigins.length > 0) {
      throw new UsageError(
        "--browser-address and --cors-allow-origin need --browser-port (the browser listener is off without it)",
      );
    }
    return undefined;
  }
  return {
    port: parsePort(values["browser-port"], "--browser-port"),
    address: values["browser-address"] === undefined
      ? listenAddress
      : parseListenAddress(values["browser-address"], "--browser-address"),
    allowedOrigins: [...new Set(allowedOrigins)],
  };
}
