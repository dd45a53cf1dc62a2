/**
 * A fault-injecting HTTPS proxy in front of a Kubernetes API server, for
 * fault tests and benchmarks: it terminates TLS with a certificate the
 * clients' kubeconfig trusts (one the cluster CA signed), forwards every
 * request to the real API server with the admin's client certificate, and
 * answers as that server did, unless an injected fault matches the request:
 *
 * - `error-500`: a Kubernetes `Status` 500 InternalError; the request never
 *   reaches the API server (no side effect);
 * - `hang`: no answer at all until the client gives up (its timeout), the
 *   request never reaches the API server: an API server that stalls;
 * - `hang-after-write`: the request reaches the API server and takes effect,
 *   then its answer is lost and the client waits until it gives up: a
 *   write whose outcome the client cannot know.
 *
 * Faults match by method and path, for a fraction of the matching requests,
 * until they are removed. The proxy is test support: the join service runs
 * unchanged, pointed at the proxy by its kubeconfig.
 *
 * @module
 */

/** How an injected fault fails a request. */
export type ApiFault = "error-500" | "hang" | "hang-after-write";

/** Which requests a fault hits. */
export interface ApiFaultRule {
  /** How it fails them. */
  fault: ApiFault;
  /** HTTP methods it hits; default all. */
  methods?: readonly string[];
  /** URL paths it hits; default all. */
  path?: RegExp;
  /** The share of matching requests it hits, drawn per request; default 1 (all). */
  fraction?: number;
  /** How many requests it hits at most; default no limit. */
  times?: number;
}

/** Options for {@linkcode startApiFaultProxy}. */
export interface ApiFaultProxyOptions {
  /** The real API server's URL, e.g. `https://127.0.0.1:6443`. */
  upstream: string;
  /** PEM CA the upstream's serving certificate chains to. */
  upstreamCaPem: string;
  /** The client certificate and key the proxy presents upstream (the admin's). */
  clientCert: { certPem: string; keyPem: string };
  /** The proxy's own serving certificate and key (valid for 127.0.0.1). */
  serverCert: { certPem: string; keyPem: string };
}

/** What the proxy did, per fault and for forwarded requests. */
export interface ApiFaultCounts {
  forwarded: number;
  /** Requests the proxy itself could not forward (answered 502): none should be, or the run is noisy. */
  "upstream-failed": number;
  "error-500": number;
  hang: number;
  "hang-after-write": number;
}

/** A running proxy. Dispose it (or `close`) when done. */
export interface ApiFaultProxy extends AsyncDisposable {
  /** `https://127.0.0.1:<port>`. */
  readonly url: string;
  /** Requests forwarded whole and requests failed, per fault, so far. */
  readonly counts: Readonly<ApiFaultCounts>;
  /** Requests hung now, waiting for their clients to give up. */
  readonly hanging: number;
  /** Starts failing requests that match `rule`; returns a function that stops it. */
  inject(rule: ApiFaultRule): () => void;
  /** Removes every injected fault (hung requests stay hung until their clients give up). */
  clear(): void;
  /** Stops listening; ends hung requests. */
  close(): Promise<void>;
}

/** A Kubernetes `Status` answer. */
function status(code: number, reason: string, message: string): Response {
  return Response.json({ kind: "Status", apiVersion: "v1", status: "Failure", message, reason, code }, {
    status: code,
  });
}

/** Starts a proxy on a free port of 127.0.0.1. */
export function startApiFaultProxy(options: ApiFaultProxyOptions): ApiFaultProxy {
  const upstream = Deno.createHttpClient({
    caCerts: [options.upstreamCaPem],
    cert: options.clientCert.certPem,
    key: options.clientCert.keyPem,
  });
  const rules = new Set<ApiFaultRule>();
  const hits = new Map<ApiFaultRule, number>();
  const counts: ApiFaultCounts = {
    forwarded: 0,
    "upstream-failed": 0,
    "error-500": 0,
    hang: 0,
    "hang-after-write": 0,
  };
  // Ends every hung request when the proxy closes, so the server's shutdown does not wait for them.
  const closing = new AbortController();

  const matching = (request: Request, path: string): ApiFault | undefined => {
    for (const rule of rules) {
      if (rule.methods && !rule.methods.includes(request.method)) continue;
      if (rule.path && !rule.path.test(path)) continue;
      if ((hits.get(rule) ?? 0) >= (rule.times ?? Infinity)) continue;
      if (Math.random() < (rule.fraction ?? 1)) {
        hits.set(rule, (hits.get(rule) ?? 0) + 1);
        return rule.fault;
      }
    }
    return undefined;
  };

  const forward = async (request: Request, url: URL): Promise<Response> => {
    const target = new URL(url.pathname + url.search, options.upstream);
    const headers = new Headers();
    for (const name of ["accept", "content-type", "user-agent"]) {
      const value = request.headers.get(name);
      if (value !== null) headers.set(name, value);
    }
    const body = request.body ? await request.arrayBuffer() : undefined;
    const send = async () => {
      const response = await fetch(target, { method: request.method, headers, body, client: upstream });
      return {
        status: response.status,
        type: response.headers.get("content-type"),
        text: await response.arrayBuffer(),
      };
    };
    let answer;
    try {
      answer = await send();
    } catch (error) {
      // A pooled connection the API server had closed: sent again, as HTTP clients do, unless it is a
      // create (the one write that is not idempotent); that one fails as a gateway's would.
      if (request.method === "POST") return upstreamFailed(error);
      try {
        answer = await send();
      } catch (again) {
        return upstreamFailed(again);
      }
    }
    return new Response(answer.text, {
      status: answer.status,
      headers: { "content-type": answer.type ?? "application/json" },
    });
  };
  const upstreamFailed = (error: unknown) => {
    counts["upstream-failed"]++;
    return status(502, "BadGateway", `fault proxy: ${error instanceof Error ? error.message : error}`);
  };

  /** Resolves once the client gave up (its connection or stream closed) or the proxy closes. */
  let hanging = 0;
  const hangUntilGivenUp = async (request: Request) => {
    hanging++;
    try {
      await new Promise<void>((resolve) => {
        if (request.signal.aborted || closing.signal.aborted) return resolve();
        request.signal.addEventListener("abort", () => resolve(), { once: true });
        closing.signal.addEventListener("abort", () => resolve(), { once: true });
      });
    } finally {
      hanging--;
    }
    return new Response(null, { status: 504 }); // nobody reads it
  };

  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    cert: options.serverCert.certPem,
    key: options.serverCert.keyPem,
    onListen: () => {},
  }, async (request) => {
    const url = new URL(request.url);
    const fault = matching(request, url.pathname);
    if (fault === undefined) {
      counts.forwarded++;
      return await forward(request, url);
    }
    counts[fault]++;
    switch (fault) {
      case "error-500":
        return status(500, "InternalError", "injected fault: internal error");
      case "hang":
        return await hangUntilGivenUp(request);
      case "hang-after-write":
        await forward(request, url);
        return await hangUntilGivenUp(request);
    }
  });

  const close = async () => {
    rules.clear();
    closing.abort();
    await server.shutdown();
    upstream.close();
  };
  return {
    url: `https://127.0.0.1:${server.addr.port}`,
    counts,
    get hanging() {
      return hanging;
    },
    inject(rule) {
      rules.add(rule);
      return () => rules.delete(rule);
    },
    clear() {
      rules.clear();
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
