import { assertRejectsWithReason } from "../support/reason_error.ts";
import assert from "node:assert/strict";
import { join } from "node:path";
import { inClusterConfig } from "../../src/kubernetes/in_cluster.ts";
import { KubeconfigError } from "../../src/kubernetes/kubeconfig.ts";
import { fileTokenSource, TokenFileError } from "../../src/kubernetes/token.ts";
import { ManualClock } from "../support/manual_clock.ts";
import { createTestCa } from "../support/pki.ts";

const ca = await createTestCa("CN=kubernetes");

/** A service-account directory in a temporary folder. */
async function serviceAccountDir(files: Record<string, string>): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "serviceaccount-test-" });
  for (const [name, content] of Object.entries(files)) await Deno.writeTextFile(join(dir, name), content);
  return dir;
}

const podEnv = (vars: Record<string, string>) => (name: string) => vars[name];

Deno.test("inClusterConfig: server from the service env, CA, token and namespace from the mount", async () => {
  const dir = await serviceAccountDir({ "ca.crt": ca.certPem, token: "token-1\n", namespace: "kube-system" });
  try {
    const connection = await inClusterConfig({
      env: podEnv({ KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" }),
      serviceAccountDir: dir,
    });
    assert.equal(connection.server, "https://10.96.0.1:443");
    assert.equal(connection.caPem, ca.certPem);
    assert.equal(await connection.token?.token(), "token-1");
    assert.equal(connection.namespace, "kube-system");
    assert.equal(connection.clientCertificate, undefined);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("inClusterConfig: an IPv6 service host is bracketed; no namespace file means default", async () => {
  const dir = await serviceAccountDir({ "ca.crt": ca.certPem, token: "t" });
  try {
    const connection = await inClusterConfig({
      env: podEnv({ KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "6443" }),
      serviceAccountDir: dir,
    });
    assert.equal(connection.server, "https://[fd00::1]:6443");
    assert.equal(connection.namespace, "default");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("inClusterConfig: the rotated token is picked up after the refresh period", async () => {
  const dir = await serviceAccountDir({ "ca.crt": ca.certPem, token: "token-1" });
  const clock = new ManualClock(1_700_000_000_000);
  try {
    const connection = await inClusterConfig({
      env: podEnv({ KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" }),
      serviceAccountDir: dir,
      tokenRefreshMs: 60_000,
      clock,
    });
    await Deno.writeTextFile(join(dir, "token"), "token-2");
    clock.advance(59_000);
    assert.equal(await connection.token?.token(), "token-1", "still cached within the refresh period");
    clock.advance(2_000);
    assert.equal(await connection.token?.token(), "token-2");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("inClusterConfig: missing environment or mount gives clear errors", async () => {
  await assert.rejects(
    inClusterConfig({ env: podEnv({ KUBERNETES_SERVICE_HOST: "10.96.0.1" }) }),
    {
      name: "KubeconfigError",
      message: "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set",
    },
  );
  await assert.rejects(
    inClusterConfig({
      env: podEnv({ KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "https" }),
    }),
    { name: "KubeconfigError", message: 'KUBERNETES_SERVICE_PORT is not a port number: "https"' },
  );
  const dir = await serviceAccountDir({ "ca.crt": ca.certPem });
  try {
    await assert.rejects(
      inClusterConfig({
        env: podEnv({ KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" }),
        serviceAccountDir: dir,
      }),
      (error: unknown) =>
        error instanceof KubeconfigError && error.reason === "unreadable" &&
        error.message.startsWith("reading service-account token: ") &&
        error.message.includes(join(dir, "token")),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("inClusterConfig: a token file that is not one line of visible ASCII is refused without quoting it", async () => {
  const dir = await serviceAccountDir({ "ca.crt": ca.certPem, token: "SECRETPART1\nSECRETPART2\n" });
  try {
    await assertRejectsWithReason(
      inClusterConfig({
        env: podEnv({ KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" }),
        serviceAccountDir: dir,
      }),
      KubeconfigError,
      "malformed",
      `service-account token file ${
        join(dir, "token")
      } does not hold a bearer token (one line of visible ASCII characters)`,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("fileTokenSource: a file of two lines is refused without quoting it; a re-read keeps the previous token", async () => {
  const clock = new ManualClock(1_700_000_000_000);
  const files = new Map([["/token", "SECRETPART1\nSECRETPART2\n"]]);
  const source = fileTokenSource("/token", {
    clock,
    refreshMs: 1000,
    readTextFile: (path) => Promise.resolve(files.get(path)!),
  });
  await assertRejectsWithReason(
    source.token(),
    TokenFileError,
    "malformed",
    "reading bearer token file /token: token file /token does not hold a bearer token (one line of visible ASCII characters)",
  );
  files.set("/token", "good\n");
  assert.equal(await source.token(), "good");
  files.set("/token", "half-written\u0000");
  clock.advance(1001);
  assert.equal(await source.token(), "good", "a malformed re-read is a failed re-read");
});

Deno.test("fileTokenSource: a failed re-read keeps the previous token until the next period", async () => {
  const clock = new ManualClock(1_700_000_000_000);
  const files = new Map([["/token", "old"]]);
  let reads = 0;
  const source = fileTokenSource("/token", {
    clock,
    refreshMs: 1000,
    readTextFile: (path) => {
      reads++;
      const content = files.get(path);
      return content === undefined ? Promise.reject(new Error("gone")) : Promise.resolve(content);
    },
  });
  assert.equal(await source.token(), "old");
  files.delete("/token");
  clock.advance(1001);
  assert.equal(await source.token(), "old");
  assert.equal(reads, 2);
  assert.equal(await source.token(), "old");
  assert.equal(reads, 2, "the failed read counts as a refresh: no re-read on every request");
  files.set("/token", "new");
  clock.advance(1001);
  assert.equal(await source.token(), "new");
});

Deno.test("fileTokenSource: concurrent callers share one read; a first failure is an error", async () => {
  let reads = 0;
  const source = fileTokenSource("/token", {
    readTextFile: () => {
      reads++;
      return Promise.resolve("t\n");
    },
  });
  assert.deepEqual(await Promise.all([source.token(), source.token(), source.token()]), ["t", "t", "t"]);
  assert.equal(reads, 1);
  const empty = fileTokenSource("/empty", { readTextFile: () => Promise.resolve("\n") });
  await assert.rejects(empty.token(), {
    message: "reading bearer token file /empty: token file /empty is empty",
  });
});
