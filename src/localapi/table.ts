/**
 * Server-side printing: `meta.k8s.io/v1` Tables, which `kubectl get` asks
 * for (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), with the
 * columns kube-apiserver prints for Secrets (Name, Type, Data, Age),
 * ConfigMaps (Name, Data, Age), Namespaces (Name, Status, Age) and custom
 * resources without printer columns (Name, Age).
 *
 * @module
 */

import type { JsonObject as Json } from "./json.ts";

/** Whether an `Accept` header asks for a `meta.k8s.io/v1` Table. */
export function wantsTable(accept: string | undefined): boolean {
  return (accept ?? "").split(",").some((part) => {
    const params = part.split(";").map((p) => p.trim());
    return params.includes("as=Table") && params.includes("g=meta.k8s.io") && params.includes("v=v1");
  });
}

/**
 * A Table of `items` (objects of `kind`) as kube-apiserver prints them;
 * rows carry the full object when `includeObject` is "Object", else its
 * metadata as PartialObjectMetadata (the default), or nothing ("None").
 */
export function toTable(
  kind: string,
  items: Json[],
  options: { resourceVersion: string; includeObject?: string; now: number },
): Json {
  const name = {
    name: "Name",
    type: "string",
    format: "name",
    description: "Name of the object",
    priority: 0,
  };
  const age = { name: "Age", type: "string", format: "", description: "Time since creation", priority: 0 };
  const column = (title: string, type = "string") => ({
    name: title,
    type,
    format: "",
    description: title,
    priority: 0,
  });
  let columns: Json[];
  let cells: (item: Json) => unknown[];
  const ageOf = (item: Json) =>
    humanAge(String((item.metadata as Json).creationTimestamp ?? ""), options.now);
  const nameOf = (item: Json) => String((item.metadata as Json).name);
  const count = (item: Json) =>
    Object.keys((item.data ?? {}) as Json).length + Object.keys((item.binaryData ?? {}) as Json).length;
  switch (kind) {
    case "Secret":
      columns = [name, column("Type"), column("Data", "integer"), age];
      cells = (item) => [nameOf(item), item.type ?? "Opaque", count(item), ageOf(item)];
      break;
    case "ConfigMap":
      columns = [name, column("Data", "integer"), age];
      cells = (item) => [nameOf(item), count(item), ageOf(item)];
      break;
    case "Namespace":
      columns = [name, column("Status"), age];
      cells = (item) => [nameOf(item), (item.status as Json | undefined)?.phase ?? "Active", ageOf(item)];
      break;
    default:
      columns = [name, {
        ...age,
        description: "CreationTimestamp is a timestamp representing the server time",
      }];
      cells = (item) => [nameOf(item), ageOf(item)];
  }
  return {
    kind: "Table",
    apiVersion: "meta.k8s.io/v1",
    metadata: { resourceVersion: options.resourceVersion },
    columnDefinitions: columns,
    rows: items.map((item) => ({ cells: cells(item), object: rowObject(item, options.includeObject) })),
  };
}

function rowObject(item: Json, includeObject: string | undefined): Json | undefined {
  if (includeObject === "None") return undefined;
  if (includeObject === "Object") return item;
  return { kind: "PartialObjectMetadata", apiVersion: "meta.k8s.io/v1", metadata: item.metadata };
}

/** An age as kubectl prints it: 45s, 12m, 3h, 5d. */
export function humanAge(timestamp: string, now: number): string {
  const created = Date.parse(timestamp);
  if (!Number.isFinite(created)) return "<unknown>";
  const seconds = Math.max(0, Math.floor((now - created) / 1000));
  if (seconds < 120) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 120) return `${minutes}m`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours}h`;
  return `${Math.floor(hours / 24)}d`;
}
