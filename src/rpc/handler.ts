/**
 * The request handler behind `serveRpc`: Connect's routing and protocols
 * (gRPC, gRPC-Web, Connect) over `node:http2` / `node:http` requests, with
 * three bounds the runtime does not give: request-body bytes buffered at
 * once (per connection and over all connections), a deadline for each call
 * from its headers to the end of its response, and how many unary calls
 * Connect works on at once (`maxCallsInProgress`).
 *
 * Why the last one: a call Connect has taken up holds far more memory than
 * its request (Connect's pipeline of async iterators, the handler context,
 * the service's own state), and under a burst every call that arrived was
 * taken up at once. At 512 concurrent joiners the join service held ~100 KiB
 * per waiting call and most of it lived long enough to reach V8's old
 * generation, which then needed major collections. A unary call beyond the
 * bound waits in arrival order with just its request body, read and counted
 * in the byte budgets as before; it is cancelled by its deadline or its
 * client as before (a gRPC timeout the client sent counts from when Connect
 * takes the call up). The bound is released once the service has answered,
 * before the answer is written, so a client that reads slowly holds none.
 *
 * At most `maxCallsWaiting` calls wait. One that arrives when that many
 * already do is not queued: its client gets ResourceExhausted at once
 * ("server busy: …; retry later") and can back off, instead of waiting out
 * its deadline. The RPC layer gives that answer itself (through the call's
 * body, as for a spent byte budget, so the service never sees the call),
 * except for the methods named in `overloadRefusedByService`: those get the
 * call at once, outside the bound, with `callOverloadedKey` set
 * (`overload.ts`), and refuse it themselves, e.g. to audit the refusal. A
 * list of methods rather than a switch for the whole server, so that a
 * method that does not look at the key (the join service's `GetChallenge`)
 * can never be handed work beyond the bounds.
 *
 * It does what connect-node's `connectNodeAdapter` does, on the same public
 * pieces (`universalRequestFromNodeRequest`, `universalResponseToNodeResponse`),
 * so that the request body can be counted as it arrives. A gRPC unary call
 * with one plain binary message, what nodes send, takes a shorter path past
 * Connect's per-call pipeline with the same answer (`grpc_unary.ts`).
 *
 * @module
 */
import * as http2 from "node:http2";
import type * as http from "node:http";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ConnectRouterOptions,
  type ContextValues,
  createConnectRouter,
  type Interceptor,
} from "@connectrpc/connect";
import type { DescMethodUnary } from "@bufbuild/protobuf";
import type { UniversalServerResponse } from "@connectrpc/connect/protocol";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import { ByteBudget } from "../limits/byte_budget.ts";
import { coalesce } from "./coalesce.ts";
import { GrpcUnaryRoutes, RESPONSE_COMPRESS_MIN_BYTES } from "./grpc_unary.ts";
import { WorkPool } from "../limits/pool.ts";
import { callOverloadedKey, serverBusyMessage } from "./overload.ts";

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
  /** Unary calls Connect works on at once; more wait their turn (see the module documentation). */
  maxCallsInProgress: number;
  /** Unary calls waiting at most; more are refused at once (see the module documentation). */
  maxCallsWaiting: number;
  /**
   * Unary methods that refuse calls beyond the bounds themselves: they get such a call at once with
   * `callOverloadedKey` set. Every other method's are refused here. Default none.
   */
  overloadRefusedByService?: readonly DescMethodUnary[];
  /** Called when a response could not be delivered for a reason other than the client going away. */
  onResponseError?: (error: unknown) => void;
}

