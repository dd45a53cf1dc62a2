/**
 * The connection to a node's init server (`init.API` over TLS, port 9000 by
 * default). The node's certificate is self-signed and made at its start, so
 * it is not checked: the CLI's security rests on the attested exchange, which
 * verifies the node's evidence for a fresh nonce and seals every secret to
 * the attested key (docs/attested-exchange.md §7). Until then the node is
 * anyone: a message larger than {@linkcode NODE_READ_MAX_BYTES} fails its
 * call before it is buffered.
 *
 * @module
 */
import { NODE_READ_MAX_BYTES } from "../init/protocol.ts";
import { connectRpc, type RpcConnection } from "../rpc/client.ts";

/** Opens a connection to the init or recovery server at `node` ("host:port", "[v6]:port"). */
export function connectNode(node: string): RpcConnection {
  return connectRpc({
    baseUrl: `https://${node}`,
    skipServerVerification: true,
    readMaxBytes: NODE_READ_MAX_BYTES,
  });
}
