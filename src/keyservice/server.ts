/**
 * The key service's `kms.API/GetDataKey` handler: derives a data key from
 * the cluster's master secret for a key ID.
 *
 * @module
 */
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import {
  API,
  type GetDataKeyRequest,
  type GetDataKeyResponse,
  GetDataKeyResponseSchema,
} from "../gen/kms/kms_pb.ts";
import { MAX_DERIVED_KEY_LENGTH } from "../kms/hkdf.ts";
import { dataKeyInfo } from "../kms/keys.ts";
import { type Logger, silentLogger } from "../log/logger.ts";
import { peerAddressKey } from "../rpc/peer.ts";

/** Derives a data key from its full HKDF info (the cluster KMS). */
export interface DataKeySource {
  /** The `length`-byte key for the full HKDF info `dekId`. */
  getDek(dekId: string, length: number): Promise<Uint8Array>;
}

/** Options for {@linkcode keyServiceRoutes}. */
export interface KeyServiceOptions {
  /** Where keys come from. */
  kms: DataKeySource;
  /** Gets one debug line per call (key ID, length and peer address, never key material); default silent. */
  logger?: Logger;
}

/**
 * Registers `kms.API` on a router. `GetDataKey` checks, in this order:
 * length 0 → InvalidArgument "can't derive key with length zero"; empty ID →
 * InvalidArgument "no data key ID specified"; length above 8160 →
 * InvalidArgument (before anything is allocated). It then returns
 * `kms.getDek("key-" + id, length)`; a KMS failure is Internal.
 */
export function keyServiceRoutes(options: KeyServiceOptions): (router: ConnectRouter) => void {
  const logger = options.logger ?? silentLogger;
  const getDataKey = async (
    request: GetDataKeyRequest,
    context: HandlerContext,
  ): Promise<GetDataKeyResponse> => {
    const { dataKeyId, length } = request;
    logger.debug("GetDataKey", {
      keyId: truncateForLog(dataKeyId),
      length,
      peer: context.values.get(peerAddressKey),
    });
    if (length === 0) throw new ConnectError("can't derive key with length zero", Code.InvalidArgument);
    if (dataKeyId === "") throw new ConnectError("no data key ID specified", Code.InvalidArgument);
    if (length > MAX_DERIVED_KEY_LENGTH) {
      throw new ConnectError(
        `can't derive key with length ${length}: the maximum is ${MAX_DERIVED_KEY_LENGTH} bytes`,
        Code.InvalidArgument,
      );
    }
    let dataKey: Uint8Array;
    try {
      dataKey = await options.kms.getDek(dataKeyInfo(dataKeyId), length);
    } catch (err) {
      logger.error("deriving data key failed", { keyId: truncateForLog(dataKeyId), length, error: err });
      throw new ConnectError(err instanceof Error ? err.message : String(err), Code.Internal);
    }
    return create(GetDataKeyResponseSchema, { dataKey });
  };
  return (router) => router.service(API, { getDataKey });
}

/** Key IDs are client-chosen and may be up to the 4 MiB message limit: keep log lines short. */
function truncateForLog(keyId: string): string {
  return keyId.length > 128 ? `${keyId.slice(0, 128)}…` : keyId;
}
