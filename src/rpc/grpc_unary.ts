/**
 * A short path for the calls nodes make: gRPC unary calls whose one message
 * arrives uncompressed and in the binary format.
 *
 * Connect's gRPC handler runs every call through a pipeline of async
 * iterators (split, decompress and parse the envelopes, invoke, serialize,
 * compress and join them, catch), built anew per call. For a unary call that
 * pipeline cost the join service about 0.3–0.4 ms of CPU per call, more than
 * the call's own protocol work. This path does the same steps with Connect's
 * own exported pieces, without the pipeline: the content type and the
 * timeout parsed as Connect parses them, compression negotiated as Connect
 * negotiates it, the one envelope split, the message parsed with the method's
 * serialization, the implementation invoked through the interceptors
 * (`invokeUnaryImplementation`), the status set in the trailers
 * (`setTrailerStatus`).
 *
 * It only takes calls that Connect would serve and whose input it has
 * already checked: every other call (another protocol, a compressed, split,
 * truncated or oversized envelope, a timeout or an encoding Connect refuses,
 * a message that does not parse) goes to Connect's handler and gets
 * Connect's answer. The answers of the two paths are the same (tested in
 * `tests/rpc/grpc_unary_test.ts`, which sends each request to both).
 *
 * Neither path compresses a response ({@linkcode RESPONSE_COMPRESS_MIN_BYTES}):
 * the services' large answers are sealed (encrypted, so incompressible), and
 * compressing them only cost CPU on both ends.
 *
 * @module
 */
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ConnectRouterOptions,
  createHandlerContext,
  createMethodImplSpec,
  createServiceImplSpec,
  type MethodImplSpec,
} from "@connectrpc/connect";
import {
  type Compression,
  compressionNegotiate,
  createAsyncIterable,
  createMethodSerializationLookup,
  encodeEnvelope,
  invokeUnaryImplementation,
  type MethodSerializationLookup,
  type UniversalHandlerOptions,
  type UniversalServerRequest,
  type UniversalServerResponse,
  validateUniversalHandlerOptions,
} from "@connectrpc/connect/protocol";
import {
  contentTypeProto,
  grpcStatusOk,
  headerAcceptEncoding,
  headerContentType,
  headerEncoding,
  headerGrpcStatus,
  headerTimeout,
  parseContentType,
  parseTimeout,
  setTrailerStatus,
} from "@connectrpc/connect/protocol-grpc";
import { concatBytes } from "../bytes/concat.ts";

/**
 * The smallest response message the servers compress: none. Given to
 * Connect's router and kept by this path alike.
 */
export const RESPONSE_COMPRESS_MIN_BYTES: number = Number.MAX_SAFE_INTEGER;

/** A gRPC message's prefix: a flags byte and a 4-byte big-endian length. */
const ENVELOPE_HEADER_BYTES = 5;

/**
 * The reason a finished call's signal aborts with. `abort()` without one
 * builds a DOMException, whose stack trace cost about 1 % of the join
 * service's main thread under load. Work a call left running when it ended
 * (a linked API request, a queued slot) sees this reason and stops with it,
 * as it stopped with the DOMException before (both read as "canceled"); one
 * object serves every call, and nothing changes it.
 *
 * It is made at the first call's end, not when the module is evaluated: an
 * error made while a bundle's top level runs has that whole top level on its
 * stack, and V8 (whose code cache holds no source positions) parses all of
 * it again to place the frame: 13 ms of the join service's start.
 */
let callFinished: ConnectError | undefined;

/**
 * The router options this path applies as Connect's gRPC handler does, or
 * that concern only calls it leaves to Connect (JSON, the other protocols).
 * With any other option given (a request gate, gRPC switched off, an option
 * Connect adds later), or a compression threshold other than
 * {@linkcode RESPONSE_COMPRESS_MIN_BYTES}, the path takes no call: every
 * call goes to Connect's handler (which compresses answers of at least 1 KiB
 * unless told otherwise). So the router's options are given once, to both,
 * and cannot drift apart.
 */
const APPLIED_OPTIONS: ReadonlySet<string> = new Set([
  "interceptors",
  "readMaxBytes",
  "writeMaxBytes",
  "compressMinBytes",
  "acceptCompression",
  "binaryOptions",
  "jsonOptions",
  "maxTimeoutMs",
  "shutdownSignal",
  "requireConnectProtocolHeader",
  "connect",
  "grpcWeb",
]);

/** Whether the path answers as Connect would with the router's `options`. */
function appliesAll(options: ConnectRouterOptions): boolean {
  return options.compressMinBytes === RESPONSE_COMPRESS_MIN_BYTES &&
    Object.entries(options).every(([name, value]) =>
      value === undefined || APPLIED_OPTIONS.has(name) || (name === "grpc" && value === true)
    );
}

/** A unary method as registered on the router, with its serialization. */
interface UnaryRoute {
  spec: MethodImplSpec & { kind: "unary" };
  serialization: MethodSerializationLookup<never, never>;
}

/** The unary methods registered on a router, by request path. */
export class GrpcUnaryRoutes {
  readonly #routes = new Map<string, UnaryRoute>();
  readonly #options: UniversalHandlerOptions;
  readonly #enabled: boolean;

