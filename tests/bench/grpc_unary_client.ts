/**
 * The join load benchmark's client: gRPC unary calls whose request bytes
 * were encoded before the timed window, sent over one `node:http2` TLS
 * session, with no RPC framework in between.
 *
 * Why not the Connect client the other tests use: the benchmark measures the
 * join service, and its load generator shares the machine's two cores with
 * it. Connect's client pipeline (interceptors, serialization, async
 * iterables, per-call signals) cost about as much CPU per ticket as the key
 * service and the local API each; this client sends the same bytes on the
 * same protocol (what a node sends: one uncompressed binary message,
 * `content-type: application/grpc`, a `grpc-timeout`) and reads the answer's
 * one message and its `grpc-status`. What a call costs this process is still
 * reported, as the client's CPU per ticket.
 *
 * @module
 */
import * as http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { concatBytes } from "../../src/bytes/concat.ts";
import { guardHttp2Teardown } from "../../src/rpc/http2_guard.ts";

/** A gRPC message's prefix: a flags byte and a 4-byte big-endian length. */
const ENVELOPE_HEADER_BYTES = 5;

/** One TLS HTTP/2 session to a gRPC server, opened at construction. */
export class GrpcUnaryClient implements Disposable {
  readonly #session: http2.ClientHttp2Session;
  readonly #timeout: string;

  /**
   * Connects to `url` ("https://host:port"), trusting `caPem`; every call
   * carries a `grpc-timeout` of `timeoutMs`.
   */
  constructor(url: string, caPem: string, timeoutMs: number) {
    guardHttp2Teardown();
    this.#session = http2.connect(url, { ca: caPem });
    this.#session.on("error", () => {}); // a call on a failed session fails by itself
    this.#timeout = `${timeoutMs}m`;
  }

  /**
   * Calls `path` ("/package.Service/Method") with a request body of one
   * uncompressed message (`grpcMessage` of `tests/support/h2_frames.ts`);
   * resolves to the answer's message bytes.
   *
   * @throws {ConnectError} with the call's `grpc-status` and `grpc-message`
   * when it is not OK, or Internal when the answer is not one message.
   */
  call(path: string, body: Uint8Array): Promise<Uint8Array> {
    return new Promise((resolve, reject) => {
      const stream = this.#session.request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/grpc",
        te: "trailers",
        "grpc-timeout": this.#timeout,
      });
      const chunks: Uint8Array[] = [];
      let status: string | undefined;
      let message = "";
      const statusFrom = (headers: http2.IncomingHttpHeaders) => {
        if (headers["grpc-status"] === undefined) return;
        status = String(headers["grpc-status"]);
        message = decodeURIComponent(String(headers["grpc-message"] ?? ""));
      };
      stream.on("response", statusFrom); // a trailers-only answer carries its status here
      stream.on("trailers", statusFrom);
      stream.on("data", (chunk: Uint8Array) => chunks.push(chunk));
      stream.on("error", (error) => reject(new ConnectError(error.message, Code.Unavailable)));
      stream.on("close", () => {
        if (status === undefined) return reject(new ConnectError("no grpc-status", Code.Internal));
        if (status !== "0") return reject(new ConnectError(message, Number(status) as Code));
        const answer = concatBytes(...chunks);
        const length = answer.byteLength >= ENVELOPE_HEADER_BYTES
          ? new DataView(answer.buffer, answer.byteOffset).getUint32(1)
          : -1;
        if (answer[0] !== 0 || length !== answer.byteLength - ENVELOPE_HEADER_BYTES) {
          return reject(new ConnectError("answer is not one uncompressed message", Code.Internal));
        }
        resolve(answer.subarray(ENVELOPE_HEADER_BYTES));
      });
      stream.end(body);
    });
  }

  /** Closes the session. */
  close(): void {
    this.#session.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
