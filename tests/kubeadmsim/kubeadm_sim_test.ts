/**
 * The recording kubeadm as the bootstrapper runs it: the real executable
 * (`scripts/kubeadm-sim`, under the kubeadm-sim permission set) with an
 * empty environment except the node root, against the fake API server of a
 * kubeadm cluster (`pkiDir` mode) for what it must prove over the network.
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { discoveryTokenCaCertHash } from "../../src/joinservice/cahash.ts";
import { bootstrapTokenSecret, generateBootstrapToken } from "../../src/joinservice/bootstraptoken.ts";
import { KubernetesClient } from "../../src/kubernetes/client.ts";
import { parseKubeconfig, resolveConnection } from "../../src/kubernetes/kubeconfig.ts";
import { SHARED_FILES } from "../../src/kubeadmsim/certs.ts";
import { injectFailures } from "../../src/kubeadmsim/inject.ts";
import { readRecords, RECORD_FILE } from "../../src/kubeadmsim/record.ts";
import { SimRoot } from "../../src/kubeadmsim/root.ts";
import * as x509 from "../../src/x509/x509.ts";
import { publishClusterInfo } from "../../src/localcluster/services.ts";
import { type FakeApiServer, startFakeApiServer } from "../support/fake_apiserver.ts";
import { opensslVerify } from "../support/openssl.ts";

const LAUNCHER = new URL("../../scripts/kubeadm-sim", import.meta.url).pathname;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the launcher as the bootstrapper does: explicit minimal environment. */
async function kubeadm(root: string, args: string[]): Promise<Run> {
  const env: Record<string, string> = { KUBEADM_SIM_ROOT: root };
  const denoDir = Deno.env.get("DENO_DIR");
  if (denoDir) env.DENO_DIR = denoDir;
  const output = await new Deno.Command(LAUNCHER, {
    args,
    env,
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  const decoder = new TextDecoder();
  return { code: output.code, stdout: decoder.decode(output.stdout), stderr: decoder.decode(output.stderr) };
}

/** The init documents of reference §6.4 (shortened), pointed at `endpoint`. */
function initYaml(endpoint: string, nodeName = "control-plane-0"): string {
  return [
    {
      apiVersion: "kubeadm.k8s.io/v1beta3",
      kind: "InitConfiguration",
      nodeRegistration: {
        criSocket: "unix:///run/containerd/containerd.sock",
        name: nodeName,
        kubeletExtraArgs: {
          "cloud-provider": "",
          "node-ip": "127.0.0.1",
          "provider-id": `qemu:///hostname/${nodeName}`,
        },
      },
      localAPIEndpoint: { bindPort: 6443 },
    },
    {
      apiVersion: "kubeadm.k8s.io/v1beta3",
      kind: "ClusterConfiguration",
      kubernetesVersion: "v1.27.4",
      clusterName: "testcluster",
      controlPlaneEndpoint: endpoint,
      apiServer: {
        certSANs: ["127.0.0.1", "10.9.8.7", "api.example.com"],
        extraArgs: { profiling: "false" },
      },
    },
    {
      apiVersion: "kubelet.config.k8s.io/v1beta1",
      kind: "KubeletConfiguration",
      protectKernelDefaults: true,
      staticPodPath: "/etc/kubernetes/manifests",
    },
  ].map((d) => stringify(d)).join("---\n");
}

function joinYaml(options: {
  endpoint: string;
  token: string;
  hashes: string[];
  nodeName?: string;
  controlPlane?: boolean;
  timeout?: string;
}): string {
  const join: Record<string, unknown> = {
    apiVersion: "kubeadm.k8s.io/v1beta3",
    kind: "JoinConfiguration",
    nodeRegistration: {
      criSocket: "unix:///run/containerd/containerd.sock",
      name: options.nodeName ?? "worker-0",
      kubeletExtraArgs: { "node-ip": "127.0.0.1" },
    },
    discovery: {
      bootstrapToken: {
        apiServerEndpoint: options.endpoint,
        token: options.token,
        caCertHashes: options.hashes,
      },
      timeout: options.timeout ?? "3s",
    },
  };
  if (options.controlPlane) {
    join.controlPlane = { localAPIEndpoint: { advertiseAddress: "127.0.0.1", bindPort: 6443 } };
    join.skipPhases = ["control-plane-prepare/download-certs"];
  }
  return [join, {
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "KubeletConfiguration",
    providerID: "qemu:///x",
  }]
    .map((d) => stringify(d)).join("---\n");
}

async function writeConfig(dir: string, name: string, text: string): Promise<string> {
  const path = `${dir}/${name}`;
  await Deno.writeTextFile(path, text, { mode: 0o600 });
  return path;
}

function assertOk(run: Run, what: string): void {
  assert.equal(run.code, 0, `${what}: exit ${run.code}\n${run.stderr}`);
}

/** Every file under `dir`, as text. */
async function allText(dir: string): Promise<string> {
  let text = "";
  for await (const entry of Deno.readDir(dir)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) text += await allText(path);
    else if (entry.isFile) text += await Deno.readTextFile(path);
  }
  return text;
}

async function clientFrom(kubeconfigText: string): Promise<KubernetesClient> {
  return new KubernetesClient(await resolveConnection(parseKubeconfig(kubeconfigText), { baseDir: "/" }), {
    getAttempts: 1,
  });
}

/** One cluster: a control plane initialized by the simulator, served by the fake API server. */
interface Cluster {
  dir: string;
  root: string;
  server: FakeApiServer;
  endpoint: string;
  caPem: string;
  caHash: string;
  init: Run[];
}

async function initCluster(dir: string): Promise<Cluster> {
  const root = `${dir}/control-plane-0`;
  await Deno.mkdir(root);
  const server = await startFakeApiServer({ pkiDir: `${root}/etc/kubernetes/pki`, pkiPollMs: 20 });
  const endpoint = `127.0.0.1:${server.port}`;
  const config = await writeConfig(dir, "kubeadm-init.yaml", initYaml(endpoint));
  // Reference §6.3, steps 3, 4, 8 and 9.
  const init = [
    await kubeadm(root, ["init", "phase", "preflight", "-v=5", "--config", config]),
    await kubeadm(root, ["init", "phase", "certs", "all", "-v=5", "--config", config]),
    await kubeadm(root, [
      "init",
      "-v=5",
      "--skip-phases=preflight,certs,addon/kube-proxy",
      "--config",
      config,
    ]),
    await kubeadm(root, [
      "kubeconfig",
      "user",
      "--client-name",
      "testcluster-admin",
      "--config",
      config,
      "--org",
      "system:masters",
    ]),
  ];
  init.forEach((run, i) => assertOk(run, `init step ${i}`));
  await server.whenServing();
  const caPem = await Deno.readTextFile(`${root}/etc/kubernetes/pki/ca.crt`);
  return { dir, root, server, endpoint, caPem, caHash: await discoveryTokenCaCertHash(caPem), init };
}

/** Publishes cluster-info as kubeadm's bootstrap-token phase would, and creates a bootstrap token. */
async function publishClusterInfoAndToken(cluster: Cluster): Promise<string> {
  await publishClusterInfo({
    adminConf: `${cluster.root}/etc/kubernetes/admin.conf`,
    endpoint: cluster.endpoint,
    caPem: cluster.caPem,
  });
  using admin = await clientFrom(await Deno.readTextFile(`${cluster.root}/etc/kubernetes/admin.conf`));
  const token = generateBootstrapToken();
  await admin.createSecret("kube-system", bootstrapTokenSecret(token, new Date(Date.now() + 15 * 60_000)));
  return token.token;
}

Deno.test("kubeadm-sim: init, join and their refusals, as the real executable", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "kubeadm-sim-" });
  let cluster: Cluster | undefined;
  try {
    cluster = await initCluster(dir);
    const c = cluster;
    const pki = `${c.root}/etc/kubernetes/pki`;

    await t.step("init writes a PKI that openssl accepts, with the configured SANs", async () => {
      const checks: [string, string, "sslserver" | "sslclient"][] = [
        ["ca", "apiserver", "sslserver"],
        ["ca", "apiserver-kubelet-client", "sslclient"],
        ["front-proxy-ca", "front-proxy-client", "sslclient"],
        ["etcd/ca", "etcd/server", "sslserver"],
        ["etcd/ca", "etcd/peer", "sslclient"],
        ["etcd/ca", "etcd/healthcheck-client", "sslclient"],
        ["etcd/ca", "apiserver-etcd-client", "sslclient"],
      ];
      for (const [ca, leaf, purpose] of checks) {
        const result = await opensslVerify(
          await Deno.readTextFile(`${pki}/${ca}.crt`),
          await Deno.readTextFile(`${pki}/${leaf}.crt`),
          purpose,
        );
        assert.equal(result.code, 0, `${leaf}: ${result.output}`);
      }
      for (const file of ["sa.key", "sa.pub", "ca.key", "etcd/ca.key"]) await Deno.stat(`${pki}/${file}`);
      assert.equal((await Deno.stat(`${pki}/ca.key`)).mode! & 0o777, 0o600);
      const apiserver = new x509.X509Certificate(await Deno.readTextFile(`${pki}/apiserver.crt`));
      const san = apiserver.getExtension(x509.SubjectAlternativeNameExtension)!.names.toJSON();
      const values = san.map((n) => n.value);
      for (
        const want of [
          "10.9.8.7",
          "api.example.com",
          "127.0.0.1",
          "10.96.0.1",
          "control-plane-0",
          "kubernetes",
        ]
      ) {
        assert.ok(values.includes(want), `apiserver.crt SANs ${values} lack ${want}`);
      }
      for (const file of ["admin.conf", "kubelet.conf", "manifests/kube-apiserver.yaml"]) {
        await Deno.stat(`${c.root}/etc/kubernetes/${file}`);
      }
      assert.match(
        await Deno.readTextFile(`${c.root}/var/lib/kubelet/config.yaml`),
        /protectKernelDefaults: true/,
      );
      assert.match(c.init[2].stderr, /not simulated.*wait-control-plane/);
    });

    await t.step(
      "admin.conf and kubeconfig user's output are accepted by the API server serving that PKI",
      async () => {
        const admin = parseKubeconfig(await Deno.readTextFile(`${c.root}/etc/kubernetes/admin.conf`));
        assert.equal(admin.clusters[0].cluster.server, `https://${c.endpoint}`);
        const cert = new x509.X509Certificate(atob(admin.users[0].user["client-certificate-data"]!));
        assert.equal(cert.subject, "O=system:masters, CN=kubernetes-admin");
        for (
          const [name, text] of [[
            "admin.conf",
            await Deno.readTextFile(`${c.root}/etc/kubernetes/admin.conf`),
          ], [
            "kubeconfig user",
            c.init[3].stdout,
          ]]
        ) {
          using client = await clientFrom(text);
          await client.createConfigMap("default", {
            metadata: { name: `made-by-${name.replace(/\W/g, "-")}` },
          });
        }
        const users = c.server.requests.filter((r) => r.method === "POST").map((r) => r.user);
        assert.deepEqual(users, ["kubernetes-admin", "testcluster-admin"]);
      },
    );

    const token = await publishClusterInfoAndToken(c);

    await t.step("a worker joins: discovery pins the CA, ca.crt and kubelet.conf are written", async () => {
      const root = `${dir}/worker-0`;
      const config = await writeConfig(
        dir,
        "join-ok.yaml",
        joinYaml({ endpoint: c.endpoint, token, hashes: [c.caHash] }),
      );
      const run = await kubeadm(root, ["join", "-v=5", "--config", config]);
      assertOk(run, "join");
      assert.equal(await Deno.readTextFile(`${root}/etc/kubernetes/pki/ca.crt`), c.caPem);
      const kubelet = parseKubeconfig(await Deno.readTextFile(`${root}/etc/kubernetes/kubelet.conf`));
      assert.equal(kubelet.clusters[0].cluster.server, `https://${c.endpoint}`);
      const [record] = await readRecords(new SimRoot(root));
      assert.equal(record.command, "join");
      assert.equal(record.exitCode, 0);
      assert.deepEqual(record.summary?.caCertHashes, [c.caHash]);
      assert.equal(record.summary?.token, "<redacted>");
      const everything = await allText(root);
      assert.ok(
        !everything.includes(token) && !everything.includes(token.split(".")[1]),
        "the token is on disk",
      );
      assert.ok(!run.stdout.includes(token) && !run.stderr.includes(token));
    });

    const refusals: { name: string; yaml: () => string; code: number; reason: string; message: RegExp }[] = [
      {
        name: "a CA hash that does not match the cluster's CA",
        yaml: () => joinYaml({ endpoint: c.endpoint, token, hashes: [`sha256:${"ab".repeat(32)}`] }),
        code: 1,
        reason: "discovery",
        message: /none of the public keys "sha256:[0-9a-f]{64}" are pinned/,
      },
      {
        name: "a token that is not [a-z0-9]{6}.[a-z0-9]{16}",
        yaml: () => joinYaml({ endpoint: c.endpoint, token: "ABCDEF.0123456789abcdef", hashes: [c.caHash] }),
        code: 3,
        reason: "invalid",
        message:
          /discovery\.bootstrapToken\.token: Invalid value: "<redacted>": the bootstrap token is invalid/,
      },
      {
        name: "a well-formed token the cluster does not know (until the discovery timeout)",
        yaml: () =>
          joinYaml({
            endpoint: c.endpoint,
            token: "zzzzzz.0123456789abcdef",
            hashes: [c.caHash],
            timeout: "1s",
          }),
        code: 1,
        reason: "discovery",
        message: /token id "zzzzzz" is invalid for this cluster or it has expired/,
      },
      {
        name: "a join without caCertHashes",
        yaml: () => joinYaml({ endpoint: c.endpoint, token, hashes: [] }),
        code: 3,
        reason: "invalid",
        message: /using token-based discovery without caCertHashes can be unsafe/,
      },
      {
        name: "an endpoint without a port",
        yaml: () => joinYaml({ endpoint: "127.0.0.1", token, hashes: [c.caHash] }),
        code: 3,
        reason: "invalid",
        message: /apiServerEndpoints: Invalid value: "127.0.0.1": missing port in address/,
      },
      {
        name: "a control-plane join without the shared certificates",
        yaml: () =>
          joinYaml({ endpoint: c.endpoint, token, hashes: [c.caHash], controlPlane: true, nodeName: "cp-x" }),
        code: 1,
        reason: "missing-file",
        message: /shared certificates: missing .*\/etc\/kubernetes\/pki\/ca\.crt/,
      },
    ];
    for (const [i, row] of refusals.entries()) {
      await t.step(`join refuses ${row.name}`, async () => {
        const root = `${dir}/refused-${i}`;
        const config = await writeConfig(dir, `join-bad-${i}.yaml`, row.yaml());
        const run = await kubeadm(root, ["join", "--config", config]);
        assert.equal(run.code, row.code, run.stderr);
        assert.match(run.stderr, row.message);
        const [record] = await readRecords(new SimRoot(root));
        assert.equal(record.error?.reason, row.reason);
        assert.equal(record.exitCode, row.code);
        assert.ok(!(await allText(root)).includes(token.split(".")[1]), "the token is on disk");
        assert.ok(!run.stderr.includes(token.split(".")[1]));
        await assert.rejects(Deno.stat(`${root}/etc/kubernetes/kubelet.conf`), Deno.errors.NotFound);
      });
    }

    await t.step(
      "a control-plane join with the shared certificates completes the PKI from them",
      async () => {
        const root = `${dir}/control-plane-1`;
        for (const name of SHARED_FILES) {
          await Deno.mkdir(`${root}/etc/kubernetes/pki/etcd`, { recursive: true });
          await Deno.copyFile(`${pki}/${name}`, `${root}/etc/kubernetes/pki/${name}`);
        }
        const config = await writeConfig(
          dir,
          "join-cp.yaml",
          joinYaml({
            endpoint: c.endpoint,
            token,
            hashes: [c.caHash],
            controlPlane: true,
            nodeName: "control-plane-1",
          }),
        );
        assertOk(await kubeadm(root, ["join", "-v=5", "--config", config]), "control-plane join");
        const server = await Deno.readTextFile(`${root}/etc/kubernetes/pki/apiserver.crt`);
        assert.equal((await opensslVerify(c.caPem, server, "sslserver")).code, 0);
        assert.notEqual(server, await Deno.readTextFile(`${pki}/apiserver.crt`));
        using admin = await clientFrom(await Deno.readTextFile(`${root}/etc/kubernetes/admin.conf`));
        await admin.getConfigMap("kube-public", "cluster-info");
      },
    );

    await t.step("failure injection: join fails twice with the given message, then succeeds", async () => {
      const root = `${dir}/worker-flaky`;
      await injectFailures(new SimRoot(root), {
        join: { count: 2, message: "error execution phase kubelet-start: simulated", exitCode: 1 },
      });
      const config = await writeConfig(
        dir,
        "join-flaky.yaml",
        joinYaml({ endpoint: c.endpoint, token, hashes: [c.caHash], nodeName: "worker-flaky" }),
      );
      const runs = [];
      for (let i = 0; i < 3; i++) runs.push(await kubeadm(root, ["join", "-v=5", "--config", config]));
      assert.deepEqual(runs.map((r) => r.code), [1, 1, 0]);
      assert.match(runs[0].stderr, /error execution phase kubelet-start: simulated/);
      const records = await readRecords(new SimRoot(root));
      assert.deepEqual(records.map((r) => [r.exitCode, r.error?.reason]), [[1, "injected"], [1, "injected"], [
        0,
        undefined,
      ]]);
    });
  } finally {
    await cluster?.server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("kubeadm-sim: bad command lines and configurations give clear errors and non-zero exits", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "kubeadm-sim-bad-" });
  try {
    const valid = initYaml("127.0.0.1:6443");
    const rows: { name: string; args?: string[]; yaml?: string; code: number; message: RegExp }[] = [
      { name: "unknown command", args: ["reset"], code: 1, message: /unknown command "reset"/ },
      { name: "unknown flag", args: ["init", "--bogus", "x"], code: 1, message: /unknown flag: --bogus/ },
      {
        name: "missing config file",
        args: ["init", "--config", `${dir}/nope.yaml`],
        code: 1,
        message: /unable to read config/,
      },
      {
        name: "unknown kind",
        yaml: "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ResetConfiguration\n",
        code: 1,
        message: /no kind "ResetConfiguration" is registered for version "kubeadm.k8s.io\/v1beta3"/,
      },
      {
        name: "old kubeadm API",
        yaml: "apiVersion: kubeadm.k8s.io/v1beta2\nkind: InitConfiguration\n",
        code: 1,
        message: /old API spec: "kubeadm.k8s.io\/v1beta2"/,
      },
      {
        name: "a document without kind",
        yaml: "apiVersion: kubeadm.k8s.io/v1beta3\n",
        code: 1,
        message: /kind and apiVersion is mandatory/,
      },
      {
        name: "missing kubernetesVersion",
        yaml: valid.replace("kubernetesVersion: v1.27.4\n", ""),
        code: 1,
        message: /kubernetesVersion is required/,
      },
      {
        name: "a bad bootstrap token in InitConfiguration",
        yaml: valid.replace(
          "localAPIEndpoint:",
          "bootstrapTokens:\n  - token: Not.A.Token.secretpart\nlocalAPIEndpoint:",
        ),
        code: 3,
        message: /bootstrapTokens\[0\]\.token: Invalid value: "<redacted>"/,
      },
      {
        name: "a wrongly typed field",
        yaml: valid.replace("bindPort: 6443", "bindPort: high"),
        code: 1,
        message:
          /cannot unmarshal string into Go struct field InitConfiguration\.localAPIEndpoint\.bindPort of type int32/,
      },
      {
        name: "an unknown phase to skip",
        args: ["init", "--skip-phases=preflight,cert"],
        yaml: valid,
        code: 1,
        message: /unknown phase "cert"/,
      },
    ];
    for (const [i, row] of rows.entries()) {
      await t.step(row.name, async () => {
        const root = `${dir}/root-${i}`;
        const args = [...(row.args ?? ["init"])];
        if (row.yaml !== undefined) args.push("--config", await writeConfig(dir, `bad-${i}.yaml`, row.yaml));
        const run = await kubeadm(root, args);
        assert.equal(run.code, row.code, run.stderr);
        assert.match(run.stderr, row.message);
        assert.ok(!run.stderr.includes("secretpart"));
        const records = await readRecords(new SimRoot(root));
        assert.equal(records.length, 1);
        assert.equal(records[0].exitCode, row.code);
        assert.ok(!(await Deno.readTextFile(`${root}${RECORD_FILE}`)).includes("secretpart"));
      });
    }

    await t.step("no root: refused before anything is written", async () => {
      const output = await new Deno.Command(LAUNCHER, {
        args: ["init"],
        clearEnv: true,
        env: {},
        stderr: "piped",
      }).output();
      assert.equal(output.code, 1);
      assert.match(new TextDecoder().decode(output.stderr), /KUBEADM_SIM_ROOT is not set/);
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
