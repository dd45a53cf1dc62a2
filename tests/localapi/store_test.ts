/**
 * The local API's object store (`src/localapi/store.ts`): server-side apply
 * as the real API server does it, down to pruning: a field a manager applied
 * before and applies no more is removed, unless another manager owns it too.
 */
import assert from "node:assert/strict";
import { CONFIG_MAPS, type Route } from "../../src/localapi/resources.ts";
import { ObjectStore } from "../../src/localapi/store.ts";
import type { JsonObject } from "../../src/localapi/json.ts";

const ROUTE: Route = { resource: CONFIG_MAPS, namespace: "kube-system", name: "c" };

function configMap(data: Record<string, string>): JsonObject {
  return { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c", namespace: "kube-system" }, data };
}

/** The managers of the object at `ROUTE` and the data keys each owns, sorted. */
function owners(store: ObjectStore): Record<string, string[]> {
  const managedFields = (store.get(ROUTE).metadata as JsonObject).managedFields as {
    manager: string;
    fieldsV1: { "f:data"?: Record<string, unknown> };
  }[];
  return Object.fromEntries(
    managedFields.map((entry) => [
      entry.manager,
      Object.keys(entry.fieldsV1["f:data"] ?? {}).map((key) => key.replace(/^f:/, "")).sort(),
    ]),
  );
}

Deno.test("server-side apply prunes the fields a manager stops applying, unless another manager owns them", async (t) => {
  const rows: {
    name: string;
    /** Writes after m's first apply of {a, b}, before it applies {a} alone. */
    between: (store: ObjectStore) => void;
    data: Record<string, string>;
    owners: Record<string, string[]>;
  }[] = [
    {
      name: "m alone: b is removed",
      between: () => {},
      data: { a: "1" },
      owners: { m: ["a"] },
    },
    {
      name: "another manager applied b too (the same value): b stays, owned by it",
      between: (store) => store.apply(ROUTE, configMap({ b: "2" }), "other", false),
      data: { a: "1", b: "2" },
      owners: { m: ["a"], other: ["b"] },
    },
    {
      name: "another manager updated b: b stays, owned by it",
      between: (store) => store.update(ROUTE, configMap({ a: "1", b: "3" }), "editor"),
      data: { a: "1", b: "3" },
      owners: { m: ["a"], editor: ["b"] },
    },
    {
      name: "another manager took b by force: b stays, owned by it",
      between: (store) => store.apply(ROUTE, configMap({ b: "4" }), "other", true),
      data: { a: "1", b: "4" },
      owners: { m: ["a"], other: ["b"] },
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      const store = new ObjectStore(["kube-system"], () => "2024-01-01T00:00:00Z");
      assert.equal(store.apply(ROUTE, configMap({ a: "1", b: "2" }), "m", false).code, 201);
      row.between(store);
      const { code, object } = store.apply(ROUTE, configMap({ a: "1" }), "m", false);
      assert.equal(code, 200);
      assert.deepEqual(object.data, row.data);
      assert.deepEqual(store.peek(ROUTE)!.data, row.data);
      assert.deepEqual(owners(store), row.owners);
    });
  }
});
