/** The join service's serving certificate when none is configured. */
import assert from "node:assert/strict";
import * as tls from "node:tls";
import { createClient } from "@connectrpc/connect";
import { API } from "../../src/gen/join/join_pb.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import * as x509 from "../../src/x509/x509.ts";
import { JOIN_SERVICE_LISTENING, startJoinCluster } from "../support/join_cluster.ts";
import { startService } from "../../src/os/service_process.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";

Deno.test("without --tls-cert the join service serves a self-signed certificate it generated at start", async () => {
  await using cluster = await startJoinCluster();
  const args = cluster.joinServiceArgs().filter((arg, i, all) =>
    !["--tls-cert", "--tls-key"].includes(arg) && !["--tls-cert", "--tls-key"].includes(all[i - 1])
  );
  assert.equal(args.some((arg) => arg.startsWith("--tls")), false);
  const service = await startService("deno", args, { readyMatch: JOIN_SERVICE_LISTENING, cwd: REPO_ROOT });
  try {
    const der = await new Promise<Uint8Array<ArrayBuffer>>((resolve, reject) => {
      const socket = tls.connect({
        host: "127.0.0.1",
        port: service.port,
        rejectUnauthorized: false,
        ALPNProtocols: ["h2"],
      });
      socket.once("error", reject);
      socket.once("secureConnect", () => {
        resolve(new Uint8Array(socket.getPeerCertificate(true).raw));
        socket.destroy();
      });
    });
    const certificate = new x509.X509Certificate(der);
    assert.equal(certificate.subject, "CN=join-service");
    assert.equal(await certificate.verify({ signatureOnly: true }), true, "self-signed");
    assert.equal(
      certificate.getExtension(x509.BasicConstraintsExtension)?.ca,
      false,
      "an end-entity certificate",
    );

    using connection = connectRpc({
      baseUrl: `https://127.0.0.1:${service.port}`,
      skipServerVerification: true,
    });
    const client = createClient(API, connection.transport);
    assert.equal((await client.getStatus({})).attestationVariant, "qemu-vtpm");
  } finally {
    assert.equal((await service.stop()).code, 0);
  }
});
