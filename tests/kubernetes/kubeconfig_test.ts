import { assertRejectsWithReason } from "../support/reason_error.ts";
import assert from "node:assert/strict";
import { join } from "node:path";
import process from "node:process";
import { stringify } from "yaml";
import {
  type Kubeconfig,
  KubeconfigError,
  loadKubeconfig,
  parseKubeconfig,
  resolveConnection,
  selectDiscoveryCluster,
} from "../../src/kubernetes/kubeconfig.ts";
import { createTestCa, issueCert, type TestCa, type TestCert } from "../support/pki.ts";

const ca: TestCa = await createTestCa("CN=kubernetes");
const otherCa: TestCa = await createTestCa("CN=other");
const admin: TestCert = await issueCert(ca, {
  subject: "CN=kubernetes-admin, O=system:masters",
  usages: ["clientAuth"],
});
const b64 = (text: string) => btoa(text);

/** A kubeadm-like admin.conf, with overrides per section. */
function adminConf(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{
      name: "kubernetes",
      cluster: { server: "https://10.0.0.1:6443", "certificate-authority-data": b64(ca.certPem) },
    }],
    contexts: [{
      name: "kubernetes-admin@kubernetes",
      context: { cluster: "kubernetes", user: "kubernetes-admin" },
    }],
    "current-context": "kubernetes-admin@kubernetes",
    users: [{
      name: "kubernetes-admin",
      user: { "client-certificate-data": b64(admin.certPem), "client-key-data": b64(admin.keyPem) },
    }],
    ...overrides,
  };
}

async function resolve(document: Record<string, unknown>, baseDir = "/nonexistent") {
  return await resolveConnection(parseKubeconfig(stringify(document)), {
    baseDir,
    readTextFile: (path) => Promise.reject(new Error(`unexpected read of ${path}`)),
  });
}

function assertKubeconfigError(
  promise: Promise<unknown>,
  reason: KubeconfigError["reason"],
  message: string,
): Promise<void> {
  return assertRejectsWithReason(promise, KubeconfigError, reason, message);
}

Deno.test("kubeconfig: *-data fields resolve to server, CA, client certificate and key", async () => {
  const connection = await resolve(adminConf());
  assert.equal(connection.server, "https://10.0.0.1:6443");
  assert.equal(connection.caPem, ca.certPem);
  assert.deepEqual(connection.clientCertificate, { certPem: admin.certPem, keyPem: admin.keyPem });
  assert.equal(connection.token, undefined);
  assert.equal(connection.namespace, "default");
});

Deno.test("kubeconfig: JSON is accepted as YAML, trailing slash of server dropped, context namespace kept", async () => {
  const document = adminConf({
    contexts: [{
      name: "ctx",
      context: { cluster: "kubernetes", user: "kubernetes-admin", namespace: "kube-system" },
    }],
    "current-context": "ctx",
  });
  (document.clusters as { cluster: { server: string } }[])[0].cluster.server = "https://api.example:6443/";
  const connection = await resolveConnection(parseKubeconfig(JSON.stringify(document)), { baseDir: "/" });
  assert.equal(connection.server, "https://api.example:6443");
  assert.equal(connection.namespace, "kube-system");
});

