/**
 * The kubeadm runner against a recording stand-in: argv, the configuration
 * file it was given (0600, removed on every path), the audit policy, token
 * redaction, and reason-carrying errors.
 */
import assert from "node:assert/strict";
import { parseAllDocuments } from "yaml";
import { Kubeadm, KubeadmError } from "../../src/bootstrapper/kubeadm.ts";
import { type RecordingTool, recordingTool } from "../support/recording_tool.ts";

const TOKEN = "abcdef.0123456789abcdef";
const INIT = {
  kubernetesVersion: "v1.30.2",
  clusterName: "constellation",
  nodeName: "control-plane-0",
  nodeIp: "192.0.2.1",
  controlPlaneHost: "192.0.2.100",
};
const JOIN = {
  nodeName: "worker-1",
  nodeIp: "192.0.2.8",
  apiServerEndpoint: "192.0.2.1:6443",
  token: TOKEN,
  caCertHashes: ["sha256:" + "ab".repeat(32)],
};

interface Setup {
  tool: RecordingTool;
  root: string;
  kubeadm: Kubeadm;
}

async function withKubeadm(test: (setup: Setup) => Promise<void>): Promise<void> {
  const tool = await recordingTool();
  const root = await Deno.makeTempDir({ prefix: "kubeadm-root-" });
  try {
    const kubeadm = new Kubeadm({
      binary: tool.binary,
      tmpDir: `${root}/tmp`,
      kubernetesDir: `${root}/etc/kubernetes`,
      env: tool.env({ PATH: "/run/state/bin:/usr/bin" }),
      leadingArgs: ["--root", root],
    });
    await test({ tool, root, kubeadm });
  } finally {
    await tool.remove();
    await Deno.remove(root, { recursive: true });
  }
}

async function tmpEntries(root: string): Promise<string[]> {
  return (await Array.fromAsync(Deno.readDir(`${root}/tmp`))).map((entry) => entry.name);
}

Deno.test("kubeadm init: preflight, certs, hook, init without kube-proxy; one 0600 config, removed after", async () => {
  await withKubeadm(async ({ tool, root, kubeadm }) => {
    let callsAtHook = -1;
    await kubeadm.init(INIT, { afterCerts: async () => void (callsAtHook = (await tool.calls()).length) });
    const calls = await tool.calls();
    const configPath = calls[0].argv[calls[0].argv.indexOf("--config") + 1];
    assert.match(configPath, new RegExp(`^${root}/tmp/kubeadm-init\\.[0-9a-f]{16}\\.yaml$`));
    assert.deepEqual(calls.map((call) => call.argv), [
      ["--root", root, "init", "phase", "preflight", "--config", configPath, "-v=5"],
      ["--root", root, "init", "phase", "certs", "all", "--config", configPath, "-v=5"],
      [
        "--root",
        root,
        "init",
        "--skip-phases=preflight,certs,addon/kube-proxy",
        "--config",
        configPath,
        "-v=5",
      ],
    ]);
    assert.equal(callsAtHook, 2);
    for (const call of calls) {
      assert.equal(call.configMode, "600");
      assert.equal(call.env.PATH, "/run/state/bin:/usr/bin");
      assert.equal(call.env.HOME, undefined);
    }
    const kinds = parseAllDocuments(calls[0].config!).map((document) => document.toJS().kind);
    assert.deepEqual(kinds, ["InitConfiguration", "ClusterConfiguration", "KubeletConfiguration"]);
    assert.deepEqual(await tmpEntries(root), []);

    const policy = `${root}/etc/kubernetes/audit-policy.yaml`;
    assert.match(await Deno.readTextFile(policy), /kind: Policy/);
    assert.equal((await Deno.stat(policy)).mode! & 0o777, 0o644);
    assert.ok((await Deno.stat(`${root}/etc/kubernetes/manifests`)).isDirectory);
  });
});

Deno.test("kubeadm init: conformance mode keeps kube-proxy", async () => {
  await withKubeadm(async ({ tool, kubeadm }) => {
    await kubeadm.init({ ...INIT, keepKubeProxy: true });
    assert.ok((await tool.calls())[2].argv.includes("--skip-phases=preflight,certs"));
  });
});

Deno.test("kubeadm join: one run with the join config; the token is redacted from the output", async () => {
  await withKubeadm(async ({ tool, root, kubeadm }) => {
    await tool.printStdout(
      `[discovery] Trying to connect with token ${TOKEN}\nThis node has joined the cluster\n`,
    );
    await tool.printStderr(`I0101 using token ${TOKEN}\n`);
    const result = await kubeadm.join(JOIN);
    const [call, ...more] = await tool.calls();
    assert.deepEqual(more, []);
    const configPath = call.argv[call.argv.indexOf("--config") + 1];
    assert.deepEqual(call.argv, ["--root", root, "join", "--config", configPath, "-v=5"]);
    assert.match(configPath, /\/tmp\/kubeadm-join\.[0-9a-f]{16}\.yaml$/);
    assert.equal(call.configMode, "600");
    // kubeadm got the token; nobody else sees it.
    const join = parseAllDocuments(call.config!)[0].toJS();
    assert.equal(join.discovery.bootstrapToken.token, TOKEN);
    assert.equal(
      result.stdout,
      "[discovery] Trying to connect with token [REDACTED]\nThis node has joined the cluster\n",
    );
    assert.equal(result.stderr, "I0101 using token [REDACTED]\n");
    assert.deepEqual(await tmpEntries(root), []);
  });
});

