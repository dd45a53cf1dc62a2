/**
 * An RPC server over TLS on loopback with a fresh test CA, and a client
 * connection that trusts it: for tests that run a handler as it runs in
 * production (`serveRpc`, HTTP/2, TLS).
 *
 * @module
 */
import type { ConnectRouter, Transport } from "@connectrpc/connect";
import { connectRpc } from "../../src/rpc/client.ts";
import { serveRpc } from "../../src/rpc/server.ts";
import { createTestCa, issueLoopbackServerCert } from "./pki.ts";

/** A running TLS server and a client transport to it. */
export interface TlsRpc extends AsyncDisposable {
  /** A gRPC transport over one connection to the server. */
  transport: Transport;
  /** "localhost:<port>": the server, for clients that dial it themselves. */
  endpoint: string;
  /** PEM of the CA that issued the server's certificate (for "localhost" and 127.0.0.1). */
  caPem: string;
}

/** Serves `routes` on 127.0.0.1 over TLS; dispose to close client and server. */
export async function serveOverTls(
  routes: (router: ConnectRouter) => void,
  options: { readMaxBytes?: number } = {},
): Promise<TlsRpc> {
  const ca = await createTestCa();
  const leaf = await issueLoopbackServerCert(ca);
  const server = await serveRpc({
    hostname: "127.0.0.1",
    port: 0,
    tls: { cert: leaf.certPem, key: leaf.keyPem },
    readMaxBytes: options.readMaxBytes,
    routes,
  });
  const connection = connectRpc({
    baseUrl: `https://localhost:${server.address.port}`,
    caCerts: [ca.certPem],
  });
  return {
    transport: connection.transport,
    endpoint: `localhost:${server.address.port}`,
    caPem: ca.certPem,
    async [Symbol.asyncDispose]() {
      connection.close();
      await server.shutdown(1000);
    },
  };
}
