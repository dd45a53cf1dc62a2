/**
 * The key service's routes served several ways, for `transport.ts` to
 * compare in one run:
 *
 * - `baseline`: the RPC server as it was before the hardening — node:http2
 *   with connect-node's `connectNodeAdapter`, no teardown guard, no stream,
 *   header, byte or time limits;
 * - `hardened`: `serveRpc` as the services run it;
 * - `deno-serve`: `Deno.serve` (hyper) with Connect's fetch handler, which
 *   answers the Connect protocol and gRPC-Web but not gRPC (hyper cannot send
 *   gRPC's trailers in Deno 2.9.6);
 * - `deno-serve-bytes`: `Deno.serve` answering every request with the same
 *   fixed message, no RPC framework: what the HTTP stack alone costs.
 *
 * With `BENCH_TLS_CERT` and `BENCH_TLS_KEY` set (PEM) every mode serves TLS,
 * else plaintext (h2c for the node:http2 modes). Prints `{"port":N}` once
 * listening. Usage: `deno run --allow-net=127.0.0.1
 * --allow-env=BENCH_TLS_CERT,BENCH_TLS_KEY tests/bench/transport_server.ts MODE`
 *
 * @module
 */
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create, toBinary } from "@bufbuild/protobuf";
import { createConnectRouter } from "@connectrpc/connect";
import { createFetchHandler } from "@connectrpc/connect/protocol";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { GetDataKeyResponseSchema } from "../../src/gen/kms/kms_pb.ts";
import { keyServiceRoutes } from "../../src/keyservice/server.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { serveRpc } from "../../src/rpc/server.ts";

const routes = keyServiceRoutes({
  kms: new ClusterKms(new Uint8Array(32).fill(1), new Uint8Array(32).fill(2)),
  logger: silentLogger,
});
const certPem = Deno.env.get("BENCH_TLS_CERT");
const keyPem = Deno.env.get("BENCH_TLS_KEY");
const tls = certPem && keyPem ? { cert: certPem, key: keyPem } : undefined;
const listen = { hostname: "127.0.0.1", port: 0, onListen: () => {}, ...tls };

/** `Deno.serve` on `listen` with `handler`; resolves to the bound port. */
function denoServe(handler: (request: Request) => Response | Promise<Response>): number {
  return Deno.serve(listen, handler).addr.port;
}

const mode = Deno.args[0];
let port: number;
if (mode === "baseline") {
  const adapter = connectNodeAdapter({ routes });
  const server = tls ? http2.createSecureServer(tls, adapter) : http2.createServer({}, adapter);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
} else if (mode === "hardened") {
  port = (await serveRpc({ routes, hostname: "127.0.0.1", port: 0, readMaxBytes: 4096, tls })).address.port;
} else if (mode === "deno-serve") {
  const router = createConnectRouter({ readMaxBytes: 4096 });
  routes(router);
  const handlers = new Map(
    router.handlers.map((handler) => [handler.requestPath, createFetchHandler(handler)]),
  );
  port = denoServe((request) =>
    handlers.get(new URL(request.url).pathname)?.(request) ?? new Response(null, { status: 404 })
  );
} else if (mode === "deno-serve-bytes") {
  const answer = toBinary(
    GetDataKeyResponseSchema,
    create(GetDataKeyResponseSchema, { dataKey: new Uint8Array(32) }),
  );
  const headers = { "content-type": "application/proto" };
  port = denoServe(async (request) => {
    await request.arrayBuffer();
    return new Response(answer, { headers });
  });
} else {
  throw new Error(`usage: transport_server.ts baseline|hardened|deno-serve|deno-serve-bytes, not ${mode}`);
}
console.log(JSON.stringify({ port }));