Deno.test("kubeadm join failing: KubeadmError with reason, exit code and redacted output; config removed", async () => {
  await withKubeadm(async ({ tool, root, kubeadm }) => {
    await tool.printStderr(`error execution phase preflight: token ${TOKEN} is invalid for this cluster\n`);
    await tool.exitWith(1);
    await assert.rejects(kubeadm.join(JOIN), (error) => {
      assert.ok(error instanceof KubeadmError);
      assert.equal(error.reason, "failed");
      assert.equal(error.exitCode, 1);
      assert.equal(error.command, "join");
      assert.match(error.message, /kubeadm join failed \(exit code 1\): error execution phase preflight/);
      for (const text of [error.message, error.output, String(error.stack)]) {
        assert.ok(!text.includes(TOKEN), text);
        assert.ok(!text.includes("0123456789abcdef"), text);
      }
      assert.match(error.output, /token \[REDACTED\] is invalid/);
      return true;
    });
    assert.equal((await tool.calls()).length, 1);
    assert.deepEqual(await tmpEntries(root), []);
  });
});

Deno.test("kubeadm init failing in a phase stops there; a token kubeadm prints itself is redacted too", async () => {
  await withKubeadm(async ({ tool, root, kubeadm }) => {
    await tool.printStdout("kubeadm join 192.0.2.1:6443 --token zyxwvu.abcdefghijklmnop\n");
    await tool.exitWith(3, 2);
    await assert.rejects(kubeadm.init(INIT), (error) => {
      assert.ok(error instanceof KubeadmError);
      assert.equal(error.command, "init phase certs all");
      assert.equal(error.exitCode, 3);
      assert.ok(!error.output.includes("zyxwvu.abcdefghijklmnop"));
      assert.match(error.output, /--token \[REDACTED\]/);
      return true;
    });
    assert.equal((await tool.calls()).length, 2);
    assert.deepEqual(await tmpEntries(root), []);
  });
});

Deno.test("kubeadm: a failing afterCerts hook stops init and still removes the config", async () => {
  await withKubeadm(async ({ tool, root, kubeadm }) => {
    await assert.rejects(
      kubeadm.init(INIT, {
        afterCerts: () => Promise.reject(new Error("signing the kubelet certificate failed")),
      }),
      /signing the kubelet certificate failed/,
    );
    assert.equal((await tool.calls()).length, 2);
    assert.deepEqual(await tmpEntries(root), []);
  });
});

Deno.test("kubeadm: an abort kills kubeadm, rejects with reason aborted, and removes the config", async () => {
  await withKubeadm(async ({ tool, root, kubeadm }) => {
    await tool.sleep(30);
    const controller = new AbortController();
    const started = Date.now();
    const pending = kubeadm.join(JOIN, { signal: controller.signal });
    // Wait until kubeadm runs (the config exists then), then abort.
    while ((await tool.calls()).length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal((await tmpEntries(root)).length, 1);
    controller.abort();
    await assert.rejects(pending, (error) => {
      assert.ok(error instanceof KubeadmError);
      assert.equal(error.reason, "aborted");
      return true;
    });
    assert.ok(Date.now() - started < 10_000);
    assert.deepEqual(await tmpEntries(root), []);

    const before = new AbortController();
    before.abort();
    await assert.rejects(kubeadm.init(INIT, { signal: before.signal }), (error) => {
      assert.ok(error instanceof KubeadmError);
      assert.equal(error.reason, "aborted");
      return true;
    });
    assert.equal((await tool.calls()).length, 1);
  });
});

Deno.test("kubeadm: a binary that cannot run is a KubeadmError naming why, and leaves no config", async () => {
  const root = await Deno.makeTempDir({ prefix: "kubeadm-root-" });
  try {
    const kubeadm = new Kubeadm({
      binary: `${root}/no-kubeadm`,
      tmpDir: `${root}/tmp`,
      kubernetesDir: `${root}/etc/kubernetes`,
    });
    await assert.rejects(kubeadm.join(JOIN), (error) => {
      assert.ok(error instanceof KubeadmError);
      // Outside the test permission set's run list; on a node a missing binary is "not-found".
      assert.equal(error.reason, "not-permitted");
      assert.ok(!error.message.includes(TOKEN));
      return true;
    });
    assert.deepEqual(await tmpEntries(root), []);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("the configuration files a killed run left are removed at the next start; nothing else", async () => {
  await withKubeadm(async ({ tool, root, kubeadm }) => {
    assert.equal(await kubeadm.removeLeftovers(), 0, "no tmp directory yet: nothing to remove");
    await kubeadm.join(JOIN);
    await kubeadm.init(INIT);
    // The names the real runs used, as a killed run would have left them, and an atomic write's temporary.
    const used = [
      ...new Set((await tool.calls()).map((call) => call.argv[call.argv.indexOf("--config") + 1])),
    ]
      .map((path) => path.slice(path.lastIndexOf("/") + 1));
    assert.equal(used.length, 2);
    const leftovers = [...used, `.${used[0]}.0123456789abcdef.tmp`];
    const others = ["component-0123456789abcdef.download", "kubeadm-join.yaml", "notes.txt"];
    for (const name of [...leftovers, ...others]) await Deno.writeTextFile(`${root}/tmp/${name}`, "token");
    assert.equal(await kubeadm.removeLeftovers(), leftovers.length);
    assert.deepEqual((await tmpEntries(root)).sort(), others.sort());
  });
});
