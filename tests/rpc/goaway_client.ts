/**
 * A client process for `hostile_test.ts`: `connections` gRPC connections to
 * a key service whose idle timeout is shorter than the pause between rounds,
 * so every round's connections get the server's GOAWAY while idle, the way
 * that once aborted client processes in nghttp2. Prints "survived" at the
 * end; a crash ends the process by a signal instead.
 *
 * Usage: deno run --allow-net=127.0.0.1 tests/rpc/goaway_client.ts <port> <connections> <rounds> <pause ms>
 */
import { createClient } from "@connectrpc/connect";
import { API } from "../../src/gen/kms/kms_pb.ts";
import { connectRpc } from "../../src/rpc/client.ts";

const [port, connectionCount, rounds, pauseMs] = Deno.args.map(Number);
const connections = Array.from(
  { length: connectionCount },
  () => connectRpc({ baseUrl: `http://127.0.0.1:${port}` }),
);
const clients = connections.map((connection) => createClient(API, connection.transport));
for (let round = 0; round < rounds; round++) {
  await Promise.all(clients.map((client) => client.getDataKey({ dataKeyId: "goaway", length: 16 })));
  await new Promise((resolve) => setTimeout(resolve, pauseMs));
}
for (const connection of connections) connection.close();
console.log("survived");
