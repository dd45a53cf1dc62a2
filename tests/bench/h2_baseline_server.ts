/**
 * The cold start benchmark's baseline (tests/bench/cold_start.ts): the least
 * an HTTP/2 server on Deno does before it listens. `node:http2` (h2c), which
 * the services' RPC servers are built on, answers every request with "ok";
 * once it listens it logs the services' "listening" line. The benchmark
 * bundles it and gives it a launcher exactly as the build does for a
 * component.
 *
 * @module
 */
import { createServer } from "node:http2";
import type { AddressInfo } from "node:net";

const server = createServer((_request, response) => response.end("ok"));
server.listen(0, "127.0.0.1", () => {
  const { port } = server.address() as AddressInfo;
  console.error(JSON.stringify({ msg: "listening", port }));
});
Deno.addSignalListener("SIGTERM", () => server.close(() => Deno.exit(0)));
