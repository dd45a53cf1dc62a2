/**
 * The request handler behind `serveRpc`: Connect's routing and protocols
 * (gRPC, gRPC-Web, Connect) over `node:http2` / `node:http` requests, with
 * two bounds the runtime does not give: request-body bytes buffered at once
 * (per connection and over all connections), and a deadline for each call
 * from its headers to the end of its response.
 *
 * It does what connect-node's `connectNodeAdapter` does, on the same public
 * pieces (`universalRequestFromNodeRequest`, `universalResponseToNodeResponse`),
 * so that the request body can be counted as it arrives.
 *
 * @module
 */
import * as http2 from "node:http2";
import type * as http from "node:http";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ContextValues,
  createConnectRouter,
  type Interceptor,
} from "@connectrpc/connect";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import { ByteBudget } from "../limits/byte_budget.ts";

/** A request as either server kind delivers it. */
export type RpcRequest = http2.Http2ServerRequest | http.IncomingMessage;
/**
 * A response as either server kind delivers it (connect-node's type for the
 * union, whose `writeHead`/`write` are callable on both).
 */
export type RpcResponse = Parameters<typeof universalResponseToNodeResponse>[1];

/** Options for {@linkcode createRpcHandler}. */
export interface RpcHandlerOptions {
  /** Registers the services. */
  routes: (router: ConnectRouter) => void;
  /** Interceptors applied to every call. */
  interceptors?: Interceptor[];
  /** Largest accepted request message in bytes. */
  readMaxBytes: number;
  /** Per-request context values. */
  contextValues: (req: RpcRequest) => ContextValues;
  /** Request-body bytes buffered at once for one connection. */
  maxRequestBytesPerConnection: number;
  /** Request-body bytes buffered at once over all connections. */
  maxRequestBytesInFlight: number;
  /** Deadline of one call, from its headers to the end of its response. */
  requestTimeoutMs: number;
  /** Called when a response could not be delivered for a reason other than the client going away. */
  onResponseError?: (error: unknown) => void;
}

/** Creates the request handler; call it with each request and its response. */
export function createRpcHandler(options: RpcHandlerOptions): (req: RpcRequest, res: RpcResponse) => void {
  const router = createConnectRouter({
    interceptors: options.interceptors,
    readMaxBytes: options.readMaxBytes,
    acceptCompression: [compressionGzip, compressionBrotli],
  });
  options.routes(router);
  const handlers = new Map(router.handlers.map((handler) => [handler.requestPath, handler]));
  const inFlight = new ByteBudget(options.maxRequestBytesInFlight);
  // Keyed by the HTTP/2 session or, for HTTP/1.1, the socket: gone with the connection.
  const perConnection = new WeakMap<object, ByteBudget>();

  return (req, res) => {
    const handler = handlers.get(req.url?.split("?", 1)[0] ?? "");
    if (!handler) {
      res.writeHead(404);
      res.end();
      return;
    }
    const connection = "stream" in req ? req.stream.session ?? req.socket : req.socket;
    let connectionBudget = perConnection.get(connection);
    if (!connectionBudget) {
      connectionBudget = new ByteBudget(options.maxRequestBytesPerConnection);
      perConnection.set(connection, connectionBudget);
    }
    const held = new HeldBytes([connectionBudget, inFlight]);
    const deadline = setTimeout(() => cancel(req), options.requestTimeoutMs);
    res.once("close", () => {
      clearTimeout(deadline);
      held.release();
    });

    const request = universalRequestFromNodeRequest(
      req,
      res,
      undefined,
      options.contextValues(req),
    );
    handler({ ...request, body: held.count(request.body as AsyncIterable<Uint8Array>) })
      .then((response) => universalResponseToNodeResponse(response, res))
      .catch((error) => {
        if (ConnectError.from(error).code !== Code.Aborted) options.onResponseError?.(error);
      });
  };
}

/** Request-body bytes of one call, held in every budget until the call ends. */
class HeldBytes {
  readonly #budgets: ByteBudget[];
  #bytes = 0;
  #released = false;

  constructor(budgets: ByteBudget[]) {
    this.#budgets = budgets;
  }

  /** Passes `body` through, taking each chunk from every budget; refuses the call when one is spent. */
  async *count(body: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
    for await (const chunk of body) {
      this.#take(chunk.byteLength);
      yield chunk;
    }
  }

  /** Gives every byte back (once, when the call ends). */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    for (const budget of this.#budgets) budget.give(this.#bytes);
  }

  #take(bytes: number): void {
    if (this.#released) return;
    const taken: ByteBudget[] = [];
    for (const budget of this.#budgets) {
      if (!budget.tryTake(bytes)) {
        for (const done of taken) done.give(bytes);
        throw new ConnectError(
          "server busy: too many request bytes in flight, retry later",
          Code.ResourceExhausted,
        );
      }
      taken.push(budget);
    }
    this.#bytes += bytes;
  }
}

/** Ends a call that ran out of time: its HTTP/2 stream, or the HTTP/1.1 connection carrying it. */
function cancel(req: RpcRequest): void {
  if ("stream" in req) {
    if (!req.stream.closed) req.stream.close(http2.constants.NGHTTP2_CANCEL);
  } else {
    req.socket.destroy();
  }
}
