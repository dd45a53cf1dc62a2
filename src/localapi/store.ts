/**
 * The object store of the local Kubernetes API: objects by URL path with
 * `uid`, `resourceVersion`, `creationTimestamp` (and `generation` for custom
 * resources) set on create, and `managedFields` from a per-leaf field
 * ownership model, so server-side apply conflicts and `force` behave as on
 * the real server. {@linkcode ObjectStore.snapshot} and
 * {@linkcode ObjectStore.restore} carry the whole state (objects, field
 * owners and the resourceVersion counter) across a restart.
 *
 * @module
 */
import {
  changedLeaves,
  deleteAt,
  fieldsV1,
  getAt,
  jsonEqual,
  leaves,
  setAt,
  withoutVolatile,
} from "./fields.ts";
import { apiVersionOf, objectPath, resourceLabel, type ResourceType, type Route } from "./resources.ts";
import { applyConflict, conflict, groupDetail, notFound, preconditionFailed, StatusError } from "./status.ts";
import { checkNameMatchesUrl, normalize, validateContent, validateName } from "./validation.ts";

import type { JsonObject as Json } from "./json.ts";

/** Who owns which leaf fields of an object, for one field manager. */
interface Manager {
  operation: "Apply" | "Update";
  apiVersion: string;
  time: string;
  /** Leaf paths, each a JSON array of keys. */
  fields: Set<string>;
}

/** An object and its field managers. */
interface Stored {
  object: Json;
  managers: Map<string, Manager>;
}

/** The store's state as JSON, as {@linkcode ObjectStore.snapshot} writes it. */
export interface StoreSnapshot {
  /** Format version, 1. */
  version: 1;
  /** The last resourceVersion handed out. */
  resourceVersion: number;
  /** Every object, by URL path. */
  objects: {
    /** The object's URL path. */
    path: string;
    /** The object as stored (without managedFields). */
    object: Json;
    /** Field managers: name, operation, apiVersion, time and owned leaf paths. */
    managers: {
      name: string;
      operation: "Apply" | "Update";
      apiVersion: string;
      time: string;
      fields: string[];
    }[];
  }[];
}

/** One object's state in a {@linkcode StoreSnapshot}, without its path. */
export type StoredEntry = Omit<StoreSnapshot["objects"][number], "path">;

/** An object created, changed or deleted, as {@linkcode ObjectStore.takeChanges} reports it. */
export interface StoreChange {
  /** The object's URL path. */
  path: string;
  /** Its state now; null when it was deleted. */
  entry: StoredEntry | null;
}

/** A list request's selectors. */
export interface ListSelectors {
  /** `key=value`, `key==value`, `key!=value`, `key` and `!key` terms, comma-separated. */
  labelSelector?: string;
  /** `metadata.name=…` and `metadata.namespace=…` terms (`=`, `==`, `!=`), comma-separated. */
  fieldSelector?: string;
}

/** Operation of a field manager entry: server-side apply, or any other write. */
export type ManagerOperation = "Apply" | "Update";

const generateNameAlphabet = "bcdfghjklmnpqrstvwxz2456789";

/** Objects of the local API, with the real server's write semantics. */
export class ObjectStore {
  #objects = new Map<string, Stored>();
  /** Paths changed since the last {@linkcode takeChanges}; none kept without a journal to take them. */
  #changed = new Set<string>();
  #trackChanges: boolean;
  #resourceVersion = 1000;
  #namespaces: Set<string>;
  #now: () => string;

  /**
   * An empty store.
   *
   * @param namespaces namespaces that exist (objects can only be created in these)
   * @param now the current time as RFC 3339
   * @param options `trackChanges: false` when nothing calls {@linkcode takeChanges} (no state directory):
   * the changed paths would otherwise pile up, one per bootstrap token ever written
   */
  constructor(namespaces: Iterable<string>, now: () => string, options: { trackChanges?: boolean } = {}) {
    this.#namespaces = new Set(namespaces);
    this.#now = now;
    this.#trackChanges = options.trackChanges ?? true;
  }

