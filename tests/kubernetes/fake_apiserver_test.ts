/**
 * The fake API server answers like kube-apiserver where our client does not
 * look: raw HTTP against it, checking status codes and `Status` bodies.
 */
import assert from "node:assert/strict";
import { type FakeApiServer, startFakeApiServer } from "../support/fake_apiserver.ts";

type Json = Record<string, unknown>;

async function raw(
  server: FakeApiServer,
  method: string,
  path: string,
  body?: unknown,
  options: { contentType?: string; certificate?: boolean } = {},
): Promise<{ status: number; json: Json }> {
  const tls = options.certificate === false ? {} : { cert: server.clientCertPem, key: server.clientKeyPem };
  using client = Deno.createHttpClient({ caCerts: [server.caPem], ...tls });
  const headers: Record<string, string> = {};
  if (body !== undefined) headers["content-type"] = options.contentType ?? "application/json";
  const response = await fetch(server.url + path, {
    method,
    headers,
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    client,
  });
  return { status: response.status, json: await response.json() };
}

const secrets = "/api/v1/namespaces/default/secrets";

Deno.test("fake apiserver: unknown paths and unserved verbs are 404 with a Status body", async () => {
  await using server = await startFakeApiServer();
  const notFound = {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message: "the server could not find the requested resource",
    reason: "NotFound",
    details: {},
    code: 404,
  };
  for (
    const [method, path] of [
      ["GET", "/api/v1/nodes/n"],
      ["PUT", secrets],
      ["GET", "/apis/update.edgeless.systems/v1alpha1/namespaces/default/joiningnodes/x"],
      ["POST", `${secrets}/x`],
      ["GET", "/healthz"],
    ]
  ) {
    const { status, json } = await raw(server, method, path);
    assert.equal(status, 404, `${method} ${path}`);
    assert.deepEqual(json, notFound);
  }
});

Deno.test("fake apiserver: without certificate or token, 401 Unauthorized as the real server", async () => {
  await using server = await startFakeApiServer({ requireClientCertificate: false });
  const { status, json } = await raw(server, "GET", `${secrets}/x`, undefined, { certificate: false });
  assert.equal(status, 401);
  assert.deepEqual(json, {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message: "Unauthorized",
    reason: "Unauthorized",
    code: 401,
  });
});

Deno.test("fake apiserver: Secret stringData becomes base64 data, type defaults to Opaque, bad base64 is 400", async () => {
  await using server = await startFakeApiServer();
  const created = await raw(server, "POST", secrets, {
    metadata: { name: "s" },
    stringData: { key: "välue" },
  });
  assert.equal(created.status, 201);
  assert.deepEqual(created.json.data, {
    key: btoa(String.fromCharCode(...new TextEncoder().encode("välue"))),
  });
  assert.equal(created.json.stringData, undefined);
  assert.equal(created.json.type, "Opaque");
  const bad = await raw(server, "POST", secrets, { metadata: { name: "t" }, data: { key: "not base64!" } });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.reason, "BadRequest");
});

Deno.test("fake apiserver: a Secret's stringData up to the real 1 MiB; labels, annotations and data only as string maps", async (t) => {
  await using server = await startFakeApiServer();
  const large = await raw(server, "POST", secrets, {
    metadata: { name: "large" },
    stringData: { k: "x".repeat(900_000) },
  });
  assert.equal(large.status, 201, JSON.stringify(large.json).slice(0, 200));
  const configMaps = "/api/v1/namespaces/default/configmaps";
  for (
    const [name, object] of [
      ["labels not an object", { metadata: { name: "a", labels: "oops" } }],
      ["a label value not a string", { metadata: { name: "b", labels: { x: 5 } } }],
      ["an annotation value not a string", { metadata: { name: "c", annotations: { x: {} } } }],
      ["a data value not a string", { metadata: { name: "d" }, data: { a: 3 } }],
      ["data not an object", { metadata: { name: "e" }, data: ["a"] }],
    ] as const
  ) {
    await t.step(name, async () => {
      const refused = await raw(server, "POST", configMaps, object);
      assert.equal(refused.status, 400, JSON.stringify(refused.json));
      assert.equal(refused.json.reason, "BadRequest");
    });
  }
  await t.step('a label selector matches own labels only (not "constructor")', async () => {
    assert.equal((await raw(server, "POST", configMaps, { metadata: { name: "plain" } })).status, 201);
    const selected = await raw(server, "GET", `${configMaps}?labelSelector=constructor`);
    assert.equal(selected.status, 200);
    assert.deepEqual(selected.json.items, []);
  });
});