Deno.test("kubeconfig: file forms are resolved relative to the kubeconfig and read through the given reader", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kubeconfig-test-" });
  try {
    await Deno.mkdir(join(dir, "pki"));
    await Deno.writeTextFile(join(dir, "pki", "ca.crt"), ca.certPem);
    await Deno.writeTextFile(join(dir, "pki", "admin.crt"), admin.certPem);
    const keyPath = join(dir, "admin.key");
    await Deno.writeTextFile(keyPath, admin.keyPem);
    const document = adminConf({
      clusters: [{
        name: "kubernetes",
        cluster: { server: "https://10.0.0.1:6443", "certificate-authority": "pki/ca.crt" },
      }],
      users: [{
        name: "kubernetes-admin",
        user: { "client-certificate": "pki/admin.crt", "client-key": keyPath },
      }],
    });
    const kubeconfigPath = join(dir, "admin.conf");
    await Deno.writeTextFile(kubeconfigPath, stringify(document));

    const read: string[] = [];
    const connection = await loadKubeconfig(kubeconfigPath, {
      readTextFile: (path) => {
        read.push(path);
        return Deno.readTextFile(path);
      },
    });
    assert.deepEqual(read, [
      kubeconfigPath,
      join(dir, "pki", "ca.crt"),
      join(dir, "pki", "admin.crt"),
      keyPath,
    ]);
    assert.equal(connection.caPem, ca.certPem);
    assert.deepEqual(connection.clientCertificate, { certPem: admin.certPem, keyPem: admin.keyPem });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("kubeconfig: fields written without a value count as absent", async () => {
  const text = stringify(adminConf());
  const withNulls = text.replace("client-key-data:", "exec:\n      token:\n      client-key-data:");
  assert.notEqual(withNulls, text);
  assert.deepEqual(parseKubeconfig(withNulls).users[0].user.exec, undefined);
  const connection = await resolveConnection(parseKubeconfig(withNulls), { baseDir: "/" });
  assert.equal(connection.token, undefined);
  assert.deepEqual(connection.clientCertificate, { certPem: admin.certPem, keyPem: admin.keyPem });
});

Deno.test("kubeconfig: *-data wins over the file form, as in client-go", async () => {
  const document = adminConf();
  const cluster = (document.clusters as { cluster: Record<string, unknown> }[])[0].cluster;
  cluster["certificate-authority"] = "/does/not/exist";
  const connection = await resolve(document);
  assert.equal(connection.caPem, ca.certPem);
});

Deno.test("kubeconfig: an unreadable referenced file is an 'unreadable' error naming the field", async () => {
  const document = adminConf({
    clusters: [{
      name: "kubernetes",
      cluster: { server: "https://10.0.0.1:6443", "certificate-authority": "ca.crt" },
    }],
  });
  await assertKubeconfigError(
    resolve(document, "/etc/k8s"),
    "unreadable",
    'reading certificate-authority of cluster "kubernetes": unexpected read of /etc/k8s/ca.crt',
  );
});

Deno.test("kubeconfig: inline bearer token", async () => {
  const connection = await resolve(
    adminConf({ users: [{ name: "kubernetes-admin", user: { token: "abcdef.0123456789abcdef" } }] }),
  );
  assert.equal(connection.clientCertificate, undefined);
  assert.equal(await connection.token?.token(), "abcdef.0123456789abcdef");
});

Deno.test("kubeconfig: tokenFile is read relative to the kubeconfig and wins over an inline token", async () => {
  const files: Record<string, string> = { "/etc/kubernetes/token": "file-token\n" };
  const connection = await resolveConnection(
    parseKubeconfig(stringify(adminConf({
      users: [{ name: "kubernetes-admin", user: { token: "inline-token", tokenFile: "token" } }],
    }))),
    { baseDir: "/etc/kubernetes", readTextFile: (path) => Promise.resolve(files[path]) },
  );
  assert.equal(await connection.token?.token(), "file-token");
});

Deno.test("kubeconfig: an empty tokenFile is 'missing', as an empty service-account token", async () => {
  await assertKubeconfigError(
    resolveConnection(
      parseKubeconfig(stringify(adminConf({
        users: [{ name: "kubernetes-admin", user: { tokenFile: "/etc/kubernetes/token" } }],
      }))),
      { baseDir: "/", readTextFile: () => Promise.resolve(" \n") },
    ),
    "missing",
    'tokenFile of user "kubernetes-admin": reading bearer token file /etc/kubernetes/token: ' +
      "token file /etc/kubernetes/token is empty",
  );
});

Deno.test("kubeconfig: --context overrides current-context", async () => {
  const document = adminConf({
    clusters: [
      { name: "kubernetes", cluster: { server: "https://10.0.0.1:6443" } },
      { name: "staging", cluster: { server: "https://10.0.0.2:6443" } },
    ],
    contexts: [
      { name: "kubernetes-admin@kubernetes", context: { cluster: "kubernetes", user: "kubernetes-admin" } },
      { name: "staging", context: { cluster: "staging" } },
    ],
  });
  const connection = await resolveConnection(parseKubeconfig(stringify(document)), {
    baseDir: "/",
    context: "staging",
  });
  assert.equal(connection.server, "https://10.0.0.2:6443");
  assert.equal(connection.clientCertificate, undefined);
});

Deno.test("kubeconfig: missing pieces give exact errors", async () => {
  await assertKubeconfigError(
    resolve(adminConf({ "current-context": undefined })),
    "missing",
    "kubeconfig has no current-context",
  );
  await assertKubeconfigError(
    resolve(adminConf({ "current-context": "nope" })),
    "missing",
    'context "nope" not found in kubeconfig',
  );
  await assertKubeconfigError(
    resolve(
      adminConf({
        contexts: [{
          name: "kubernetes-admin@kubernetes",
          context: { cluster: "gone", user: "kubernetes-admin" },
        }],
      }),
    ),
    "missing",
    'cluster "gone" of context "kubernetes-admin@kubernetes" not found in kubeconfig',
  );
  await assertKubeconfigError(
    resolve(
      adminConf({
        clusters: [{ name: "kubernetes", cluster: { "certificate-authority-data": b64(ca.certPem) } }],
      }),
    ),
    "missing",
    'cluster "kubernetes" has no server',
  );
  await assertKubeconfigError(
    resolve(adminConf({ users: [] })),
    "missing",
    'user "kubernetes-admin" of context "kubernetes-admin@kubernetes" not found in kubeconfig',
  );
  await assertKubeconfigError(
    resolve(
      adminConf({
        users: [{ name: "kubernetes-admin", user: { "client-certificate-data": b64(admin.certPem) } }],
      }),
    ),
    "missing",
    'user "kubernetes-admin" has a client certificate but no client key',
  );
  await assertKubeconfigError(
    resolve(
      adminConf({ users: [{ name: "kubernetes-admin", user: { "client-key-data": b64(admin.keyPem) } }] }),
    ),
    "missing",
    'user "kubernetes-admin" has a client key but no client certificate',
  );
});

Deno.test("kubeconfig: a server URL's query and fragment are never repeated", async (t) => {
  const secret = "S3CRETQ";
  const what = 'server of cluster "kubernetes"';
  const rows: { name: string; server: string; reason: KubeconfigError["reason"]; want: string }[] = [
    {
      name: "a query",
      server: `https://127.0.0.1:6443/?token=${secret}`,
      reason: "malformed",
      want: `${what} has a query or fragment (not repeated here): "https://127.0.0.1:6443/"`,
    },
    {
      name: "a fragment",
      server: `https://127.0.0.1:6443/api#${secret}`,
      reason: "malformed",
      want: `${what} has a query or fragment (not repeated here): "https://127.0.0.1:6443/api"`,
    },
    {
      name: "http with a query",
      server: `http://127.0.0.1:6443/?token=${secret}`,
      reason: "unsupported",
      want: `${what} is not https: "http://127.0.0.1:6443/"`,
    },
    {
      name: "not a URL, with a query",
      server: `https://[bad/?token=${secret}`,
      reason: "malformed",
      want: `${what} is not a URL: "https://[bad/"`,
    },
    {
      name: "an escape sequence before the query: escaped",
      server: `https://127.0.0.1:6443/\x1b[2J?token=${secret}`,
      reason: "malformed",
      want: `${what} has a query or fragment (not repeated here): "https://127.0.0.1:6443/\\u001b[2J"`,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      await assertKubeconfigError(
        resolve(adminConf({ clusters: [{ name: "kubernetes", cluster: { server: row.server } }] })),
        row.reason,
        row.want,
      );
    });
  }
});

Deno.test("kubeconfig: unsupported and malformed entries give clear errors", async () => {
  await assertKubeconfigError(
    resolve(adminConf({ users: [{ name: "kubernetes-admin", user: { exec: { command: "aws" } } }] })),
    "unsupported",
    'user "kubernetes-admin" uses exec credentials, which are not supported',
  );
  await assertKubeconfigError(
    resolve(adminConf({ clusters: [{ name: "kubernetes", cluster: { server: "http://10.0.0.1:8080" } }] })),
    "unsupported",
    'server of cluster "kubernetes" is not https: "http://10.0.0.1:8080"',
  );
  // Impersonation is not applied, so it is refused: the calls would run as the underlying identity.
  for (const field of ["as", "as-uid", "as-groups", "as-user-extra"]) {
    await assertKubeconfigError(
      resolve(
        adminConf({
          users: [{
            name: "kubernetes-admin",
            user: {
              "client-certificate-data": b64(admin.certPem),
              "client-key-data": b64(admin.keyPem),
              [field]: "x",
            },
          }],
        }),
      ),
      "unsupported",
      `user "kubernetes-admin" uses impersonation (${field}), which is not supported`,
    );
  }
  // A password in the server URL is refused and never repeated (the messages are matched whole).
  for (const server of ["https://admin:hunter2@10.0.0.1:6443", "https://admin:hunter2@[bad"]) {
    await assertKubeconfigError(
      resolve(adminConf({ clusters: [{ name: "kubernetes", cluster: { server } }] })),
      server.endsWith("[bad") ? "malformed" : "unsupported",
      server.endsWith("[bad")
        ? 'server of cluster "kubernetes" is not a URL'
        : 'server of cluster "kubernetes" carries user information, which is not supported',
    );
  }
  await assertKubeconfigError(
    resolve(
      adminConf({
        clusters: [{
          name: "kubernetes",
          cluster: { server: "https://x", "insecure-skip-tls-verify": true },
        }],
      }),
    ),
    "unsupported",
    'cluster "kubernetes" sets insecure-skip-tls-verify, which is not supported',
  );
  await assertKubeconfigError(
    resolve(
      adminConf({
        clusters: [{
          name: "kubernetes",
          cluster: { server: "https://x", "certificate-authority-data": "not base64!" },
        }],
      }),
    ),
    "malformed",
    'certificate-authority-data of cluster "kubernetes" is not valid base64',
  );
  await assertKubeconfigError(
    resolve(
      adminConf({
        users: [{
          name: "kubernetes-admin",
          user: { "client-certificate-data": b64(admin.certPem), "client-key-data": b64(admin.certPem) },
        }],
      }),
    ),
    "malformed",
    'client key of user "kubernetes-admin" holds no PEM PRIVATE KEY',
  );
  assert.throws(
    () =>
      parseKubeconfig(
        stringify(adminConf({ clusters: [{ name: "a", cluster: {} }, { name: "a", cluster: {} }] })),
      ),
    { name: "KubeconfigError", message: 'kubeconfig lists cluster "a" twice' },
  );
  assert.throws(
    () => parseKubeconfig(stringify(adminConf({ clusters: [{ name: "a", cluster: { server: 6443 } }] }))),
    { name: "KubeconfigError", message: 'server of cluster "a" is not a string' },
  );
  assert.throws(() => parseKubeconfig("- just\n- a list\n"), { message: "kubeconfig is not a mapping" });
});

Deno.test("kubeconfig: a YAML error does not quote the source, which may hold a token", async (t) => {
  const secret = "s3cr3t-t0k3n-value";
  const rows: [string, string, RegExp][] = [
    ["a broken flow mapping", `users:\n- name: a\n  user: {token: ${secret}\n    broken: [`, /.+/],
    // The yaml library's first message line itself quotes these.
    ["a tag with an unknown handle", `users:\n- name: a\n  user:\n    token: !e!${secret}\n`, /line 4/],
    ["a block scalar header", `users:\n- name: a\n  user:\n    token: |${secret}\n      x\n`, /line 4/],
    ["a YAML version", `%YAML 1.${secret}\n---\nusers: []\n`, /line 1/],
  ];
  for (const [name, text, position] of rows) {
    await t.step(name, () => {
      assert.throws(() => parseKubeconfig(text), (error: unknown) => {
        assert.ok(error instanceof KubeconfigError);
        assert.equal(error.reason, "malformed");
        assert.match(error.message, /^kubeconfig is not valid YAML at line \d+, column \d+ \([A-Z_]+\)$/);
        assert.match(error.message, position);
        assert.ok(!error.message.includes(secret), error.message);
        return true;
      });
    });
  }
});

Deno.test("kubeconfig: YAML warnings are not printed, since they quote the source line", () => {
  const warnings: unknown[] = [];
  const emitWarning = process.emitWarning;
  const consoleWarn = console.warn;
  // The yaml library warns through process.emitWarning, or console.warn where there is no process.
  process.emitWarning = ((warning: unknown) => warnings.push(warning)) as typeof process.emitWarning;
  console.warn = (...args: unknown[]) => warnings.push(args);
  try {
    const config = parseKubeconfig(
      "%FOO s3cr3t\n---\nusers:\n- name: a\n  user: {token: !s3cr3t-t0k3n-value x}\n",
    );
    assert.equal(config.users[0].user.token, "x", "an unknown tag is ignored, as before");
  } finally {
    process.emitWarning = emitWarning;
    console.warn = consoleWarn;
  }
  assert.deepEqual(warnings, []);
});

Deno.test("kubeconfig: a token that is not one line of visible ASCII is refused without quoting it", async (t) => {
  const rows: [string, string][] = [
    ["a newline inside", "sha256~SECRETTOKENPART1\nSECRETPART2"],
    ["a carriage return inside", "SECRETTOKENPART1\rSECRETPART2"],
    ["a space inside", "SECRETTOKENPART1 SECRETPART2"],
    ["a Latin-1 letter", "SECRETTOKENPART1\u00e9SECRETPART2"],
    ["a character beyond Latin-1", "SECRETTOKENPART1\u20acSECRETPART2"],
  ];
  for (const [name, token] of rows) {
    await t.step(`inline, ${name}`, async () => {
      const files: Record<string, string> = {
        "/etc/kubernetes/admin.conf": stringify(
          adminConf({ users: [{ name: "kubernetes-admin", user: { token } }] }),
        ),
      };
      await assertKubeconfigError(
        loadKubeconfig("/etc/kubernetes/admin.conf", {
          readTextFile: (path) => Promise.resolve(files[path]),
        }),
        "malformed",
        '/etc/kubernetes/admin.conf: token of user "kubernetes-admin" is not a bearer token (one line of visible ASCII characters)',
      );
    });
    await t.step(`tokenFile, ${name}`, async () => {
      const files: Record<string, string> = { "/etc/kubernetes/token": `${token}\n` };
      await assertKubeconfigError(
        resolveConnection(
          parseKubeconfig(stringify(adminConf({
            users: [{ name: "kubernetes-admin", user: { tokenFile: "token" } }],
          }))),
          { baseDir: "/etc/kubernetes", readTextFile: (path) => Promise.resolve(files[path]) },
        ),
        "malformed",
        'tokenFile of user "kubernetes-admin": reading bearer token file /etc/kubernetes/token: ' +
          "token file /etc/kubernetes/token does not hold a bearer token (one line of visible ASCII characters)",
      );
    });
  }
});

function discoveryConfig(overrides: Partial<Kubeconfig>): Kubeconfig {
  return { clusters: [], contexts: [], users: [], "current-context": "", ...overrides };
}

Deno.test('selectDiscoveryCluster: the cluster named "" wins over the current context\'s', () => {
  const config = discoveryConfig({
    clusters: [
      {
        name: "kubernetes",
        cluster: { server: "https://a", "certificate-authority-data": b64(otherCa.certPem) },
      },
      { name: "", cluster: { server: "https://b", "certificate-authority-data": b64(ca.certPem) } },
    ],
    contexts: [{ name: "ctx", context: { cluster: "kubernetes" } }],
    "current-context": "ctx",
  });
  assert.deepEqual(selectDiscoveryCluster(config), [ca.certPem]);
});

Deno.test("selectDiscoveryCluster: otherwise the current context's cluster, every certificate in order", async () => {
  const text = stringify(adminConf({
    clusters: [
      { name: "other", cluster: { server: "https://a", "certificate-authority-data": b64(admin.certPem) } },
      {
        name: "kubernetes",
        cluster: { server: "https://b", "certificate-authority-data": b64(ca.certPem + otherCa.certPem) },
      },
    ],
  }));
  assert.deepEqual(selectDiscoveryCluster(parseKubeconfig(text)), [ca.certPem, otherCa.certPem]);
  // The same certificates the kubeconfig connection trusts.
  const connection = await resolveConnection(parseKubeconfig(text), { baseDir: "/" });
  assert.equal(connection.caPem, ca.certPem + otherCa.certPem);
});

Deno.test("selectDiscoveryCluster: non-certificate PEM blocks and blocks with headers are skipped", () => {
  const withHeaders = ca.certPem.replace(
    "-----BEGIN CERTIFICATE-----\n",
    "-----BEGIN CERTIFICATE-----\nX-Note: skipped\n\n",
  );
  const data = `junk\n${admin.keyPem}${withHeaders}${otherCa.certPem}`;
  const config = discoveryConfig({
    clusters: [{ name: "", cluster: { "certificate-authority-data": b64(data) } }],
  });
  assert.deepEqual(selectDiscoveryCluster(config), [otherCa.certPem]);
});

Deno.test("selectDiscoveryCluster: errors as kubeadm's rule has them", () => {
  assert.throws(
    () =>
      selectDiscoveryCluster(discoveryConfig({
        clusters: [{ name: "kubernetes", cluster: { "certificate-authority-data": b64(ca.certPem) } }],
        "current-context": "missing",
      })),
    { name: "KubeconfigError", message: "couldn't get cluster config from kubeconfig file" },
  );
  assert.throws(
    () =>
      selectDiscoveryCluster(discoveryConfig({
        clusters: [{
          name: "kubernetes",
          cluster: { "certificate-authority": "/etc/kubernetes/pki/ca.crt" },
        }],
        contexts: [{ name: "ctx", context: { cluster: "kubernetes" } }],
        "current-context": "ctx",
      })),
    {
      name: "KubeconfigError",
      message:
        'certificate-authority-data of cluster "kubernetes" does not contain any valid RSA or ECDSA certificates',
    },
  );
  const corrupt = "-----BEGIN CERTIFICATE-----\nMAMBAQE=\n-----END CERTIFICATE-----\n";
  assert.throws(
    () =>
      selectDiscoveryCluster(
        discoveryConfig({
          clusters: [{ name: "", cluster: { "certificate-authority-data": b64(corrupt) } }],
        }),
      ),
    (error: unknown) =>
      error instanceof KubeconfigError && error.reason === "malformed" &&
      error.message.startsWith('certificate-authority-data of cluster "" holds an invalid certificate: '),
  );
});

Deno.test("loadKubeconfig names the file in every error", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kubeconfig-" });
  try {
    const path = `${dir}/admin.conf`;
    await Deno.writeTextFile(path, "- just\n- a list\n");
    await assert.rejects(loadKubeconfig(path), { message: `${path}: kubeconfig is not a mapping` });
    await assert.rejects(loadKubeconfig(`${dir}/absent`), (error: Error) => {
      assert.match(error.message, new RegExp(`^reading kubeconfig ${dir}/absent: `));
      return true;
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
