/**
 * Cross-origin access for the browser listeners (`browser_server.ts`): which
 * web pages may call a service's read-only RPCs from a browser.
 *
 * A browser sends the page's origin with every cross-origin call and first
 * asks permission for a Connect call (a preflight `OPTIONS`, since a JSON
 * body is not a "simple" request). Only origins on the operator's allow-list
 * (`--cors-allow-origin`, nothing by default) get that permission and the
 * `Access-Control-Allow-Origin` answer the browser needs to hand the page the
 * response. A request from any other origin is refused with 403 before a
 * handler runs, preflight or not. A request without an `Origin` header is
 * not a browser's cross-origin call (curl, `buf curl`) and passes: CORS is
 * the browser's protection of its user, not access control.
 *
 * @module
 */
import { cors as connectCors } from "@connectrpc/connect";
import type { RpcRequest, RpcResponse } from "./handler.ts";

/** How long a browser may cache a preflight's answer. */
const PREFLIGHT_MAX_AGE_SECONDS = 600;

/** A value for an origin allow-list that is not an exact origin. */
export class OriginError extends Error {
  /** `value` is not a usable origin; the message says why. */
  constructor(value: string, why: string) {
    super(`invalid origin "${value}": ${why} (want scheme://host[:port], e.g. http://127.0.0.1:9080)`);
    this.name = "OriginError";
  }
}

/**
 * Checks `value` is one exact web origin, `http` or `https`, written as
 * browsers send it (lower-case, no default port, no path or trailing slash),
 * and returns it. Throws {@linkcode OriginError}: wildcards (`*`) and `null`
 * (sandboxed frames, `file:` pages) are refused, since either would let
 * pages the operator never named read the answers.
 */
export function parseOrigin(value: string): string {
  if (value === "*") throw new OriginError(value, "wildcards are not allowed: name each origin");
  if (value === "null") throw new OriginError(value, "the opaque origin null is not allowed");
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new OriginError(value, "not a URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new OriginError(value, "not http or https");
  }
  if (url.origin !== value) {
    throw new OriginError(
      value,
      `browsers send it as "${url.origin}" (no path, lower-case, no default port)`,
    );
  }
  return value;
}

/** What {@linkcode CorsPolicy.apply} did with a request. */
export type CorsOutcome =
  /** The request may go on to the handler (CORS headers are set when it came from an allowed origin). */
  | "continue"
  /** The policy answered it (a preflight, or a refusal): the handler must not run. */
  | "answered";

/** The CORS policy of one listener: its origin allow-list. */
export class CorsPolicy {
  readonly #origins: ReadonlySet<string>;

  /** A policy allowing exactly `origins` (each checked with {@linkcode parseOrigin}). */
  constructor(origins: readonly string[]) {
    this.#origins = new Set(origins.map(parseOrigin));
  }

  /** The allowed origins, sorted. */
  get origins(): string[] {
    return [...this.#origins].sort();
  }

  /** Whether a page from `origin` may call. */
  allows(origin: string): boolean {
    return this.#origins.has(origin);
  }

  /**
   * Applies the policy to `req`: answers a preflight (204 with the allowed
   * methods and headers, or 403), refuses a call from an origin not on the
   * list (403), or sets the response headers an allowed origin's call needs
   * and lets it continue.
   */
  apply(req: RpcRequest, res: RpcResponse): CorsOutcome {
    const origin = req.headers.origin;
    if (origin === undefined) return "continue";
    if (!this.allows(origin)) {
      res.writeHead(403, { "content-type": "text/plain; charset=utf-8", vary: "Origin" });
      res.end(`origin ${origin} is not allowed to call this service (see --cors-allow-origin)\n`);
      return "answered";
    }
    const headers: Record<string, string> = { "access-control-allow-origin": origin, vary: "Origin" };
    if (req.method === "OPTIONS") {
      headers["access-control-allow-methods"] = connectCors.allowedMethods.join(", ");
      headers["access-control-allow-headers"] = connectCors.allowedHeaders.join(", ");
      headers["access-control-max-age"] = String(PREFLIGHT_MAX_AGE_SECONDS);
      // Chromium's Private Network Access asks before a page reaches a more private address.
      if (req.headers["access-control-request-private-network"] === "true") {
        headers["access-control-allow-private-network"] = "true";
      }
      res.writeHead(204, headers);
      res.end();
      return "answered";
    }
    headers["access-control-expose-headers"] = connectCors.exposedHeaders.join(", ");
    for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
    return "continue";
  }
}