Deno.test("fake apiserver: validation errors are 422 Invalid; a missing namespace is 404", async () => {
  await using server = await startFakeApiServer();
  const badName = await raw(server, "POST", secrets, { metadata: { name: "Bad_Name" } });
  assert.equal(badName.status, 422);
  assert.equal(badName.json.reason, "Invalid");
  assert.match(
    String(badName.json.message),
    /^Secret "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": /,
  );
  const noName = await raw(server, "POST", secrets, { metadata: {} });
  assert.equal(
    noName.json.message,
    'Secret "" is invalid: metadata.name: Required value: name or generateName is required',
  );
  const badKey = await raw(server, "POST", "/api/v1/namespaces/default/configmaps", {
    metadata: { name: "c" },
    data: { "a b": "1" },
  });
  assert.equal(badKey.status, 422);
  const noNamespace = await raw(server, "POST", "/api/v1/namespaces/nope/secrets", {
    metadata: { name: "s" },
  });
  assert.equal(noNamespace.status, 404);
  assert.equal(noNamespace.json.message, 'namespaces "nope" not found');
  const otherNamespace = await raw(server, "POST", secrets, {
    metadata: { name: "s", namespace: "kube-system" },
  });
  assert.equal(otherNamespace.status, 400);
  assert.equal(
    otherNamespace.json.message,
    "the namespace of the provided object does not match the namespace sent on the request",
  );
});

Deno.test("fake apiserver: apply needs a fieldManager and the apply content type", async () => {
  await using server = await startFakeApiServer();
  const path = "/apis/update.edgeless.systems/v1alpha1/joiningnodes/n";
  const object = {
    apiVersion: "update.edgeless.systems/v1alpha1",
    kind: "JoiningNode",
    metadata: { name: "n" },
  };
  const noManager = await raw(server, "PATCH", path, object, { contentType: "application/apply-patch+yaml" });
  assert.equal(noManager.status, 422);
  assert.equal(
    noManager.json.message,
    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
  );
  const mergePatch = await raw(server, "PATCH", `${path}?fieldManager=m`, object, {
    contentType: "application/merge-patch+json",
  });
  assert.equal(mergePatch.status, 415);
  assert.equal(mergePatch.json.reason, "UnsupportedMediaType");
  const yaml =
    "apiVersion: update.edgeless.systems/v1alpha1\nkind: JoiningNode\nmetadata:\n  name: n\nspec:\n  name: n\n";
  const applied = await raw(server, "PATCH", `${path}?fieldManager=m`, yaml, {
    contentType: "application/apply-patch+yaml",
  });
  assert.equal(applied.status, 201);
  assert.deepEqual(applied.json.spec, { name: "n" });
});

Deno.test("fake apiserver: an apply body in JSON or YAML applies the same; a repeated key is refused", async () => {
  await using server = await startFakeApiServer();
  const path = (name: string) => `/apis/update.edgeless.systems/v1alpha1/joiningnodes/${name}?fieldManager=m`;
  const apply = (name: string, body: string) =>
    raw(server, "PATCH", path(name), body, { contentType: "application/apply-patch+yaml" });
  const json = await apply(
    "j",
    '{"apiVersion":"update.edgeless.systems/v1alpha1","kind":"JoiningNode","metadata":{"name":"j"},"spec":{"name":"n"}}',
  );
  const yaml = await apply(
    "y",
    "apiVersion: update.edgeless.systems/v1alpha1\nkind: JoiningNode\nmetadata:\n  name: y\nspec:\n  name: n\n",
  );
  assert.deepEqual([json.status, json.json.spec], [201, { name: "n" }]);
  assert.deepEqual([yaml.status, yaml.json.spec], [201, { name: "n" }]);
  for (
    const body of [
      '{"apiVersion":"update.edgeless.systems/v1alpha1","kind":"JoiningNode","metadata":{"name":"r"},"spec":{"name":"a","name":"b"}}',
      "apiVersion: update.edgeless.systems/v1alpha1\nkind: JoiningNode\nmetadata:\n  name: r\nspec:\n  name: a\n  name: b\n",
    ]
  ) {
    const refused = await apply("r", body);
    assert.equal(refused.status, 400);
    assert.equal(refused.json.message, "error decoding YAML: the apply patch is not valid YAML");
  }
});

