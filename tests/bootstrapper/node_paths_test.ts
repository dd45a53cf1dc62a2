/** Node paths under a root: the reference §8.2 paths, exactly, for root "/". */
import assert from "node:assert/strict";
import { nodePaths } from "../../src/bootstrapper/node_paths.ts";

Deno.test("nodePaths('/'): the original's paths", () => {
  assert.deepEqual(nodePaths("/"), {
    root: "/",
    nodeState: "/run/state/constellation/node_state.json",
    kubeletKey: "/run/state/kubelet/pki/kubelet-client-key.pem",
    kubeletCert: "/run/state/kubelet/pki/kubelet-client-crt.pem",
    kubernetesDir: "/etc/kubernetes",
    pkiDir: "/etc/kubernetes/pki",
    adminConf: "/etc/kubernetes/admin.conf",
    initialPassphrase: "/run/cryptsetup-keys.d/state.key",
    binDir: "/run/state/bin",
    cniBinDir: "/opt/cni/bin",
    tmpDir: "/tmp",
    bootstrapperLog: "/var/log/bootstrapper.log",
  });
});

Deno.test("nodePaths: every path lies under another root, trailing slashes ignored", () => {
  const paths = nodePaths("/tmp/node-1/");
  assert.equal(paths.root, "/tmp/node-1");
  assert.equal(paths.adminConf, "/tmp/node-1/etc/kubernetes/admin.conf");
  for (const [name, path] of Object.entries(paths)) {
    assert.ok(path.startsWith("/tmp/node-1"), `${name}: ${path}`);
  }
});
