/**
 * The key service as the join service's {@linkcode KeySource}: every failure
 * worth retrying (no connection, no answer in time, the connection lost
 * mid-call as when the key service restarts) is "key-service-unavailable"
 * (Unavailable), so a node knows to try again. A call the node's own
 * request cancelled stays "canceled".
 *
 * @module
 */
import { ConnectError } from "@connectrpc/connect";
import { isRetryableKeyServiceError, type KeyServiceClient } from "../keyservice/client.ts";
import { asRejection } from "../rpc/rejection.ts";
import type { KeySource } from "./dependencies.ts";
import { reject } from "./rejections.ts";

/** The join service's key source over a key service client. */
export function keySource(client: KeyServiceClient): KeySource {
  return {
    async getDataKey(id, length, options) {
      try {
        return await client.getDataKey(id, length, options);
      } catch (error) {
        if (options.signal?.aborted || !isRetryableKeyServiceError(error)) throw asRejection(error);
        throw reject(
          "key-service-unavailable",
          `key service unavailable: ${ConnectError.from(error).rawMessage}`,
          {
            cause: error,
          },
        );
      }
    },
  };
}
