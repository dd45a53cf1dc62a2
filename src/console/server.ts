/**
 * The browser console's web server: the built page (`build.ts`) and, when
 * pointed at a local cluster, two read-only documents of it. Nothing else:
 * the page talks to the nodes and join services itself (their browser
 * ports), so this server holds no secret and proxies nothing.
 *
 * | path                        | what                                                                  |
 * | --------------------------- | --------------------------------------------------------------------- |
 * | `/`, `/app.js`, `/style.css` | the page                                                              |
 * | `/api/cluster`              | the cluster's status, without paths or PIDs (`cluster_summary.ts`)    |
 * | `/api/attestation-config`   | the cluster's attestation config (the operator's copy; public data)   |
 *
 * Only GET and HEAD; the `Host` header must name this server (a page on
 * another site cannot read these through DNS rebinding); every answer
 * carries a content security policy that lets the page load only its own
 * files and call other hosts only with `fetch`.
 *
 * @module
 */
import { readStatus } from "../localcluster/status.ts";
import { summarizeCluster } from "./cluster_summary.ts";

/** Options for {@linkcode serveConsole}. */
export interface ConsoleServerOptions {
  /** The built console (see `build.ts`). */
  dir: string;
  /** Address to bind, e.g. 127.0.0.1. */
  hostname: string;
  /** Port to bind; 0 picks a free one. */
  port: number;
  /** A local cluster's state directory, whose status and attestation config are served. */
  localCluster?: string;
}

/** A running console server. */
export interface ConsoleServer extends AsyncDisposable {
  /** The bound port. */
  readonly port: number;
  /** The page's URL. */
  readonly url: string;
  /** Stops serving. */
  close(): Promise<void>;
}

/** The page's content security policy: its own files only; `fetch` to any http(s) host (the nodes). */
export const CONTENT_SECURITY_POLICY: string = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self' http: https:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

const STATIC_FILES: Record<string, string> = {
  "/": "index.html",
  "/index.html": "index.html",
  "/app.js": "app.js",
  "/app.js.map": "app.js.map",
  "/style.css": "style.css",
};

const CONTENT_TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  map: "application/json; charset=utf-8",
  css: "text/css; charset=utf-8",
};

/** Starts the console server; resolves once it listens. */
export async function serveConsole(options: ConsoleServerOptions): Promise<ConsoleServer> {
  const listening = Promise.withResolvers<number>();
  const server = Deno.serve({
    hostname: options.hostname,
    port: options.port,
    onListen: ({ port }) => listening.resolve(port),
  }, (request) => handle(request, options, port));
  const port = await listening.promise;
  const host = options.hostname.includes(":") ? `[${options.hostname}]` : options.hostname;
  const close = () => server.shutdown();
  return { port, url: `http://${host}:${port}/`, close, [Symbol.asyncDispose]: close };
}

async function handle(request: Request, options: ConsoleServerOptions, port: number): Promise<Response> {
  if (!hostAllowed(request.headers.get("host"), options.hostname, port)) {
    return text(421, "this server answers only to its own address\n");
  }
  if (request.method !== "GET" && request.method !== "HEAD") {
    return text(405, "only GET\n", { allow: "GET, HEAD" });
  }
  const path = new URL(request.url).pathname;
  const file = STATIC_FILES[path];
  if (file !== undefined) {
    try {
      const body = await Deno.readFile(`${options.dir}/${file}`);
      return respond(200, body, CONTENT_TYPES[file.split(".").at(-1)!]);
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return text(404, `${file} is not built\n`);
      throw error;
    }
  }
  if (path === "/api/cluster" || path === "/api/attestation-config") {
    if (options.localCluster === undefined) {
      return text(404, "the console is not pointed at a local cluster (--local-cluster <state-dir>)\n");
    }
    return path === "/api/cluster"
      ? await clusterDocument(options.localCluster)
      : await attestationConfigDocument(options.localCluster);
  }
  return text(404, "not found\n");
}

async function clusterDocument(stateDir: string): Promise<Response> {
  const status = await readStatus(stateDir).catch(() => undefined);
  if (status === undefined) return text(404, `no local cluster in ${stateDir} (yet)\n`);
  return respond(200, JSON.stringify(summarizeCluster(status)), "application/json; charset=utf-8");
}

async function attestationConfigDocument(stateDir: string): Promise<Response> {
  try {
    const body = await Deno.readFile(`${stateDir}/attestation-config.json`);
    return respond(200, body, "application/json; charset=utf-8");
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      return text(404, "the cluster has no attestation config yet\n");
    }
    throw error;
  }
}

/** Whether `host` (the request's Host header) names this server: its address or localhost, with its port. */
function hostAllowed(host: string | null, hostname: string, port: number): boolean {
  if (host === null) return false;
  const bracketed = hostname.includes(":") ? `[${hostname}]` : hostname;
  const names = new Set([bracketed, "localhost", "127.0.0.1", "[::1]"]);
  return [...names].some((name) => host === `${name}:${port}`);
}

function respond(status: number, body: BodyInit, contentType: string, headers: HeadersInit = {}): Response {
  return new Response(body, {
    status,
    headers: {
      "content-type": contentType,
      "content-security-policy": CONTENT_SECURITY_POLICY,
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      "cache-control": "no-store",
      ...headers,
    },
  });
}

function text(status: number, body: string, headers: HeadersInit = {}): Response {
  return respond(status, body, "text/plain; charset=utf-8", headers);
}
