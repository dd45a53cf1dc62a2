/**
 * The local Kubernetes API as a product part: objects persist across a
 * restart, the real `kubectl` can get, describe and delete Secrets,
 * ConfigMaps, NodeVersions and JoiningNodes with an admin kubeconfig, and
 * the `local-api` process serves kubeadm's PKI and refuses a client
 * certificate from another CA.
 *
 * @module
 */
import assert from "node:assert/strict";
import { STATE_FILE } from "../../src/localapi/state.ts";
import { type FakeApiServer, startFakeApiServer } from "../support/fake_apiserver.ts";
import { createTestCa, issueCert, issueLoopbackServerCert, kubeconfigFor } from "../support/pki.ts";
import { runToExit, startService } from "../../src/os/service_process.ts";
import { withTempDir } from "../support/temp_dir.ts";
import { ManualClock } from "../support/manual_clock.ts";

const CRD = "/apis/update.edgeless.systems/v1alpha1";
const fixtures: [string, Record<string, unknown>][] = [
  ["/api/v1/namespaces/kube-system/secrets/join-token", { type: "Opaque", data: { token: btoa("t0ken") } }],
  ["/api/v1/namespaces/kube-system/configmaps/join-config", { data: { measurements: "{}" } }],
  [`${CRD}/nodeversions/constellation-version`, {
    apiVersion: "update.edgeless.systems/v1alpha1",
    kind: "NodeVersion",
    spec: { kubernetesClusterVersion: "v1.32.0" },
  }],
  [`${CRD}/joiningnodes/worker-1`, {
    apiVersion: "update.edgeless.systems/v1alpha1",
    kind: "JoiningNode",
    spec: { name: "worker-1", componentsreference: "components-1" },
  }],
];

/** Runs kubectl with only `kubeconfig`, HOME in `dir` (its cache goes there). */
async function kubectl(dir: string, kubeconfig: string, ...args: string[]) {
  const result = await runToExit("kubectl", ["--kubeconfig", kubeconfig, ...args], {
    env: { HOME: `${dir}/home`, PATH: "/usr/local/bin:/usr/bin:/bin" },
  });
  return { code: result.code, out: result.stdoutLines.join("\n"), err: result.stderrLines.join("\n") };
}

async function withObjects(server: FakeApiServer): Promise<void> {
  for (const [path, object] of fixtures) server.putObject(path, object);
  await server.flush();
}

Deno.test("local API: objects, field owners and resourceVersions persist across a restart", async () => {
  await withTempDir("local-api-state-", async (dir) => {
    const stateDir = `${dir}/state`;
    let lastVersion: string;
    {
      await using first = await startFakeApiServer({ stateDir });
      await withObjects(first);
      first.deleteObject(`${CRD}/joiningnodes/worker-1`);
      lastVersion = String(
        (first.getObject(fixtures[1][0])!.metadata as Record<string, unknown>).resourceVersion,
      );
    }
    assert.equal((await Deno.stat(`${stateDir}/${STATE_FILE}`)).mode! & 0o777, 0o600);
    await using second = await startFakeApiServer({ stateDir });
    const secret = second.getObject(fixtures[0][0])!;
    assert.deepEqual(secret.data, { token: btoa("t0ken") });
    assert.equal((secret.metadata as { managedFields: unknown[] }).managedFields.length, 1);
    assert.deepEqual(second.getObject(fixtures[2][0])!.spec, { kubernetesClusterVersion: "v1.32.0" });
    assert.equal(second.getObject(`${CRD}/joiningnodes/worker-1`), undefined, "a deletion persists too");
    const created = second.putObject("/api/v1/namespaces/default/configmaps/after", { data: { a: "b" } });
    assert.ok(
      Number((created.metadata as Record<string, unknown>).resourceVersion) > Number(lastVersion),
      "resourceVersions keep growing after a restart",
    );
  });
});