/** Creates the request handler; call it with each request and its response. */
export function createRpcHandler(options: RpcHandlerOptions): (req: RpcRequest, res: RpcResponse) => void {
  const routerOptions: ConnectRouterOptions = {
    interceptors: options.interceptors,
    readMaxBytes: options.readMaxBytes,
    acceptCompression: [compressionGzip, compressionBrotli],
    compressMinBytes: RESPONSE_COMPRESS_MIN_BYTES,
  };
  const router = createConnectRouter(routerOptions);
  const grpcUnary = new GrpcUnaryRoutes(routerOptions);
  options.routes(grpcUnary.recording(router));
  const handlers = new Map(router.handlers.map((handler) => [handler.requestPath, handler]));
  const inFlight = new ByteBudget(options.maxRequestBytesInFlight);
  // Keyed by the HTTP/2 session or, for HTTP/1.1, the socket: gone with the connection.
  const perConnection = new WeakMap<object, ByteBudget>();
  const inProgress = new WorkPool({
    concurrency: options.maxCallsInProgress,
    maxQueued: options.maxCallsWaiting,
  });
  const busy = serverBusyMessage(options);
  const refusesOverloadItself = new Set(
    (options.overloadRefusedByService ?? []).map((method) => `/${method.parent.typeName}/${method.name}`),
  );

  return (req, res) => {
    const handler = handlers.get(req.url?.split("?", 1)[0] ?? "");
    if (!handler) {
      res.writeHead(404);
      res.end();
      return;
    }
    if (!("stream" in req) && !closeWithConnection(req, res)) return; // its connection is gone already
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

    const contextValues = options.contextValues(req);
    const request = universalRequestFromNodeRequest(req, res, undefined, contextValues);
    const body = coalesce(held.count(request.body as AsyncIterable<Uint8Array>));
    const respond = (response: Promise<UniversalServerResponse>) =>
      response
        .then((response) => universalResponseToNodeResponse(response, res))
        .catch((error) => {
          // A call whose client went away while it waited has nothing to deliver.
          if (request.signal.aborted && !res.headersSent) return;
          if (ConnectError.from(error).code !== Code.Aborted) options.onResponseError?.(error);
        });
    if (handler.method.methodKind !== "unary") {
      respond(handler({ ...request, body }));
      return;
    }
    // Only a whole body waits for its turn. One larger than any message Connect accepts, or one whose
    // reading failed (a spent byte budget, a reset stream), goes to Connect at once, which refuses it as
    // before. A whole body that finds the queue full does not wait either: refused here, or by its
    // service when the method asked for that.
    respond(
      readAhead(body, options.readMaxBytes + ENVELOPE_HEADER_BYTES).then((readBody) => {
        if (!readBody.whole) return handler({ ...request, body: readBody });
        if (!inProgress.full) {
          const connect = () => handler({ ...request, body: readBody });
          const shortPath = grpcUnary.prepare(handler.requestPath, request, readBody.chunks);
          return inProgress.run(shortPath ? () => shortPath(connect) : connect, { signal: request.signal });
        }
        if (refusesOverloadItself.has(handler.requestPath)) {
          contextValues.set(callOverloadedKey, busy);
          return handler({ ...request, body: readBody });
        }
        return handler({ ...request, body: failing(new ConnectError(busy, Code.ResourceExhausted)) });
      }),
    );
  };
}

/** A gRPC or gRPC-Web message's prefix: a flags byte and a 4-byte length. */
const ENVELOPE_HEADER_BYTES = 5;

/** A request body read ahead: the chunks so far, then the rest and any error, in their order. */
interface ReadAheadBody extends AsyncIterable<Uint8Array> {
  /** The body was read to its end, not only its first bytes, and reading it did not fail. */
  readonly whole: boolean;
  /** The chunks read (all of the body when it is whole). */
  readonly chunks: readonly Uint8Array[];
}

/**
 * Reads `body` until it ends, fails, or has passed `maxBytes`; the result
 * yields the same chunks and then fails with the same error, as `body`
 * would have.
 */
async function readAhead(body: AsyncIterable<Uint8Array>, maxBytes: number): Promise<ReadAheadBody> {
  const iterator = body[Symbol.asyncIterator]();
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  let ended = false;
  let failure: { error: unknown } | undefined;
  try {
    while (bytes <= maxBytes) {
      const next = await iterator.next();
      if (next.done) {
        ended = true;
        break;
      }
      chunks.push(next.value);
      bytes += next.value.byteLength;
    }
  } catch (error) {
    failure = { error };
  }
  return {
    whole: ended,
    chunks,
    async *[Symbol.asyncIterator]() {
      yield* chunks;
      if (failure) throw failure.error;
      if (!ended) yield* { [Symbol.asyncIterator]: () => iterator };
    },
  };
}

/** A request body whose reading fails with `error`: Connect answers the call with it, in the call's protocol. */
// deno-lint-ignore require-yield
async function* failing(error: ConnectError): AsyncGenerator<Uint8Array> {
  throw error;
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
    // Detached (null) once the connection is gone; a throw here, in a timer, would end the process.
    req.socket?.destroy();
  }
}

/** The HTTP/1.1 responses not yet closed, by their connection. */
const openResponses = new WeakMap<object, Set<RpcResponse>>();

/**
 * Makes an HTTP/1.1 call's response emit "close" when its connection
 * closes, as Node's does; false when the connection is gone already (there
 * is no one to answer). Deno 2.9.6's `node:http` never emits it for a pipelined
 * request whose connection went away before its response was sent: such a
 * call would hold its request bytes in the budgets for good (until every
 * call is refused), wait in the queue and then run for a client that is
 * gone, and meet its deadline without a socket. Connect aborts the call's
 * signal on that "close" too. One listener per connection, however many
 * calls it pipelines.
 */
function closeWithConnection(req: http.IncomingMessage, res: RpcResponse): boolean {
  const socket = req.socket as typeof req.socket | null;
  if (socket === null || socket.destroyed) return false;
  let open = openResponses.get(socket);
  if (!open) {
    const responses = new Set<RpcResponse>();
    openResponses.set(socket, responses);
    socket.once("close", () => {
      for (const response of responses) response.emit("close");
    });
    open = responses;
  }
  const responses = open;
  responses.add(res);
  res.once("close", () => responses.delete(res));
  return true;
}
