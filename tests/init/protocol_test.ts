/**
 * `openNodeRequest` (`src/init/protocol.ts`): a sealed request opens to its
 * plaintext fields, and a plaintext that itself carries the wire-only fields
 * (`sealed`, `attestation_nonce`) is refused as malformed, for the init's
 * request and the recovery's alike.
 */
import assert from "node:assert/strict";
import { create, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { generateKeyPair, seal } from "../../src/atls/hpke.ts";
import { sealInfo } from "../../src/atls/reportdata.ts";
import { SealedSchema } from "../../src/gen/atls/v1/atls_pb.ts";
import { InitRequestSchema } from "../../src/gen/init/init_pb.ts";
import { RecoverRequestSchema } from "../../src/gen/recoverproto/recover_pb.ts";
import {
  INIT_PURPOSE,
  type NodeExchangePurpose,
  nodeReportData,
  openNodeRequest,
  RECOVER_PURPOSE,
  type SealableRequest,
} from "../../src/init/protocol.ts";

const NONCE = new Uint8Array(32).fill(7);

/**
 * Seals `plaintext` of `schema` as the client does, but as it is given: the
 * wire-only fields are not cleared (`sealNodeRequest` would clear them).
 * Resolves with what `openNodeRequest` makes of it.
 */
async function openVerbatim<D extends SealableRequest>(
  purpose: NodeExchangePurpose,
  schema: D,
  plaintext: MessageInitShape<D>,
) {
  const node = await generateKeyPair();
  const reportData = await nodeReportData(purpose, NONCE, node.publicKey);
  const sealed = await seal(node.publicKey, toBinary(schema, create(schema, plaintext)), {
    info: sealInfo(purpose, "request"),
    aad: reportData,
  });
  return openNodeRequest(purpose, schema, node, create(SealedSchema, sealed), reportData);
}

Deno.test("openNodeRequest() refuses a plaintext that itself carries sealed or attestation_nonce", async (t) => {
  const clientPublicKey = new Uint8Array(32).fill(2);
  const inner = create(SealedSchema, { encapsulatedKey: new Uint8Array(32), ciphertext: new Uint8Array(16) });
  const rows: {
    name: string;
    purpose: NodeExchangePurpose;
    schema: SealableRequest;
    plaintext: Record<string, unknown>;
    refused: boolean;
  }[] = [
    {
      name: "init: the plaintext fields only",
      purpose: INIT_PURPOSE,
      schema: InitRequestSchema,
      plaintext: { clientPublicKey, kubernetesVersion: "v1.30.2" },
      refused: false,
    },
    {
      name: "init: attestation_nonce inside",
      purpose: INIT_PURPOSE,
      schema: InitRequestSchema,
      plaintext: { clientPublicKey, kubernetesVersion: "v1.30.2", attestationNonce: NONCE },
      refused: true,
    },
    {
      name: "init: sealed inside",
      purpose: INIT_PURPOSE,
      schema: InitRequestSchema,
      plaintext: { clientPublicKey, kubernetesVersion: "v1.30.2", sealed: inner },
      refused: true,
    },
    {
      name: "init: an empty sealed inside",
      purpose: INIT_PURPOSE,
      schema: InitRequestSchema,
      plaintext: { clientPublicKey, sealed: create(SealedSchema) },
      refused: true,
    },
    {
      name: "recover: the plaintext fields only",
      purpose: RECOVER_PURPOSE,
      schema: RecoverRequestSchema,
      plaintext: { clientPublicKey },
      refused: false,
    },
    {
      name: "recover: attestation_nonce inside",
      purpose: RECOVER_PURPOSE,
      schema: RecoverRequestSchema,
      plaintext: { clientPublicKey, attestationNonce: NONCE },
      refused: true,
    },
    {
      name: "recover: sealed inside",
      purpose: RECOVER_PURPOSE,
      schema: RecoverRequestSchema,
      plaintext: { clientPublicKey, sealed: inner },
      refused: true,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const opening = openVerbatim(
        row.purpose,
        row.schema,
        row.plaintext as MessageInitShape<SealableRequest>,
      );
      if (row.refused) {
        await assert.rejects(opening, (error: Error) => {
          assert.ok(error instanceof TypeError, String(error));
          assert.equal(
            error.message,
            `the sealed ${row.schema.name} itself carries sealed or attestation_nonce`,
          );
          return true;
        });
      } else {
        const opened = await opening as unknown as { clientPublicKey: Uint8Array };
        assert.deepEqual(opened.clientPublicKey, clientPublicKey);
      }
    });
  }
});
