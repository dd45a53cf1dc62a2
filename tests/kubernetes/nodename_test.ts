import assert from "node:assert/strict";
import {
  k8sCompliantHostname,
  NodeNameError,
  nodeNameFromCommonName,
} from "../../src/kubernetes/nodename.ts";

Deno.test("k8sCompliantHostname normalizes the original's cases", () => {
  assert.equal(k8sCompliantHostname("test"), "test");
  assert.equal(k8sCompliantHostname("TEST"), "test");
  assert.equal(k8sCompliantHostname("test_node"), "test-node");
});

Deno.test("k8sCompliantHostname accepts names with dots (deliberate fix)", () => {
  assert.equal(k8sCompliantHostname("node.example"), "node.example");
  assert.equal(k8sCompliantHostname("Worker_1.Cluster.Local"), "worker-1.cluster.local");
  assert.equal(k8sCompliantHostname("10.0.0.1"), "10.0.0.1");
});

Deno.test("k8sCompliantHostname rejects names that are not DNS-1123 subdomains", () => {
  const cases: [string, NodeNameError["reason"], string][] = [
    ["", "empty", `failed to generate a Kubernetes compliant hostname for "": the name is empty`],
    ["test_node_", "invalid", `failed to generate a Kubernetes compliant hostname for "test_node_": `],
    ["-node", "invalid", "must consist of dot-separated labels"],
    ["node..example", "invalid", "must consist of dot-separated labels"],
    ["node.", "invalid", "must consist of dot-separated labels"],
    [".node", "invalid", "must consist of dot-separated labels"],
    ["node-.example", "invalid", "must consist of dot-separated labels"],
    ["node/1", "invalid", `character "/" is not allowed`],
    ["nöde", "invalid", `character "ö" is not allowed`],
    ["a".repeat(254), "too-long", "254 characters is longer than 253"],
  ];
  for (const [name, reason, message] of cases) {
    assert.throws(() => k8sCompliantHostname(name), (error) => {
      assert.ok(error instanceof NodeNameError, name);
      assert.equal(error.reason, reason, name);
      assert.ok(error.message.includes(message), `${name}: ${error.message}`);
      return true;
    });
  }
  assert.equal(k8sCompliantHostname("a".repeat(253)), "a".repeat(253));
});

Deno.test("nodeNameFromCommonName strips the system:node: prefix", () => {
  assert.equal(nodeNameFromCommonName("system:node:worker-1"), "worker-1");
  assert.throws(
    () => nodeNameFromCommonName("worker-1"),
    new NodeNameError(
      "missing-prefix",
      `certificate request must have common name prefix "system:node:" but is "worker-1"`,
    ),
  );
  assert.throws(
    () => nodeNameFromCommonName("system:node:"),
    new NodeNameError("empty", `certificate request common name "system:node:" does not name a node`),
  );
});
