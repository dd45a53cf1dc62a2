/**
 * The init and the recovery send the master secret to a control plane only:
 * evidence that verifies from an attestation key the config trusts but does
 * not name in `akTrust.controlPlaneKeyDigests` is refused by name, as the
 * join service refuses that key the control-plane role, and nothing is sent.
 * Real `qemu-vtpm` evidence from a swtpm; dummy evidence, which has no key,
 * passes only under `controlPlaneAnyKey`.
 */
import assert from "node:assert/strict";
import { createRouterTransport } from "@connectrpc/connect";
import { parseOperatorAttestationConfig } from "../../src/attestation/config.ts";
import { TpmIssuer } from "../../src/attestation/tpm/issuer.ts";
import { createValidator } from "../../src/attestation/registry.ts";
import { CONTROL_PLANE_ANY_KEY_WARNING } from "../../src/attestation/watcher.ts";
import { API as RecoverAPI } from "../../src/gen/recoverproto/recover_pb.ts";
import { initCluster } from "../../src/init/client.ts";
import { CONTROL_PLANE_NOT_ALLOWED, NodeExchangeError } from "../../src/init/node_exchange.ts";
import { recoverNode } from "../../src/init/recover_client.ts";
import { encodeMasterSecretUri } from "../../src/kms/uri.ts";
import type { Logger } from "../../src/log/logger.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { startSwtpm } from "../../src/localcluster/swtpm.ts";
import { DUMMY_ATTESTATION_CONFIG, fakeInitDependencies, initParameters } from "../support/init_fakes.ts";
import { fakeRecoveryNode, RECOVERY_DISK_UUID, RECOVERY_MASTER } from "../support/recovery_fakes.ts";

const OTHER_KEY = "cd".repeat(32);

async function rejected(work: Promise<unknown>): Promise<NodeExchangeError> {
  const error = await work.then(() => assert.fail("the exchange succeeded"), (e) => e);
  assert.ok(error instanceof NodeExchangeError, String(error));
  return error;
}

/** {@linkcode fakeRecoveryNode} on `issuer`, behind an in-memory transport. */
async function recoveryNode(issuer: TpmIssuer) {
  const node = await fakeRecoveryNode(issuer);
  return Object.assign(node, {
    transport: createRouterTransport((router) => router.service(RecoverAPI, node.handlers)),
  });
}

function warnings(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const logger: Logger = {
    debug: () => {},
    info: () => {},
    warn: (message) => lines.push(message),
    error: (message) => lines.push(message),
    with: () => logger,
  };
  return { logger, lines };
}

Deno.test("init and recovery send the master secret only to a control plane's attestation key (swtpm)", async (t) => {
  const tpm = await startSwtpm();
  const issuer = await TpmIssuer.create({ tcti: tpm.tcti, logger: silentLogger, eventLogPath: null });
  try {
    /** The operator's config: both keys trusted, `controlPlanes` as given; its text, validator and control planes. */
    const operator = (akTrust: Record<string, unknown>) => {
      const text = JSON.stringify({
        variant: "qemu-vtpm",
        measurements: { "15": { expected: "00".repeat(32), warnOnly: false } },
        akTrust,
      });
      const config = parseOperatorAttestationConfig(text);
      return {
        parameters: initParameters({ attestationConfig: text }),
        validator: createValidator(config, { logger: silentLogger }),
        controlPlanes: config.controlPlanes,
      };
    };
    const allowed = [issuer.keyDigest, OTHER_KEY];
    const workerOnly = operator({ allowedKeyDigests: allowed, controlPlaneKeyDigests: [OTHER_KEY] });
    const controlPlane = operator({ allowedKeyDigests: allowed, controlPlaneKeyDigests: [issuer.keyDigest] });
    const recoverRequest = {
      kmsUri: encodeMasterSecretUri(RECOVERY_MASTER),
      storageUri: "storage://no-store",
    };

    const assertRefusedByName = (error: NodeExchangeError) => {
      assert.equal(error.reason, "attestation-rejected");
      assert.equal(error.attestationReason, CONTROL_PLANE_NOT_ALLOWED);
      assert.ok(error.message.includes(issuer.keyDigest), error.message);
      assert.match(error.message, /akTrust\.controlPlaneKeyDigests/);
    };

    await t.step(
      "init: a trusted key that is no control plane's is refused by name; nothing is sent",
      async () => {
        const world = fakeInitDependencies({ issuer });
        const { parameters, ...attestation } = workerOnly;
        const error = await rejected(initCluster(parameters, { transport: world.transport, ...attestation }));
        assertRefusedByName(error);
        assert.deepEqual(world.calls, []);
        assert.deepEqual(world.initialized, []);
      },
    );

    await t.step("recovery: the same key is sent no master secret", async () => {
      using node = await recoveryNode(issuer);
      const { parameters: _, ...attestation } = workerOnly;
      const error = await rejected(
        recoverNode(recoverRequest, { transport: node.transport, ...attestation }),
      );
      assertRefusedByName(error);
      assert.deepEqual(node.received, []);
    });

    await t.step("a control plane's key: the init and the recovery go through", async () => {
      const world = fakeInitDependencies({ issuer });
      const { parameters, ...attestation } = controlPlane;
      const result = await initCluster(parameters, { transport: world.transport, ...attestation });
      assert.ok(result.kubeconfig.length > 0);
      using node = await recoveryNode(issuer);
      const recovered = await recoverNode(recoverRequest, { transport: node.transport, ...attestation });
      assert.equal(recovered.diskUuid, RECOVERY_DISK_UUID);
      assert.equal(node.received.length, 1);
    });

    await t.step("controlPlaneAnyKey: any key, with the join service's INSECURE warning", async () => {
      const world = fakeInitDependencies({ issuer });
      const { logger, lines } = warnings();
      const { parameters, ...attestation } = operator({ trustAnyKey: true, controlPlaneAnyKey: true });
      await initCluster(parameters, { transport: world.transport, ...attestation, logger });
      assert.deepEqual(lines, [CONTROL_PLANE_ANY_KEY_WARNING]);
    });
  } finally {
    await issuer.close();
    await tpm.stop();
  }
});

Deno.test("dummy evidence, which has no attestation key, is a control plane's only under controlPlaneAnyKey", async (t) => {
  const controlPlanesOf = (akTrust: unknown) =>
    parseOperatorAttestationConfig(JSON.stringify({ variant: "dummy", akTrust })).controlPlanes;

  await t.step("trustAnyKey alone: refused, nothing sent", async () => {
    const world = fakeInitDependencies();
    const error = await rejected(
      initCluster(initParameters(), {
        transport: world.transport,
        validator: world.validator,
        controlPlanes: controlPlanesOf({ trustAnyKey: true }),
      }),
    );
    assert.equal(error.attestationReason, CONTROL_PLANE_NOT_ALLOWED);
    assert.match(
      error.message,
      /names no attestation key, so it is a control plane only with akTrust\.controlPlaneAnyKey/,
    );
    assert.deepEqual(world.calls, []);
  });

  await t.step("with controlPlaneAnyKey (the tests' dummy config): accepted", async () => {
    const world = fakeInitDependencies();
    const result = await initCluster(initParameters(), {
      transport: world.transport,
      validator: world.validator,
      controlPlanes: parseOperatorAttestationConfig(DUMMY_ATTESTATION_CONFIG).controlPlanes,
    });
    assert.ok(result.kubeconfig.length > 0);
  });
});
