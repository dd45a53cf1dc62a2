import assert from "node:assert/strict";
import { join } from "node:path";
import { parseAttestationConfig } from "../../src/attestation/config.ts";
import {
  KubeadmClusterInitializer,
  type KubeadmClusterInitializerOptions,
} from "../../src/bootstrapper/cluster_init.ts";
import type { KubeadmInitConfig } from "../../src/bootstrapper/kubeadm_config.ts";
import {
  type ClusterInitParameters,
  type InitNode,
  InitNodeError,
} from "../../src/bootstrapper/initserver.ts";
import { systemClock } from "../../src/clock.ts";
import { createLogger } from "../../src/log/logger.ts";
import { componentsSource } from "../../src/joinservice/components.ts";
import { ClusterKms } from "../../src/kms/cluster_kms.ts";
import { deriveMeasurementSecret } from "../../src/kms/keys.ts";
import { KubernetesClient } from "../../src/kubernetes/client.ts";
import { loadKubeconfig } from "../../src/kubernetes/kubeconfig.ts";
import { parseKmsUri } from "../../src/kms/uri.ts";
import { type FakeApiServer, startFakeApiServer } from "../support/fake_apiserver.ts";
import { DUMMY_ATTESTATION_CONFIG, KMS_URI, MEASUREMENT_SALT } from "../support/init_fakes.ts";

const ns = "/api/v1/namespaces/kube-system";

function parameters(overrides: Partial<ClusterInitParameters> = {}): ClusterInitParameters {
  return {
    kubernetesVersion: "v1.30.2",
    clusterName: "test-cluster",
    apiServerCertSans: ["api.example"],
    serviceCidr: "",
    conformanceMode: false,
    components: [{
      url: "https://example/kubeadm",
      hash: `sha256:${"ab".repeat(32)}`,
      installPath: "/run/state/bin/kubeadm",
      extract: false,
    }],
    helmDeployments: new Uint8Array(0),
    masterSecret: parseKmsUri(KMS_URI),
    measurementSalt: MEASUREMENT_SALT,
    attestationConfig: DUMMY_ATTESTATION_CONFIG,
    clusterId: new Uint8Array(32).fill(1),
    node: { nodeName: "control.plane-0", nodeIp: "10.0.0.2", controlPlaneHost: "10.0.0.100" },
    ...overrides,
  };
}

/** An initializer whose fake kubeadm writes an admin.conf for `server` into a temp root. */
async function setup(
  server: FakeApiServer,
  options: {
    metadata?: KubeadmClusterInitializerOptions["metadata"];
    kubeadmFails?: boolean;
    adminConfServer?: string;
    apiServer?: string;
    connect?: KubeadmClusterInitializerOptions["connect"];
  } = {},
) {
  const root = await Deno.makeTempDir({ prefix: "cluster-init-" });
  const adminConf = join(root, "admin.conf");
  const kubeadmCalls: KubeadmInitConfig[] = [];
  const installed: string[] = [];
  const logs: Record<string, unknown>[] = [];
  const initializer = new KubeadmClusterInitializer({
    logger: createLogger({ level: "debug", write: (line) => logs.push(JSON.parse(line)) }),
    kubeadm: {
      async init(config) {
        kubeadmCalls.push(config);
        if (options.kubeadmFails) throw new Error("kubeadm: exit status 1: [preflight] failed");
        const kubeconfig = server.kubeconfig();
        await Deno.writeTextFile(
          adminConf,
          options.adminConfServer ? kubeconfig.replaceAll(server.url, options.adminConfServer) : kubeconfig,
        );
      },
    },
    metadata: options.metadata ?? {
      self: () => Promise.resolve({ name: "Control.Plane_0", vpcIp: "10.0.0.2" }),
      endpoint: () => Promise.resolve({ host: "10.0.0.100", port: 6443 }),
    },
    components: {
      check: (components) => {
        if (components.some((c) => c.installPath.includes("refused"))) {
          throw new Error("refused by the installer");
        }
      },
      install: (components) => {
        installed.push(...components.map((c) => c.installPath));
        return Promise.resolve();
      },
    },
    paths: { adminConf },
    apiServer: options.apiServer,
    connect: options.connect,
    apiWaitMs: 5_000,
    apiPollMs: 10,
  });
  return {
    initializer,
    kubeadmCalls,
    installed,
    adminConf,
    logs,
    async [Symbol.asyncDispose]() {
      await Deno.remove(root, { recursive: true });
    },
  };
}