Deno.test("local API: kubectl gets, describes and deletes secrets, configmaps, nodeversions and joiningnodes", async (t) => {
  await withTempDir("local-api-kubectl-", async (dir) => {
    await using server = await startFakeApiServer();
    await withObjects(server);
    const kubeconfig = `${dir}/admin.conf`;
    await Deno.writeTextFile(kubeconfig, server.kubeconfig());
    const run = (...args: string[]) => kubectl(dir, kubeconfig, ...args);

    await t.step("get (server-side printed tables)", async () => {
      const secrets = await run("get", "secrets", "-n", "kube-system");
      assert.equal(secrets.code, 0, secrets.err);
      assert.match(secrets.out, /^NAME\s+TYPE\s+DATA\s+AGE\njoin-token\s+Opaque\s+1\s+\d+s$/);
      const configmaps = await run("get", "cm", "-n", "kube-system");
      assert.match(configmaps.out, /^NAME\s+DATA\s+AGE\njoin-config\s+1\s+/);
      const versions = await run("get", "nodeversions");
      assert.match(versions.out, /^NAME\s+AGE\nconstellation-version\s+/);
      const joining = await run("get", "joiningnodes.update.edgeless.systems", "worker-1", "-o", "json");
      assert.equal(joining.code, 0, joining.err);
      assert.deepEqual(JSON.parse(joining.out).spec, {
        name: "worker-1",
        componentsreference: "components-1",
      });
      const all = await run("get", "joiningnodes,secrets", "-n", "kube-system", "-o", "name");
      assert.deepEqual(all.out.split("\n"), [
        "joiningnode.update.edgeless.systems/worker-1",
        "secret/join-token",
      ]);
      const namespaces = await run("get", "namespaces");
      assert.match(namespaces.out, /kube-system\s+Active/);
      const missing = await run("get", "secret", "nope", "-n", "kube-system");
      assert.equal(missing.code, 1);
      assert.match(missing.err, /Error from server \(NotFound\): secrets "nope" not found/);
    });

    await t.step("describe", async () => {
      const secret = await run("describe", "secret", "join-token", "-n", "kube-system");
      assert.equal(secret.code, 0, secret.err);
      assert.match(secret.out, /Name:\s+join-token\nNamespace:\s+kube-system/);
      assert.match(secret.out, /token:\s+5 bytes/);
      const configmap = await run("describe", "configmap", "join-config", "-n", "kube-system");
      assert.match(configmap.out, /measurements:\n----\n\{\}/);
      const version = await run("describe", "nodeversion", "constellation-version");
      assert.equal(version.code, 0, version.err);
      assert.match(version.out, /Kind:\s+NodeVersion/);
      assert.match(version.out, /Kubernetes Cluster Version:\s+v1.32.0/);
      assert.match(version.out, /Events:\s+<none>/);
      const joining = await run("describe", "joiningnodes");
      assert.match(joining.out, /Name:\s+worker-1/);
    });

    await t.step("delete (and kubectl's wait for the deletion)", async () => {
      for (const [path] of fixtures) {
        const parts = path.split("/");
        const [plural, name] = parts.slice(-2);
        const namespace = path.startsWith("/api/v1/") ? ["-n", "kube-system"] : [];
        const result = await run("delete", plural, name, ...namespace);
        assert.equal(result.code, 0, result.err);
        assert.match(result.out, new RegExp(`"${name}" deleted`));
        assert.equal(server.getObject(path), undefined, path);
      }
      const empty = await run("get", "secrets,configmaps", "-n", "kube-system");
      assert.match(empty.err, /No resources found/);
    });
  });
});