Deno.test("fake apiserver: apply removes fields its manager stopped applying, keeps others' fields", async () => {
  await using server = await startFakeApiServer();
  const path = "/apis/update.edgeless.systems/v1alpha1/joiningnodes/n";
  const apply = (manager: string, spec: Json) =>
    raw(server, "PATCH", `${path}?fieldManager=${manager}`, {
      apiVersion: "update.edgeless.systems/v1alpha1",
      kind: "JoiningNode",
      metadata: { name: "n" },
      spec,
    }, { contentType: "application/apply-patch+yaml" });
  await apply("a", { name: "n", deadline: "d1" });
  await apply("b", { iscontrolplane: false });
  const result = await apply("a", { name: "n" });
  assert.equal(result.status, 200);
  assert.deepEqual(result.json.spec, { name: "n", iscontrolplane: false });
  const managed =
    (result.json.metadata as { managedFields: { manager: string; fieldsV1: Json }[] }).managedFields;
  assert.deepEqual(
    managed.map((m) => [m.manager, m.fieldsV1]),
    [["b", { "f:spec": { "f:iscontrolplane": {} } }], ["a", { "f:spec": { "f:name": {} } }]],
  );
});

Deno.test("fake apiserver: a no-op update keeps the resourceVersion; DELETE answers a Success Status", async () => {
  await using server = await startFakeApiServer();
  const created = await raw(server, "POST", secrets, { metadata: { name: "s" }, data: { a: btoa("1") } });
  const metadata = created.json.metadata as Json;
  const same = await raw(server, "PUT", `${secrets}/s`, { metadata: { name: "s" }, data: { a: btoa("1") } });
  assert.equal((same.json.metadata as Json).resourceVersion, metadata.resourceVersion);
  const deleted = await raw(server, "DELETE", `${secrets}/s`);
  assert.equal(deleted.status, 200);
  assert.deepEqual(deleted.json, {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Success",
    details: { name: "s", kind: "secrets", uid: metadata.uid },
  });
  const again = await raw(server, "DELETE", `${secrets}/s`);
  assert.equal(again.status, 404);
});

Deno.test("fake apiserver: a DELETE's DeleteOptions body, as kube-apiserver reads it", async (t) => {
  await using server = await startFakeApiServer();
  const rows: {
    name: string;
    body: unknown;
    wantStatus: number;
    wantReason?: string;
    wantMessage?: RegExp;
  }[] = [
    { name: "a matching UID deletes", body: (uid: string) => ({ preconditions: { uid } }), wantStatus: 200 },
    { name: "null preconditions are none", body: { preconditions: null }, wantStatus: 200 },
    { name: "a null UID is none", body: { preconditions: { uid: null } }, wantStatus: 200 },
    {
      name: "another UID is a 409 Conflict in kube-apiserver's words",
      body: { preconditions: { uid: "another" } },
      wantStatus: 409,
      wantReason: "Conflict",
      wantMessage:
        /^Operation cannot be fulfilled on Secret "s": the UID in the precondition \(another\) does not match/,
    },
    { name: "a body that is not an object", body: "[1]", wantStatus: 400, wantReason: "BadRequest" },
    {
      name: "a UID that is not a string",
      body: { preconditions: { uid: 7 } },
      wantStatus: 400,
      wantReason: "BadRequest",
    },
    {
      name: "a resourceVersion precondition is refused, not ignored",
      body: { preconditions: { resourceVersion: "1" } },
      wantStatus: 400,
      wantReason: "BadRequest",
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const created = await raw(server, "POST", secrets, { metadata: { name: "s" } });
      const uid = String((created.json.metadata as Json).uid);
      const body = typeof row.body === "function" ? row.body(uid) : row.body;
      const answer = await raw(server, "DELETE", `${secrets}/s`, body);
      assert.equal(answer.status, row.wantStatus, JSON.stringify(answer.json));
      if (row.wantReason) assert.equal(answer.json.reason, row.wantReason);
      if (row.wantMessage) assert.match(String(answer.json.message), row.wantMessage);
      const left = server.getObject(`${secrets}/s`);
      assert.equal(left === undefined, row.wantStatus === 200, "deleted exactly when the delete succeeded");
      if (left) await raw(server, "DELETE", `${secrets}/s`);
    });
  }
});