Deno.test("cluster init against the fake API server", async (t) => {
  await using server = await startFakeApiServer();

  await t.step("kubeadm runs with the node's identity; the objects the services read exist", async () => {
    await using s = await setup(server);
    const node = await s.initializer.describeNode();
    assert.deepEqual(node, parameters().node);
    const { kubeconfig } = await s.initializer.initialize(parameters({ node }));
    assert.equal(new TextDecoder().decode(kubeconfig), server.kubeconfig());
    assert.deepEqual(s.installed, ["/run/state/bin/kubeadm"]);
    assert.deepEqual(s.kubeadmCalls[0], {
      kubernetesVersion: "v1.30.2",
      clusterName: "test-cluster",
      nodeName: "control.plane-0",
      nodeIp: "10.0.0.2",
      controlPlaneHost: "10.0.0.100",
      certSans: ["api.example"],
      serviceSubnet: undefined,
      keepKubeProxy: false,
    });

    // Key service: /var/config/{mastersecret,salt} from the Secret.
    const secret = server.getObject(`${ns}/secrets/constellation-mastersecret`) as {
      data: Record<string, string>;
    };
    const key = Uint8Array.fromBase64(secret.data.mastersecret);
    const salt = Uint8Array.fromBase64(secret.data.salt);
    assert.equal(key.toHex(), "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
    assert.equal(
      (await deriveMeasurementSecret(new ClusterKms(key, salt))).toHex(),
      "ea7fedd14f5a29b1b8545592fc20bfdae06918e4ff447b1a0b8e4f3356005bda",
    );

    // Join service: /var/config/{attestationConfig,measurementSalt} from join-config.
    const joinConfig = server.getObject(`${ns}/configmaps/join-config`) as {
      data: Record<string, string>;
      binaryData: Record<string, string>;
    };
    parseAttestationConfig(joinConfig.data.attestationConfig, { variant: "dummy" });
    assert.deepEqual(Uint8Array.fromBase64(joinConfig.binaryData.measurementSalt), MEASUREMENT_SALT);
    assert.deepEqual(server.getObject(`${ns}/configmaps/internal-config`)?.data ?? {}, {});

    // Join service: components through the NodeVersion, read with its own code.
    using client = new KubernetesClient(await loadKubeconfig(s.adminConf));
    const components = await componentsSource({ client, clock: systemClock }).current({});
    assert.match(components.configMapName, /^k8s-components-sha256-[0-9a-f]{64}$/);
    assert.deepEqual(components.components, parameters().components);
    const nodeVersion = server.getObject(
      "/apis/update.edgeless.systems/v1alpha1/nodeversions/constellation-version",
    ) as {
      spec: Record<string, string>;
    };
    assert.equal(nodeVersion.spec.kubernetesClusterVersion, "v1.30.2");
    const componentsMap = server.getObject(`${ns}/configmaps/${components.configMapName}`);
    assert.equal(componentsMap?.immutable, true);
  });

  await t.step(
    "idempotent: a second run leaves the objects as they are; changed content is replaced",
    async () => {
      await using s = await setup(server);
      const before = server.getObject(`${ns}/secrets/constellation-mastersecret`)?.metadata as {
        resourceVersion: string;
      };
      await s.initializer.initialize(parameters());
      const after = server.getObject(`${ns}/secrets/constellation-mastersecret`)?.metadata as {
        resourceVersion: string;
      };
      assert.equal(after.resourceVersion, before.resourceVersion);
      await s.initializer.initialize(parameters({ measurementSalt: new Uint8Array(32).fill(0xbb) }));
      const joinConfig = server.getObject(`${ns}/configmaps/join-config`) as {
        binaryData: Record<string, string>;
      };
      assert.deepEqual(
        Uint8Array.fromBase64(joinConfig.binaryData.measurementSalt),
        new Uint8Array(32).fill(0xbb),
      );
    },
  );

  await t.step(
    "the API server still starting: calls are repeated until it answers, each failure logged",
    async () => {
      await using s = await setup(server);
      server.failNext(3, "unavailable");
      await s.initializer.initialize(parameters());
      const retries = s.logs.filter((entry) => entry.msg === "reaching the API server failed; retrying");
      assert.deepEqual(retries.map((entry) => [entry.level, entry.attempts, entry.retryInMs]), [
        ["warn", 1, 10],
        ["warn", 2, 10],
        ["warn", 3, 10],
      ]);
      assert.match(String(retries[0].error), /create secrets kube-system\/constellation-mastersecret/);
      assert.ok(
        !JSON.stringify(s.logs).includes(parameters().masterSecret.key.toBase64()),
        "the master secret is in the log",
      );
    },
  );

  await t.step(
    "the API server failing briefly after the first object: every later write waits it out too",
    async () => {
      for (const mode of ["unavailable", "reset"] as const) {
        let injected = false;
        await using s = await setup(server, {
          connect: async (adminConf) => {
            const client = new KubernetesClient(await loadKubeconfig(adminConf));
            const createConfigMap = client.createConfigMap.bind(client);
            client.createConfigMap = (...args) => {
              if (!injected) server.failNext(2, mode);
              injected = true;
              return createConfigMap(...args);
            };
            return client;
          },
        });
        await s.initializer.initialize(parameters());
        const retries = s.logs.filter((entry) => entry.msg === "reaching the API server failed; retrying");
        assert.equal(retries.length, 2, `${mode}: ${JSON.stringify(retries)}`);
        assert.match(String(retries[0].error), /configmaps/, mode);
        assert.ok(server.getObject(`${ns}/configmaps/internal-config`), mode);
      }
    },
  );

  await t.step("the objects go to apiServer (the node's own), not to admin.conf's endpoint", async () => {
    // admin.conf names the control plane endpoint; nothing answers there.
    await using s = await setup(server, { adminConfServer: "https://127.0.0.1:1", apiServer: server.url });
    server.deleteObject(`${ns}/configmaps/join-config`); // left by the steps before
    const { kubeconfig } = await s.initializer.initialize(parameters({ clusterName: "own-api-server" }));
    assert.match(
      new TextDecoder().decode(kubeconfig),
      /https:\/\/127\.0\.0\.1:1/,
      "the operator's kubeconfig",
    );
    const joinConfig = server.getObject(`${ns}/configmaps/join-config`);
    assert.ok(joinConfig, "join-config was created through apiServer");
  });

  await t.step("kubeadm failing: a ClusterInitError naming kubeadm init, no objects touched", async () => {
    await using s = await setup(server, { kubeadmFails: true });
    const requests = server.requests.length;
    await assert.rejects(s.initializer.initialize(parameters()), (error: Error & { reason?: string }) => {
      assert.equal(error.name, "ClusterInitError");
      assert.equal(error.reason, "kubeadm");
      assert.match(error.message, /^kubeadm init: kubeadm: exit status 1/);
      return true;
    });
    assert.equal(server.requests.length, requests);
  });
});

Deno.test("describeNode: the node's name and addresses from the metadata API, or an InitNodeError", async (t) => {
  await using server = await startFakeApiServer();
  const rows: {
    name: string;
    metadata: KubeadmClusterInitializerOptions["metadata"];
    expected: InitNode | { reason: string; message: RegExp };
  }[] = [
    {
      name: "an endpoint on another port: host:port; no endpoint API: none",
      metadata: {
        self: () => Promise.resolve({ name: "worker_1", vpcIp: "10.0.0.3" }),
        endpoint: () => Promise.resolve({ host: "fd00::1", port: 7443 }),
      },
      expected: { nodeName: "worker-1", nodeIp: "10.0.0.3", controlPlaneHost: "[fd00::1]:7443" },
    },
    {
      name: "no endpoint on this platform",
      metadata: { self: () => Promise.resolve({ name: "cp0", vpcIp: "10.0.0.4" }) },
      expected: { nodeName: "cp0", nodeIp: "10.0.0.4", controlPlaneHost: undefined },
    },
    {
      name: "a name Kubernetes cannot take: node-name",
      metadata: { self: () => Promise.resolve({ name: "Bad Name!", vpcIp: "10.0.0.5" }) },
      expected: { reason: "node-name", message: /^generating node name: .*"Bad Name!"/ },
    },
    {
      name: "the metadata API failing: metadata, naming the call",
      metadata: { self: () => Promise.reject(new Error("GET /self: 503 Service Unavailable")) },
      expected: { reason: "metadata", message: /^retrieving own instance metadata: GET \/self: 503/ },
    },
    {
      name: "the endpoint failing: metadata, naming the call",
      metadata: {
        self: () => Promise.resolve({ name: "cp0", vpcIp: "10.0.0.4" }),
        endpoint: () => Promise.reject(new Error("timed out")),
      },
      expected: { reason: "metadata", message: /^retrieving the API server endpoint: timed out$/ },
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      await using s = await setup(server, { metadata: row.metadata });
      const result = await s.initializer.describeNode().catch((error) => error);
      if ("reason" in row.expected) {
        assert.ok(result instanceof InitNodeError, String(result));
        assert.equal(result.reason, row.expected.reason);
        assert.match(result.message, row.expected.message);
      } else {
        assert.deepEqual(result, row.expected);
      }
    });
  }
});

Deno.test("checkComponents: the installer's check, before the lock", async () => {
  await using server = await startFakeApiServer();
  await using s = await setup(server);
  const component = parameters().components[0];
  s.initializer.checkComponents([component]);
  assert.throws(
    () => s.initializer.checkComponents([{ ...component, installPath: "/run/refused" }]),
    /refused by the installer/,
  );
});
