/**
 * Serves kms.API in the test process, on a free port on 127.0.0.1.
 *
 * @module
 */
import { type DataKeySource, keyServiceRoutes } from "../../src/keyservice/server.ts";
import { createLogger } from "../../src/log/logger.ts";
import { serveRpc } from "../../src/rpc/server.ts";

/** Runs `fn` with the endpoint ("127.0.0.1:port") and the server's log lines; shuts the server down after. */
export async function withKeyService(
  kms: DataKeySource,
  fn: (endpoint: string, logs: string[]) => Promise<void>,
): Promise<void> {
  const logs: string[] = [];
  const logger = createLogger({ level: "debug", write: (line) => logs.push(line) });
  const server = await serveRpc({
    routes: keyServiceRoutes({ kms, logger }),
    hostname: "127.0.0.1",
    port: 0,
  });
  try {
    await fn(`127.0.0.1:${server.address.port}`, logs);
  } finally {
    await server.shutdown();
  }
}
