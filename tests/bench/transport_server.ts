/**
 * The key service's routes served two ways, for `transport.ts` to compare in
 * one run:
 *
 * - `baseline`: the RPC server as it was before the hardening — node:http2
 *   with connect-node's `connectNodeAdapter`, no teardown guard, no stream,
 *   header, byte or time limits;
 * - `hardened`: `serveRpc` as the services run it.
 *
 * Prints `{"port":N}` once listening. Usage:
 * `deno run --allow-net=127.0.0.1 tests/bench/transport_server.ts baseline|hardened`
 *
 * @module
 */
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { keyServiceRoutes } from "../../src/keyservice/server.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { serveRpc } from "../../src/rpc/server.ts";

const routes = keyServiceRoutes({
  kms: new ClusterKms(new Uint8Array(32).fill(1), new Uint8Array(32).fill(2)),
  logger: silentLogger,
});
const mode = Deno.args[0];
let port: number;
if (mode === "baseline") {
  const server = http2.createServer({}, connectNodeAdapter({ routes }));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
} else if (mode === "hardened") {
  port = (await serveRpc({ routes, hostname: "127.0.0.1", port: 0, readMaxBytes: 4096 })).address.port;
} else {
  throw new Error(`usage: transport_server.ts baseline|hardened, not ${mode}`);
}
console.log(JSON.stringify({ port }));
