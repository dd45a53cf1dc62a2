import assert from "node:assert/strict";
import { KubernetesClient } from "../../src/kubernetes/client.ts";
import { parseKubeconfig, resolveConnection } from "../../src/kubernetes/kubeconfig.ts";
import { ManualClock } from "../support/manual_clock.ts";
import { startFakeApiServer } from "../support/fake_apiserver.ts";
import {
  componentsConfigMapName,
  ComponentsError,
  componentsHash,
  componentsSource,
  encodeComponents,
  type KubernetesComponent,
  NODE_VERSION_MAX_AGE_MS,
  parseComponents,
} from "../../src/joinservice/components.ts";

const HASH_A = "sha256:" + "a".repeat(64);
const HASH_B = "sha256:" + "b".repeat(64);

const components: KubernetesComponent[] = [
  {
    url: "https://example.com/cni-plugins.tgz",
    hash: HASH_A,
    installPath: "/opt/cni/bin",
    extract: true,
  },
  {
    url: "https://example.com/kubelet",
    hash: HASH_B,
    installPath: "/run/state/bin/kubelet",
    extract: false,
  },
];

const goJson =
  `[{"URL":"https://example.com/cni-plugins.tgz","Hash":"${HASH_A}","InstallPath":"/opt/cni/bin",` +
  `"Extract":true},{"URL":"https://example.com/kubelet","Hash":"${HASH_B}",` +
  `"InstallPath":"/run/state/bin/kubelet","Extract":false}]`;

Deno.test("parses the components JSON as Go writes it", () => {
  assert.deepEqual(parseComponents(goJson), components);
});

Deno.test("encodes the components with Go's key spelling, and round-trips", () => {
  assert.equal(encodeComponents(components), goJson);
  assert.deepEqual(parseComponents(encodeComponents(components)), components);
});

Deno.test("accepts keys in any case, ignores unknown keys and nulls, and null as an empty list (like Go)", () => {
  const json = JSON.stringify([
    {
      url: "data:application/octet-stream;base64,AAAA",
      HASH: HASH_A,
      installpath: "/opt/kubernetes/patches/x.yaml",
      Comment: "ignored",
      Extract: null,
    },
  ]);
  assert.deepEqual(parseComponents(json), [
    {
      url: "data:application/octet-stream;base64,AAAA",
      hash: HASH_A,
      installPath: "/opt/kubernetes/patches/x.yaml",
      extract: false,
    },
  ]);
  assert.deepEqual(parseComponents("null"), []);
  assert.deepEqual(parseComponents("[]"), []);
});

