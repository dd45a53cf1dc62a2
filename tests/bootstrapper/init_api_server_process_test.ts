/**
 * The bootstrapper process sends Init's cluster objects, the master secret
 * among them, to `--init-api-server` (on a node its own API server over
 * loopback), not to the control plane endpoint that admin.conf names: Deno
 * would trust a public CA's certificate for that endpoint besides the
 * cluster CA. Two fake API servers serve the same kubeadm PKI: admin.conf
 * names the first, the flag the second.
 */
import assert from "node:assert/strict";
import { initCluster } from "../../src/init/client.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import { startBootstrapCluster } from "../support/bootstrap_cluster.ts";
import { startFakeApiServer } from "../support/fake_apiserver.ts";

const MASTER_SECRET_PATH = "/api/v1/namespaces/kube-system/secrets/constellation-mastersecret";

Deno.test("bootstrapper process: Init's objects go to --init-api-server, not to admin.conf's endpoint", async () => {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "init-api-server-" }));
  const stack = new AsyncDisposableStack();
  try {
    const cluster = await startBootstrapCluster(dir, stack);
    const own = await startFakeApiServer({ pkiDir: cluster.cpPaths.pkiDir });
    stack.defer(() => own.close());
    const process = await cluster.controlPlane.start(["--init-api-server", own.url]);
    using connection = connectRpc({
      baseUrl: `https://127.0.0.1:${process.port}`,
      skipServerVerification: true,
    });

    const result = await initCluster(cluster.initRequest(), {
      transport: connection.transport,
      validator: cluster.validator,
      controlPlanes: cluster.controlPlanes,
    });

    assert.ok(own.getObject(MASTER_SECRET_PATH), "the master secret went to the node's own API server");
    assert.equal(
      cluster.apiServer.getObject(MASTER_SECRET_PATH),
      undefined,
      "and not to admin.conf's endpoint",
    );
    assert.match(
      new TextDecoder().decode(result.kubeconfig),
      new RegExp(`server: ${cluster.apiServer.url.replaceAll(".", "\\.")}`),
      "the operator's kubeconfig still names the control plane endpoint",
    );
  } finally {
    await stack.disposeAsync();
    await Deno.remove(dir, { recursive: true });
  }
});