Deno.test("local-api process: serves kubeadm's PKI, persists, refuses a foreign client certificate", async () => {
  await withTempDir("local-api-process-", async (dir) => {
    const pkiDir = `${dir}/pki`;
    const stateDir = `${dir}/state`;
    await Deno.mkdir(pkiDir, { recursive: true });
    const ca = await createTestCa("CN=kubernetes");
    const serverCert = await issueLoopbackServerCert(ca, "CN=kube-apiserver");
    await Deno.writeTextFile(`${pkiDir}/ca.key`, ca.keyPem);
    await Deno.writeTextFile(`${pkiDir}/apiserver.key`, serverCert.keyPem);
    await Deno.writeTextFile(`${pkiDir}/apiserver.crt`, serverCert.certPem);
    await Deno.writeTextFile(`${pkiDir}/ca.crt`, ca.certPem);
    const admin = await issueCert(ca, {
      subject: "CN=kubernetes-admin, O=system:masters",
      usages: ["clientAuth"],
    });
    const foreignCa = await createTestCa("CN=foreign");
    const foreign = await issueCert(foreignCa, {
      subject: "CN=kubernetes-admin, O=system:masters",
      usages: ["clientAuth"],
    });

    const start = () =>
      startService("deno", [
        "run",
        "-P=local-api",
        "--no-prompt",
        "src/localapi/main.ts",
        "--pki-dir",
        pkiDir,
        "--state-dir",
        stateDir,
        "--port",
        "0",
      ], { readyMatch: /"msg":"listening".*"port":(\d+)/ });
    let service = await start();
    try {
      await service.waitForLine(/"msg":"serving"/);
      const url = `https://127.0.0.1:${service.port}`;
      const adminConf = `${dir}/admin.conf`;
      await Deno.writeTextFile(adminConf, kubeconfigFor(url, ca.certPem, admin));
      const configMap = `${dir}/cm.json`;
      await Deno.writeTextFile(
        configMap,
        JSON.stringify({
          apiVersion: "v1",
          kind: "ConfigMap",
          metadata: { name: "kept", namespace: "kube-system" },
        }),
      );
      const created = await kubectl(dir, adminConf, "create", "-f", configMap, "--validate=false");
      assert.equal(created.code, 0, created.err);

      const foreignConf = `${dir}/foreign.conf`;
      await Deno.writeTextFile(foreignConf, kubeconfigFor(url, ca.certPem, foreign));
      const refused = await kubectl(dir, foreignConf, "get", "secrets", "-n", "kube-system");
      assert.notEqual(refused.code, 0);
      assert.match(refused.err, /Unauthorized|must be logged in/);

      assert.equal((await service.stop()).code, 0);
      service = await start();
      await service.waitForLine(/"msg":"serving"/);
      await Deno.writeTextFile(
        adminConf,
        kubeconfigFor(`https://127.0.0.1:${service.port}`, ca.certPem, admin),
      );
      const kept = await kubectl(
        dir,
        adminConf,
        "get",
        "configmap",
        "kept",
        "-n",
        "kube-system",
        "-o",
        "name",
      );
      assert.equal(kept.code, 0, kept.err);
      assert.equal(kept.out, "configmap/kept");
    } finally {
      await service.stop();
    }
  });
});

Deno.test("the token cleaner deletes bootstrap tokens once their expiration has passed, and only those", async () => {
  const clock = new ManualClock(Date.parse("2026-01-01T00:00:00Z"));
  await using api = await startFakeApiServer({ clock, tokenCleanupIntervalMs: 20 });
  const base64 = (text: string) => new TextEncoder().encode(text).toBase64();
  const token = (id: string, expiration?: string) => ({
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: `bootstrap-token-${id}`, namespace: "kube-system" },
    type: "bootstrap.kubernetes.io/token",
    data: {
      "token-id": base64(id),
      "token-secret": base64("0123456789abcdef"),
      ...(expiration === undefined ? {} : { expiration: base64(expiration) }),
    },
  });
  const path = (id: string) => `/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`;
  api.putObject(path("early1"), token("early1", "2026-01-01T00:15:00Z"));
  api.putObject(path("later1"), token("later1", "2026-01-01T01:00:00Z"));
  api.putObject(path("never1"), token("never1"));
  const settle = () => new Promise((resolve) => setTimeout(resolve, 100));

  await settle();
  assert.ok(api.getObject(path("early1")), "not expired yet: kept");
  clock.advance(15 * 60 * 1000);
  await settle();
  assert.equal(api.getObject(path("early1")), undefined, "expired: deleted");
  assert.ok(api.getObject(path("later1")), "a later expiration: kept");
  assert.ok(api.getObject(path("never1")), "no expiration: kept");
});

Deno.test("local API: a --state-dir that is a file, or holds another format's snapshot, is named", async () => {
  await withTempDir("local-api-bad-state-", async (dir) => {
    await Deno.writeTextFile(`${dir}/file`, "x");
    await assert.rejects(
      startFakeApiServer({ stateDir: `${dir}/file` }),
      { message: `--state-dir ${dir}/file exists and is not a directory` },
    );
    await Deno.mkdir(`${dir}/other`);
    await Deno.writeTextFile(`${dir}/other/${STATE_FILE}`, JSON.stringify({ version: 9, objects: [] }));
    await assert.rejects(
      startFakeApiServer({ stateDir: `${dir}/other` }),
      { message: `${dir}/other: not a local API state snapshot (version 1)` },
    );
  });
});