  /** Namespaces that exist. */
  get namespaces(): string[] {
    return [...this.#namespaces];
  }

  /** The last resourceVersion handed out, as a string (a list's `metadata.resourceVersion`). */
  get resourceVersion(): string {
    return String(this.#resourceVersion);
  }

  /** The stored object (without managedFields) at `route`, or undefined. */
  peek(route: Route): Json | undefined {
    return this.#objects.get(objectPath(route))?.object;
  }

  /** Whether an object exists at `route`. */
  has(route: Route): boolean {
    return this.#objects.has(objectPath(route));
  }

  /** The object at `route` as the server returns it. @throws {StatusError} 404 when absent */
  get(route: Route): Json {
    return this.#render(this.#find(route));
  }

  /** Stored objects (without managedFields) whose path starts with `prefix`. */
  objectsUnder(prefix: string): Json[] {
    return [...this.#objects].filter(([path]) => path.startsWith(prefix)).map(([, stored]) => stored.object);
  }

  /** The objects of a collection route, as the server returns them, sorted by namespace and name. */
  list(route: Route, selectors: ListSelectors = {}): Json[] {
    const { resource, namespace } = route;
    const matchesLabels = labelMatcher(selectors.labelSelector);
    const matchesFields = fieldMatcher(selectors.fieldSelector);
    const items: Json[] = [];
    for (const stored of this.#objects.values()) {
      const object = stored.object;
      if (object.kind !== resource.kind || object.apiVersion !== apiVersionOf(resource)) continue;
      const metadata = object.metadata as Json;
      if (namespace !== undefined && metadata.namespace !== namespace) continue;
      if (!matchesLabels((metadata.labels ?? {}) as Record<string, string>)) continue;
      if (!matchesFields(metadata)) continue;
      items.push(this.#render(stored));
    }
    const key = (item: Json) => {
      const metadata = item.metadata as Json;
      return `${metadata.namespace ?? ""}/${metadata.name}`;
    };
    return items.sort((a, b) => key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0);
  }

  /** Creates the object at `route` (whose name may come from the body or `generateName`). */
  create(route: Route, input: Json, manager: string, operation: ManagerOperation): Json {
    const metadata = { ...(input.metadata as Json | undefined) };
    if (!metadata.name && typeof metadata.generateName === "string" && metadata.generateName) {
      metadata.name = metadata.generateName + randomSuffix();
    }
    const name = typeof metadata.name === "string" ? metadata.name : "";
    const target: Route = { ...route, name: route.name ?? name };
    if (route.namespace !== undefined && !this.#namespaces.has(route.namespace)) {
      throw new StatusError(404, "NotFound", `namespaces "${route.namespace}" not found`, {
        name: route.namespace,
        kind: "namespaces",
      });
    }
    checkNamespace(route, metadata);
    validateName(route.resource, name);
    if (this.#objects.has(objectPath(target))) {
      throw new StatusError(
        409,
        "AlreadyExists",
        `${resourceLabel(route.resource)} "${name}" already exists`,
        {
          name,
          ...groupDetail(route.resource),
          kind: route.resource.plural,
        },
      );
    }
    const object = normalize(route.resource, { ...input, metadata }, target);
    validateContent(route.resource, object, name);
    const meta = object.metadata as Json;
    meta.uid = crypto.randomUUID();
    meta.resourceVersion = String(++this.#resourceVersion);
    if (route.resource.group !== "") meta.generation = 1;
    meta.creationTimestamp = this.#now();
    const stored: Stored = { object, managers: new Map() };
    this.#own(stored, manager, operation, leaves(object).keys(), route.resource);
    this.#objects.set(objectPath(target), stored);
    this.#recordChange(objectPath(target));
    return this.#render(stored);
  }

  /** Replaces the object at `route` (PUT), honouring `metadata.resourceVersion` as a precondition. */
  update(route: Route, input: Json, manager: string): Json {
    const stored = this.#find(route);
    const metadata = (input.metadata ?? {}) as Json;
    checkNameMatchesUrl(metadata, route);
    checkNamespace(route, metadata);
    const current = stored.object.metadata as Json;
    if (metadata.resourceVersion !== undefined && metadata.resourceVersion !== current.resourceVersion) {
      throw conflict(route);
    }
    const object = normalize(route.resource, input, route);
    validateContent(route.resource, object, route.name!);
    checkImmutable(route, stored.object, object);
    const owned = changedLeaves(stored.object, object);
    this.#recordChange(objectPath(route));
    return this.#render(this.#write(stored, object, manager, "Update", route.resource, owned));
  }

  /** Server-side apply of `input` at `route` by `manager`; code 201 when it created the object. */
  apply(route: Route, input: Json, manager: string, force: boolean): { code: number; object: Json } {
    const stored = this.#objects.get(objectPath(route));
    const appliedObject = normalize(route.resource, input, route);
    if (!stored) {
      validateContent(route.resource, appliedObject, route.name!);
      return { code: 201, object: this.create(route, appliedObject, manager, "Apply") };
    }
    const metadata = input.metadata as Json;
    if (
      metadata.resourceVersion !== undefined &&
      metadata.resourceVersion !== (stored.object.metadata as Json).resourceVersion
    ) {
      throw conflict(route);
    }
    const applied = leaves(appliedObject);
    const conflicts: { manager: string; apiVersion: string; path: string }[] = [];
    for (const [leaf, value] of applied) {
      const current = getAt(stored.object, JSON.parse(leaf));
      if (current !== undefined && jsonEqual(current, value)) continue;
      for (const [other, owner] of stored.managers) {
        if (other !== manager && owner.fields.has(leaf)) {
          conflicts.push({ manager: other, apiVersion: owner.apiVersion, path: leaf });
        }
      }
    }
    if (conflicts.length > 0 && !force) throw applyConflict(conflicts);
    for (const { manager: other, path: leaf } of conflicts) stored.managers.get(other)?.fields.delete(leaf);

    const next = structuredClone(stored.object);
    const previous = stored.managers.get(manager);
    if (previous?.operation === "Apply") {
      for (const leaf of previous.fields) {
        const ownedByOthers = [...stored.managers].some(([other, owner]) =>
          other !== manager && owner.fields.has(leaf)
        );
        if (!applied.has(leaf) && !ownedByOthers) deleteAt(next, JSON.parse(leaf));
      }
    }
    for (const [leaf, value] of applied) setAt(next, JSON.parse(leaf), structuredClone(value));
    validateContent(route.resource, next, route.name!);
    checkImmutable(route, stored.object, next);
    stored.managers.delete(manager);
    this.#recordChange(objectPath(route));
    const result = this.#write(stored, next, manager, "Apply", route.resource, new Set(applied.keys()));
    return { code: 200, object: this.#render(result) };
  }

  /**
   * Deletes the object at `route`, only if its UID is `preconditions.uid` when given; returns it as it
   * was. @throws {StatusError} 404 when absent, 409 when the UID differs
   */
  delete(route: Route, preconditions: { uid?: string } = {}): Json {
    const stored = this.#find(route);
    const storedUid = String((stored.object.metadata as Json).uid ?? "");
    if (preconditions.uid !== undefined && preconditions.uid !== storedUid) {
      throw preconditionFailed(route, preconditions.uid, storedUid);
    }
    this.#objects.delete(objectPath(route));
    this.#recordChange(objectPath(route));
    return this.#render(stored);
  }

  /** Deletes the object at `route` if it exists; returns whether it did. */
  remove(route: Route): boolean {
    const removed = this.#objects.delete(objectPath(route));
    if (removed) this.#recordChange(objectPath(route));
    return removed;
  }

  /** Creates or replaces the object at `route` as a fixture, owned by `manager`. */
  put(route: Route, object: Json, manager: string): Json {
    const input = { ...object, metadata: { ...(object.metadata as Json | undefined), name: route.name } };
    const fixture = normalize(route.resource, input, route);
    const stored = this.#objects.get(objectPath(route));
    if (!stored) return this.create(route, fixture, manager, "Update");
    const owned = new Set(leaves(fixture).keys());
    this.#recordChange(objectPath(route));
    return this.#render(this.#write(stored, fixture, manager, "Update", route.resource, owned));
  }

  /** The whole state as JSON. */
  snapshot(): StoreSnapshot {
    return {
      version: 1,
      resourceVersion: this.#resourceVersion,
      objects: [...this.#objects].map(([path, stored]) => ({ path, ...entryOf(stored) })),
    };
  }

  #recordChange(path: string): void {
    if (this.#trackChanges) this.#changed.add(path);
  }

  /**
   * The objects created, changed or deleted since the last call (or since
   * {@linkcode restore}), each with its state now: what a journal appends.
   * None when the store does not track changes.
   */
  takeChanges(): StoreChange[] {
    const changes = [...this.#changed].map((path) => {
      const stored = this.#objects.get(path);
      return { path, entry: stored ? entryOf(stored) : null };
    });
    this.#changed.clear();
    return changes;
  }

  /** Replaces the state with a snapshot's. @throws {Error} when it is not a snapshot of this format */
  restore(snapshot: StoreSnapshot): void {
    if (snapshot?.version !== 1 || !Array.isArray(snapshot.objects)) {
      throw new Error("not a local API state snapshot (version 1)");
    }
    this.#objects.clear();
    this.#changed.clear();
    for (const { path, object, managers } of snapshot.objects) {
      const entries = managers.map((m) =>
        [m.name, {
          operation: m.operation,
          apiVersion: m.apiVersion,
          time: m.time,
          fields: new Set(m.fields),
        }] as const
      );
      this.#objects.set(path, { object, managers: new Map(entries) });
    }
    this.#resourceVersion = Math.max(this.#resourceVersion, Number(snapshot.resourceVersion) || 0);
  }

  #find(route: Route): Stored {
    const stored = this.#objects.get(objectPath(route));
    if (!stored) throw notFound(route);
    return stored;
  }

  /** Stores `object` as the new state of `stored`; `owned` are the leaves `manager` now owns. */
  #write(
    stored: Stored,
    object: Json,
    manager: string,
    operation: ManagerOperation,
    resource: ResourceType,
    owned: Set<string>,
  ): Stored {
    const current = stored.object.metadata as Json;
    const meta = object.metadata as Json;
    for (const key of ["uid", "creationTimestamp", "resourceVersion", "generation"]) meta[key] = current[key];
    const present = leaves(object);
    for (const owner of stored.managers.values()) {
      for (const leaf of owner.fields) {
        if (!present.has(leaf) || (operation === "Update" && owned.has(leaf))) owner.fields.delete(leaf);
      }
    }
    this.#own(stored, manager, operation, owned, resource);
    for (const [name, owner] of stored.managers) if (owner.fields.size === 0) stored.managers.delete(name);
    if (!jsonEqual(withoutVolatile(stored.object), withoutVolatile(object))) {
      meta.resourceVersion = String(++this.#resourceVersion);
      if (resource.group !== "" && !jsonEqual(stored.object.spec, object.spec)) {
        meta.generation = Number(current.generation ?? 0) + 1;
      }
    }
    stored.object = object;
    return stored;
  }

  #own(
    stored: Stored,
    manager: string,
    operation: ManagerOperation,
    fields: Iterable<string>,
    resource: ResourceType,
  ): void {
    const existing = stored.managers.get(manager);
    const entry: Manager = existing?.operation === operation
      ? existing
      : { operation, apiVersion: apiVersionOf(resource), time: this.#now(), fields: new Set() };
    for (const leaf of fields) entry.fields.add(leaf);
    entry.time = this.#now();
    stored.managers.set(manager, entry);
  }

  #render(stored: Stored): Json {
    const { kind, apiVersion, metadata, ...rest } = structuredClone(stored.object);
    const managedFields = [...stored.managers].map(([manager, entry]) => ({
      manager,
      operation: entry.operation,
      apiVersion: entry.apiVersion,
      time: entry.time,
      fieldsType: "FieldsV1",
      fieldsV1: fieldsV1(entry.fields),
    }));
    return { kind, apiVersion, metadata: { ...(metadata as Json), managedFields }, ...rest };
  }
}

/** `stored` as a snapshot entry. */
function entryOf(stored: Stored): StoredEntry {
  return {
    object: stored.object,
    managers: [...stored.managers].map(([name, m]) => ({
      name,
      operation: m.operation,
      apiVersion: m.apiVersion,
      time: m.time,
      fields: [...m.fields],
    })),
  };
}

function randomSuffix(): string {
  return Array.from(
    crypto.getRandomValues(new Uint8Array(5)),
    (b) => generateNameAlphabet[b % generateNameAlphabet.length],
  ).join("");
}

function checkNamespace(route: Route, metadata: Json): void {
  if (!route.resource.namespaced) {
    delete metadata.namespace;
    return;
  }
  if (metadata.namespace !== undefined && metadata.namespace !== route.namespace) {
    throw new StatusError(
      400,
      "BadRequest",
      "the namespace of the provided object does not match the namespace sent on the request",
    );
  }
}

function checkImmutable(route: Route, before: Json, after: Json): void {
  if (route.resource.group !== "" || before.immutable !== true) return;
  const fields = ["data", "binaryData", "immutable"].filter((field) =>
    !jsonEqual(before[field], after[field])
  );
  if (fields.length === 0) return;
  const causes = fields.map((field) => ({
    reason: "FieldValueForbidden",
    message: "Forbidden: field is immutable when `immutable` is set",
    field,
  }));
  throw new StatusError(
    422,
    "Invalid",
    `${route.resource.kind} "${route.name}" is invalid: ${
      fields.map((f) => `${f}: Forbidden: field is immutable when \`immutable\` is set`).join(", ")
    }`,
    { name: route.name, kind: route.resource.kind, causes },
  );
}

/** A predicate for a label selector (equality and existence terms; an empty selector matches all). */
function labelMatcher(selector: string | undefined): (labels: Record<string, string>) => boolean {
  const terms = (selector ?? "").split(",").map((t) => t.trim()).filter((t) => t !== "");
  return (labels) =>
    terms.every((term) => {
      const match = /^([^!=]+?)\s*(==|=|!=)\s*(.*)$/.exec(term);
      if (match) {
        const [, key, op, value] = match;
        return op === "!=" ? labels[key.trim()] !== value.trim() : labels[key.trim()] === value.trim();
      }
      // Own keys only: `in` would find "constructor" on every object.
      if (term.startsWith("!")) return !Object.hasOwn(labels, term.slice(1).trim());
      return Object.hasOwn(labels, term);
    });
}

/** A predicate for a field selector on `metadata.name` and `metadata.namespace`; other fields match. */
function fieldMatcher(selector: string | undefined): (metadata: Json) => boolean {
  const terms = (selector ?? "").split(",").map((t) => t.trim()).filter((t) => t !== "");
  return (metadata) =>
    terms.every((term) => {
      const match = /^(metadata\.name|metadata\.namespace)\s*(==|=|!=)\s*(.*)$/.exec(term);
      if (!match) return true;
      const [, field, op, value] = match;
      const actual = String(metadata[field === "metadata.name" ? "name" : "namespace"] ?? "");
      return op === "!=" ? actual !== value : actual === value;
    });
}
