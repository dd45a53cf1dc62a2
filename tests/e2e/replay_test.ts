/**
 * End to end on a local cluster (`src/localcluster/`, 1 control plane in its
 * own network namespace, with its real key and join services): a join
 * request recorded on the wire and replayed by another process, and
 * evidence made for one disk presented for another, are refused by the join
 * service and leave no Secret, bootstrap token or JoiningNode behind.
 *
 * The joining node is a real one the cluster prepared and trusts but did not
 * start (`addNode({ start: false })`): the test is its bootstrapper's join
 * client, built from the bootstrapper's own parts (the disk UUID from its
 * LUKS2 state disk, the kubelet CSR of `kubeletCredentials`, evidence from
 * its swtpm through `TpmIssuer`, the attested request of
 * `tests/support/join_request.ts`). The recorded request is the serialized
 * `IssueJoinTicketRequest`, sent as a Connect unary call
 * (`application/proto`) over HTTP/2 by one `curl` process and replayed,
 * byte for byte, by another: the replay shares no state with the sender.
 * `curl --insecure` accepts the join service's self-signed certificate, as
 * the bootstrapper does (its tickets are sealed to the node's attested key).
 */
import { bytesEqual } from "../../src/bytes/equal.ts";
import assert from "node:assert/strict";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import { TpmIssuer } from "../../src/attestation/tpm/issuer.ts";
import { kubeletCredentials } from "../../src/bootstrapper/joinclient.ts";
import { LuksStateDisk } from "../../src/bootstrapper/state_disk.ts";
import {
  API,
  IssueJoinTicketRequestSchema,
  type IssueJoinTicketResponse,
  IssueJoinTicketResponseSchema,
} from "../../src/gen/join/join_pb.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { deriveStateDiskKey } from "../../src/kms/keys.ts";
import { type LocalCluster, startLocalCluster } from "../../src/localcluster/cluster.ts";
import { silentLogger } from "../../src/log/logger.ts";
import { runToExit } from "../../src/os/service_process.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import * as x509 from "../../src/x509/x509.ts";
import { expectConnectError } from "../support/connect_error.ts";
import type { AuditLine } from "../support/join_cluster.ts";
import { attestedJoinRequest, openJoinTicket } from "../support/join_request.ts";

/** `kubectl get <what> -o json` with the cluster's admin kubeconfig. */
async function kubectlItems(cluster: LocalCluster, args: string[]): Promise<KubeObject[]> {
  const all = ["--kubeconfig", cluster.paths.adminConf, "get", ...args, "-o", "json"];
  const result = await runToExit("kubectl", all);
  assert.equal(result.code, 0, `kubectl ${all.join(" ")}: ${result.stderrLines.join("\n")}`);
  return JSON.parse(result.stdoutLines.join("\n")).items;
}

interface KubeObject {
  metadata: { name: string };
  type?: string;
}

/** What a ticket decision may create: the names of the kube-system Secrets (tokens among them) and JoiningNodes. */
interface ClusterObjects {
  secrets: string[];
  bootstrapTokenSecrets: string[];
  joiningNodes: string[];
}

async function clusterObjects(cluster: LocalCluster): Promise<ClusterObjects> {
  const secrets = await kubectlItems(cluster, ["secrets", "-n", "kube-system"]);
  const joiningNodes = await kubectlItems(cluster, ["joiningnodes"]);
  const names = (items: KubeObject[]) => items.map((item) => item.metadata.name).sort();
  return {
    secrets: names(secrets),
    bootstrapTokenSecrets: names(
      secrets.filter((s) =>
        s.type === "bootstrap.kubernetes.io/token" || /^bootstrap-token-/.test(s.metadata.name)
      ),
    ),
    joiningNodes: names(joiningNodes),
  };
}

/** An answer to a recorded request, as curl saw it. */
interface CurlAnswer {
  /** The HTTP status. */
  status: number;
  /** The HTTP version curl used ("2"). */
  httpVersion: string;
  /** The response body. */
  body: Uint8Array;
}

/**
 * Sends the bytes of `requestFile` as the body of a Connect unary
 * `join.API/IssueJoinTicket` call (binary protobuf) over HTTP/2, from a curl
 * process of its own that writes the answer's body to `responseFile`.
 */
