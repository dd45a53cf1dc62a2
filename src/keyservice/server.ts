/**
 * The key service's `kms.API` handlers: `GetDataKey` derives a data key from
 * the cluster's master secret for a key ID; `GetDataKeys` derives several,
 * each with its own outcome.
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import {
  API,
  type DataKeyOutcome,
  DataKeyOutcomeSchema,
  type GetDataKeyRequest,
  type GetDataKeyResponse,
  GetDataKeyResponseSchema,
  type GetDataKeysRequest,
  type GetDataKeysResponse,
  GetDataKeysResponseSchema,
} from "../gen/kms/kms_pb.ts";
import { MAX_DERIVED_KEY_LENGTH } from "../kms/hkdf.ts";
import { dataKeyInfo } from "../kms/keys.ts";
import { MAX_DATA_KEY_BYTES_PER_CALL, MAX_DATA_KEYS_PER_CALL } from "./limits.ts";
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
 * `GetDataKeys` refuses no keys, more than {@linkcode MAX_DATA_KEYS_PER_CALL}
 * or more than {@linkcode MAX_DATA_KEY_BYTES_PER_CALL} bytes of keys
 * (InvalidArgument), and otherwise answers each request as `GetDataKey`
 * would, a failure as that key's outcome (code and message), not the call's.
 */
export function keyServiceRoutes(options: KeyServiceOptions): (router: ConnectRouter) => void {
  const logger = options.logger ?? silentLogger;
  const derive = async ({ dataKeyId, length }: GetDataKeyRequest): Promise<Uint8Array> => {
    if (length === 0) throw new ConnectError("can't derive key with length zero", Code.InvalidArgument);
    if (dataKeyId === "") throw new ConnectError("no data key ID specified", Code.InvalidArgument);
    if (length > MAX_DERIVED_KEY_LENGTH) {
      throw new ConnectError(
        `can't derive key with length ${length}: the maximum is ${MAX_DERIVED_KEY_LENGTH} bytes`,
        Code.InvalidArgument,
      );
    }
    try {
      return await options.kms.getDek(dataKeyInfo(dataKeyId), length);
    } catch (err) {
      logger.error("deriving data key failed", { keyId: truncateForLog(dataKeyId), length, error: err });
      throw new ConnectError(errorMessage(err), Code.Internal);
    }
  };
  const getDataKey = async (
    request: GetDataKeyRequest,
    context: HandlerContext,
  ): Promise<GetDataKeyResponse> => {
    logger.debug("GetDataKey", {
      keyId: truncateForLog(request.dataKeyId),
      length: request.length,
      peer: context.values.get(peerAddressKey),
    });
    return create(GetDataKeyResponseSchema, { dataKey: await derive(request) });
  };
  const getDataKeys = async (
    { requests }: GetDataKeysRequest,
    context: HandlerContext,
  ): Promise<GetDataKeysResponse> => {
    logger.debug("GetDataKeys", {
      keys: requests.length,
      keyIds: requests.slice(0, 4).map((request) => truncateForLog(request.dataKeyId)),
      peer: context.values.get(peerAddressKey),
    });
    if (requests.length === 0) throw new ConnectError("no data keys requested", Code.InvalidArgument);
    if (requests.length > MAX_DATA_KEYS_PER_CALL) {
      throw new ConnectError(
        `${requests.length} data keys requested: the maximum is ${MAX_DATA_KEYS_PER_CALL} per call`,
        Code.InvalidArgument,
      );
    }
    const keyBytes = requests.reduce((sum, request) => sum + request.length, 0);
    if (keyBytes > MAX_DATA_KEY_BYTES_PER_CALL) {
      throw new ConnectError(
        `${keyBytes} bytes of data keys requested: the maximum is ${MAX_DATA_KEY_BYTES_PER_CALL} per call`,
        Code.InvalidArgument,
      );
    }
    const outcomes: DataKeyOutcome[] = [];
    for (const request of requests) {
      try {
        outcomes.push(create(DataKeyOutcomeSchema, {
          outcome: { case: "dataKey", value: await derive(request) },
        }));
      } catch (err) {
        const { code, rawMessage } = ConnectError.from(err);
        outcomes.push(create(DataKeyOutcomeSchema, {
          outcome: { case: "error", value: { code, message: rawMessage } },
        }));
      }
    }
    return create(GetDataKeysResponseSchema, { outcomes });
  };
  return (router) => router.service(API, { getDataKey, getDataKeys });
}

/** Key IDs are client-chosen and may be up to the 4 MiB message limit: keep log lines short. */
function truncateForLog(keyId: string): string {
  return keyId.length > 128 ? `${keyId.slice(0, 128)}…` : keyId;
}