  /**
   * No methods yet; register them through {@linkcode GrpcUnaryRoutes.recording}.
   * `options` are the router's own, the object given to `createConnectRouter`.
   */
  constructor(options: ConnectRouterOptions) {
    this.#options = validateUniversalHandlerOptions(options);
    this.#enabled = appliesAll(options);
  }

  /**
   * A router that registers on `router` and records each unary method given
   * without options of its own (options per service could change the
   * protocols or limits, so such methods stay with Connect).
   */
  recording(router: ConnectRouter): ConnectRouter {
    const recording: ConnectRouter = {
      handlers: router.handlers,
      service: (service, implementation, options) => {
        if (!options) {
          Object.values(createServiceImplSpec(service, implementation).methods).forEach((spec) =>
            this.#add(spec)
          );
        }
        router.service(service, implementation, options);
        return recording;
      },
      rpc: (method, implementation, options) => {
        if (!options) this.#add(createMethodImplSpec(method, implementation));
        router.rpc(method, implementation, options);
        return recording;
      },
    };
    return recording;
  }

  /**
   * The call to `path`, ready to run, when it is a gRPC unary call this
   * path takes (see the module documentation) and `chunks` its whole request
   * body (a few large chunks: see `coalesce.ts`); undefined for Connect's
   * handler to take. The message is parsed
   * only when the call runs (within the server's bound on calls in
   * progress, as Connect parses it); one that does not parse is handed to
   * `connect`, Connect's handler, for its answer.
   */
  prepare(
    path: string,
    request: UniversalServerRequest,
    chunks: readonly Uint8Array[],
  ): ((connect: () => Promise<UniversalServerResponse>) => Promise<UniversalServerResponse>) | undefined {
    const route = this.#routes.get(path);
    if (!this.#enabled || !route || request.method !== "POST") return undefined;
    const type = parseContentType(request.header.get(headerContentType));
    if (!type?.binary) return undefined;
    const timeout = parseTimeout(request.header.get(headerTimeout), this.#options.maxTimeoutMs);
    if (timeout.error) return undefined;
    const compression = compressionNegotiate(
      this.#options.acceptCompression,
      request.header.get(headerEncoding),
      request.header.get(headerAcceptEncoding),
      headerAcceptEncoding,
    );
    if (compression.error || compression.request) return undefined;
    const body = chunks.length === 1 ? chunks[0] : concatBytes(...chunks);
    const message = singleEnvelope(body, this.#options.readMaxBytes);
    if (!message) return undefined;
    return (connect) => {
      let input;
      try {
        input = route.serialization.getI(true).parse(message);
      } catch {
        return connect();
      }
      return this.#run(route, request, input, timeout.timeoutMs, compression.response);
    };
  }

  async #run(
    route: UnaryRoute,
    request: UniversalServerRequest,
    input: never,
    timeoutMs: number | undefined,
    responseCompression: Compression | null,
  ): Promise<UniversalServerResponse> {
    const { spec, serialization } = route;
    const context = createHandlerContext({
      ...spec,
      service: spec.method.parent,
      requestMethod: request.method,
      protocolName: "grpc",
      timeoutMs,
      shutdownSignal: this.#options.shutdownSignal,
      requestSignal: request.signal,
      requestHeader: request.header,
      url: request.url,
      responseHeader: { [headerContentType]: contentTypeProto },
      responseTrailer: { [headerGrpcStatus]: grpcStatusOk },
      contextValues: request.contextValues,
    });
    if (responseCompression) context.responseHeader.set(headerEncoding, responseCompression.name);
    const body: Uint8Array[] = [];
    try {
      const output = await invokeUnaryImplementation(spec, context, input, this.#options.interceptors);
      body.push(encodeEnvelope(0, serialization.getO(true).serialize(output as never)));
    } catch (error) {
      context.abort(error);
      // As Connect: a thrown `undefined` is no error (status 0, no message).
      if (error !== undefined) {
        setTrailerStatus(
          context.responseTrailer,
          error instanceof ConnectError
            ? error
            : new ConnectError("internal error", Code.Internal, undefined, undefined, error),
        );
      }
    } finally {
      context.abort(callFinished ??= new ConnectError("call finished", Code.Canceled));
    }
    return {
      status: 200,
      header: context.responseHeader,
      body: createAsyncIterable(body),
      trailer: context.responseTrailer,
    };
  }

  #add(spec: MethodImplSpec): void {
    if (spec.kind !== "unary") return;
    const serialization = createMethodSerializationLookup(
      spec.method,
      this.#options.binaryOptions,
      this.#options.jsonOptions,
      this.#options,
    ) as MethodSerializationLookup<never, never>;
    this.#routes.set(`/${spec.method.parent.typeName}/${spec.method.name}`, { spec, serialization });
  }
}

/**
 * The message of a body that is exactly one uncompressed envelope of at
 * most `readMaxBytes`; undefined otherwise.
 */
function singleEnvelope(body: Uint8Array, readMaxBytes: number): Uint8Array | undefined {
  if (body.byteLength < ENVELOPE_HEADER_BYTES || body[0] !== 0) return undefined;
  const length = new DataView(body.buffer, body.byteOffset, body.byteLength).getUint32(1);
  if (length > readMaxBytes || length !== body.byteLength - ENVELOPE_HEADER_BYTES) return undefined;
  return body.subarray(ENVELOPE_HEADER_BYTES);
}