async function curlIssueJoinTicket(
  endpoint: string,
  requestFile: string,
  responseFile: string,
): Promise<CurlAnswer> {
  const result = await runToExit("curl", [
    ...["--http2", "--insecure", "--silent", "--show-error", "--max-time", "30", "--request", "POST"],
    ...["--header", "content-type: application/proto", "--header", "connect-protocol-version: 1"],
    ...["--data-binary", `@${requestFile}`, "--output", responseFile],
    ...["--write-out", "%{http_code} %{http_version}"],
    `https://${endpoint}/join.API/IssueJoinTicket`,
  ], { timeoutMs: 40_000 });
  assert.equal(result.code, 0, `curl: ${result.stderrLines.join("\n")}`);
  const [status, httpVersion] = result.stdoutLines.join("").trim().split(" ");
  return { status: Number(status), httpVersion, body: await Deno.readFile(responseFile) };
}

/** A Connect error body (JSON) of a refused call. */
function connectErrorBody(answer: CurlAnswer): { code: string; message: string } {
  return JSON.parse(new TextDecoder().decode(answer.body));
}

/** The join service's audit lines from its log file, once there are at least `count`. */
async function auditLines(logFile: string, count: number): Promise<AuditLine[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const lines = (await Deno.readTextFile(logFile)).split("\n").flatMap((line) => {
      try {
        return [JSON.parse(line)]; // a line still being written is read again on the next round
      } catch {
        return [];
      }
    }).filter((entry) => entry.log === "audit");
    if (lines.length >= count || Date.now() > deadline) return lines;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** `<id>.<secret>`: the secret part is never printed. */
const BOOTSTRAP_TOKEN = /^([a-z0-9]{6})\.[a-z0-9]{16}$/;

Deno.test("e2e: a replayed join request and evidence for another disk are refused and create nothing", async (t) => {
  const stateDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "e2e-replay-" }));
  let started = Date.now();
  const cluster = await startLocalCluster({ stateDir, controlPlanes: 1, workers: 0, network: "netns" });
  let passed = false;
  try {
    console.log(`cluster up (1 control plane, netns): ${(Date.now() - started) / 1000} s`);
    started = Date.now();
    const node = await cluster.addNode({ role: "Worker", start: false });
    assert.equal(node.bootstrapper, undefined, "the node's bootstrapper is not started");
    const endpoint = cluster.node("control-plane-0").status.joinServiceEndpoint!;
    assert.ok(endpoint, "control-plane-0 runs a join service");
    const joinServiceLog = `${cluster.paths.logs}/control-plane-0-join-service.log`;
    const masterSecret = JSON.parse(await Deno.readTextFile(cluster.paths.masterSecret));
    const kms = new ClusterKms(
      Uint8Array.fromBase64(masterSecret.key),
      Uint8Array.fromBase64(masterSecret.salt),
    );
    const recordDir = `${stateDir}/recorded`;
    await Deno.mkdir(recordDir);

    // The node's own parts, as its bootstrapper would use them.
    const diskUuid = await new LuksStateDisk({
      device: node.files.disk,
      initialPassphraseFile: `${node.files.root}/run/cryptsetup-keys.d/state.key`,
    }).uuid();
    const issuer = await TpmIssuer.create({ tcti: node.tpm.tcti, logger: silentLogger });
    const connection = connectRpc({ baseUrl: `https://${endpoint}`, skipServerVerification: true });
    console.log(`worker-0 prepared (disk, TPM, trusted key): ${(Date.now() - started) / 1000} s`);
    try {
      assert.equal(issuer.keyDigest, node.akDigest, "the issuer quotes with the key the operator trusts");
      const client = createClient(API, connection.transport);
      const nodeRequest = async (uuid: string) => {
        const { csr } = kubeletCredentials(node.name, [node.network.address]);
        return await attestedJoinRequest({ issuer, client, diskUuid: uuid, certificateRequest: csr });
      };

      const replayed = await t.step(
        "a recorded request replayed by another process: nonce-replayed, nothing created",
        async () => {
          const stepStart = Date.now();
          const before = await clusterObjects(cluster);
          const { request, bundle } = await nodeRequest(diskUuid);
          const recorded = `${recordDir}/join-request.bin`;
          await Deno.writeFile(recorded, toBinary(IssueJoinTicketRequestSchema, request));

          // The original: one curl process sends the recorded bytes and gets the sealed ticket.
          const original = await curlIssueJoinTicket(
            endpoint,
            recorded,
            `${recordDir}/original-response.bin`,
          );
          assert.equal(original.status, 200, new TextDecoder().decode(original.body));
          assert.equal(original.httpVersion, "2");
          const response: IssueJoinTicketResponse = fromBinary(IssueJoinTicketResponseSchema, original.body);
          assert.equal(
            response.stateDiskKey.length + response.token.length,
            0,
            "on the wire only `sealed` is set",
          );
          const ticket = await openJoinTicket(response, bundle);
          assert.ok(
            bytesEqual(ticket.stateDiskKey, await deriveStateDiskKey(kms, diskUuid)),
            "the ticket's state disk key is the master secret's derivation for this disk",
          );
          assert.ok(BOOTSTRAP_TOKEN.test(ticket.token), "the ticket holds a bootstrap token <id>.<secret>");
          const tokenId = BOOTSTRAP_TOKEN.exec(ticket.token)![1];
          const kubelet = new x509.X509Certificate(new TextDecoder().decode(ticket.kubeletCert));
          assert.match(kubelet.subject, new RegExp(`CN=system:node:${node.name}(,|$)`));

          const afterOriginal = await clusterObjects(cluster);
          assert.deepEqual(
            afterOriginal.bootstrapTokenSecrets,
            [...before.bootstrapTokenSecrets, `bootstrap-token-${tokenId}`].sort(),
            "exactly one new bootstrap-token Secret, the ticket's",
          );
          assert.deepEqual(
            afterOriginal.secrets,
            [...before.secrets, `bootstrap-token-${tokenId}`].sort(),
            "no other Secret",
          );
          assert.equal(
            afterOriginal.joiningNodes.length,
            before.joiningNodes.length + 1,
            "one new JoiningNode",
          );

          // The replay: the same bytes, from another curl process.
          const replay = await curlIssueJoinTicket(endpoint, recorded, `${recordDir}/replay-response.bin`);
          assert.equal(
            replay.status,
            403,
            `the replay must be refused; it was answered with HTTP ${replay.status}`,
          );
          assert.equal(replay.httpVersion, "2");
          const refusal = connectErrorBody(replay);
          console.log(`replay refused: HTTP ${replay.status}, ${JSON.stringify(refusal)}`);
          assert.equal(refusal.code, "permission_denied");
          assert.match(
            refusal.message,
            /^attested exchange rejected \(nonce-replayed\): nonce was already used/,
          );
          assert.deepEqual(await clusterObjects(cluster), afterOriginal, "the replay created nothing");

          const audit = await auditLines(joinServiceLog, 2);
          assert.deepEqual(
            audit.slice(-2).map((line) => ({
              method: line.method,
              outcome: line.outcome,
              reason: line.reason,
              diskUuid: line.diskUuid,
            })),
            [
              { method: "IssueJoinTicket", outcome: "issued", reason: undefined, diskUuid },
              { method: "IssueJoinTicket", outcome: "rejected", reason: "nonce-replayed", diskUuid },
            ],
          );
          console.log(`replay step: ${(Date.now() - stepStart) / 1000} s`);
        },
      );

      const moved = await t.step(
        "evidence bound to this disk asking for another: report-data-mismatch, nothing created",
        async () => {
          const stepStart = Date.now();
          const before = await clusterObjects(cluster);
          const otherDisk = crypto.randomUUID();
          // Evidence over the request digest with this node's disk UUID A, sent asking for disk UUID B.
          const { request } = await nodeRequest(diskUuid);
          request.diskUuid = otherDisk;
          const error = await expectConnectError(
            client.issueJoinTicket(request),
            Code.PermissionDenied,
            /^attested exchange rejected \(report-data-mismatch\): /,
          );
          console.log(`moved evidence refused: ${Code[error.code]}, ${JSON.stringify(error.rawMessage)}`);
          assert.deepEqual(await clusterObjects(cluster), before, "the refusal created nothing");
          const [refused] = (await auditLines(joinServiceLog, 3)).slice(-1);
          assert.deepEqual(
            { outcome: refused.outcome, reason: refused.reason, diskUuid: refused.diskUuid },
            { outcome: "rejected", reason: "report-data-mismatch", diskUuid: otherDisk },
          );
          assert.equal(refused.keyDigest, node.akDigest, "the evidence itself came from the trusted key");

          // The control: evidence bound to B, asking for B, is accepted; the refusal was the binding's.
          const bound = await nodeRequest(otherDisk);
          const ticket = await openJoinTicket(await client.issueJoinTicket(bound.request), bound.bundle);
          assert.ok(
            bytesEqual(ticket.stateDiskKey, await deriveStateDiskKey(kms, otherDisk)),
            "the key for disk B, to evidence bound to disk B",
          );
          console.log(`moved-evidence step: ${(Date.now() - stepStart) / 1000} s`);
        },
      );
      passed = replayed && moved;
    } finally {
      connection.close();
      await issuer.close();
    }
  } finally {
    await cluster.close();
    if (passed) await Deno.remove(stateDir, { recursive: true });
    else console.error(`the cluster's state (logs, kubeconfig) stays in ${stateDir}`);
  }
});
