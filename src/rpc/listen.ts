/**
 * Binding a `node:net`-style server (HTTP/1.1 or HTTP/2) and waiting for it.
 *
 * @module
 */
import type { AddressInfo, Server } from "node:net";

/** Binds `server` to `hostname`:`port` (0: any free port); resolves to the bound port, rejects on a bind error. */
export async function listen(server: Server, port: number, hostname: string): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, hostname, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return (server.address() as AddressInfo).port;
}