Deno.test("malformed components give errors naming the component and field", () => {
  const item = (fields: Record<string, unknown>) =>
    JSON.stringify([{ URL: "https://x", Hash: HASH_A, InstallPath: "/bin/x", Extract: false, ...fields }]);
  const cases: [string, string][] = [
    ["", "components JSON is empty"],
    ["   ", "components JSON is empty"],
    ["{", "components JSON is invalid: "],
    [`{"URL":"x"}`, "components must be a JSON array, got object"],
    [`["x"]`, "component 0: must be a JSON object, got string"],
    [`[[]]`, "component 0: must be a JSON object, got array"],
    [item({ URL: 5 }), `component 0: "URL" must be a string, got number`],
    [item({ Extract: "true" }), `component 0: "Extract" must be a boolean, got string`],
    [item({ InstallPath: ["/x"] }), `component 0: "InstallPath" must be a string, got array`],
    [item({ URL: "" }), `component 0: "URL" is missing or empty`],
    [item({ URL: null }), `component 0: "URL" is missing or empty`],
    [
      item({ Hash: "md5:abc" }),
      `component 0: "Hash" must be sha256:<64 lower-case hex digits>, got "md5:abc"`,
    ],
    [
      item({ Hash: "sha256:" + "A".repeat(64) }),
      `component 0: "Hash" must be sha256:<64 lower-case hex digits>`,
    ],
    [
      item({ Hash: "sha256:" + "a".repeat(63) }),
      `component 0: "Hash" must be sha256:<64 lower-case hex digits>`,
    ],
    [item({ Hash: undefined }), `component 0: "Hash" must be sha256:<64 lower-case hex digits>, got ""`],
    [
      item({ InstallPath: "bin/x" }),
      `component 0: "InstallPath" must be an absolute path other than "/", without "..", control characters or a name over 255 bytes, got "bin/x"`,
    ],
    // What the nodes' installer refuses (after their node lock) is refused here too.
    [item({ URL: "ftp://x/kubelet" }), `component 0: "URL" must be an https, http or data URL`],
    [item({ URL: "file:///etc/shadow" }), `component 0: "URL" must be an https, http or data URL`],
    [item({ InstallPath: "/" }), `component 0: "InstallPath" must be an absolute path other than "/"`],
    [item({ InstallPath: "/." }), `component 0: "InstallPath" must be an absolute path other than "/"`],
    [item({ InstallPath: "//" }), `component 0: "InstallPath" must be an absolute path other than "/"`],
    [
      item({ InstallPath: "/run/../../etc/cron.d/x" }),
      `component 0: "InstallPath" must be an absolute path other than "/", without "..", control characters or a name over 255 bytes, got "/run/../../etc/cron.d/x"`,
    ],
    // What the node's file system refuses (a NUL failed the copy after the node lock).
    [
      item({ InstallPath: "/opt/cni/\u0000x" }),
      `component 0: "InstallPath" must be an absolute path other than "/", without "..", control characters or a name over 255 bytes, got "/opt/cni/\\u0000x"`,
    ],
    [
      item({ InstallPath: "/opt/\nx" }),
      `component 0: "InstallPath" must be an absolute path other than "/", without "..", control characters`,
    ],
    [
      item({ InstallPath: "/opt/\u009bx" }),
      `component 0: "InstallPath" must be an absolute path other than "/", without "..", control characters`,
    ],
    [
      item({ InstallPath: `/opt/${"n".repeat(256)}` }),
      `component 0: "InstallPath" must be an absolute path other than "/", without "..", control characters`,
    ],
    [
      item({ InstallPath: `/opt/${"é".repeat(128)}` }),
      `component 0: "InstallPath" must be an absolute path other than "/", without "..", control characters`,
    ],
    [
      item({ InstallPath: `/${"a/".repeat(2048)}` }),
      `component 0: "InstallPath" must be an absolute path other than "/", without "..", control characters`,
    ],
    [
      JSON.stringify([JSON.parse(item({}))[0], { URL: "https://y", Hash: "nope", InstallPath: "/y" }]),
      `component 1: "Hash" must be sha256:<64 lower-case hex digits>, got "nope"`,
    ],
  ];
  for (const [json, message] of cases) {
    assert.throws(() => parseComponents(json), (error) => {
      assert.ok(error instanceof ComponentsError, json);
      assert.ok(error.message.startsWith(message), `${json}: ${error.message}`);
      return true;
    });
  }
  // The longest a name may be, and a deep path within PATH_MAX: accepted.
  for (const installPath of [`/opt/${"n".repeat(255)}`, `/${"a/".repeat(2000)}x`]) {
    assert.equal(parseComponents(item({ InstallPath: installPath }))[0].installPath, installPath);
  }
  // A ConfigMap's data as the API answered it, typed but unchecked: not a string.
  for (const value of [5, null, ["x"]]) {
    assert.throws(
      () => parseComponents(value as unknown as string),
      (error) => error instanceof ComponentsError && error.message === "components JSON is not a string",
    );
  }
});

Deno.test("the ConfigMap name is k8s-components- plus the hash of the concatenated component hashes", async () => {
  // Reference value: sha256 of the two hash strings concatenated, computed outside this code.
  const expected = "cb6e5d6424eb09d95d48672779cf707c2500440d8775f27db011b948086bb9c2";
  assert.equal(await componentsHash(components), `sha256:${expected}`);
  assert.equal(await componentsConfigMapName(components), `k8s-components-sha256-${expected}`);
  assert.notEqual(
    await componentsConfigMapName([...components].reverse()),
    `k8s-components-sha256-${expected}`,
  );
  assert.equal(
    await componentsConfigMapName([]),
    "k8s-components-sha256-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  );
});

Deno.test("componentsSource: each ConfigMap is read once while the NodeVersion names it, and only that one is kept", async () => {
  await using server = await startFakeApiServer();
  using client = new KubernetesClient(
    await resolveConnection(parseKubeconfig(server.kubeconfig()), { baseDir: "/" }),
  );
  const clock = new ManualClock(Date.parse("2026-11-28T12:00:00Z"));
  const source = componentsSource({ client, clock });
  const ns = "/api/v1/namespaces/kube-system";
  const nodeVersionPath = "/apis/update.edgeless.systems/v1alpha1/nodeversions/constellation-version";
  const lists = { "k8s-components-a": [components[0]], "k8s-components-b": [components[1]] };
  for (const [name, list] of Object.entries(lists)) {
    server.putObject(`${ns}/configmaps/${name}`, {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name, namespace: "kube-system" },
      data: { components: encodeComponents(list) },
    });
  }
  const pointTo = (name: string) => {
    server.putObject(nodeVersionPath, {
      apiVersion: "update.edgeless.systems/v1alpha1",
      kind: "NodeVersion",
      metadata: { name: "constellation-version" },
      spec: { kubernetesComponentsReference: name },
    });
    clock.advance(NODE_VERSION_MAX_AGE_MS + 1);
  };
  const configMapReads = () => server.requests.filter((r) => r.path.startsWith(`${ns}/configmaps/`)).length;
  for (
    const [name, reads] of [["k8s-components-a", 1], ["k8s-components-a", 1], ["k8s-components-b", 2], [
      "k8s-components-a",
      3,
    ]] as const
  ) {
    pointTo(name);
    assert.deepEqual(await source.current({}), { configMapName: name, components: lists[name] });
    assert.equal(configMapReads(), reads, `after ${name}`);
  }
});
