/**
 * The Kubernetes components list (binaries a node installs) as the
 * bootstrapper stores it in the `k8s-components-…` ConfigMap and the join
 * service hands it to joining nodes.
 *
 * The stored JSON is Go's `encoding/json` of a struct without tags:
 * `[{"URL":"…","Hash":"sha256:…","InstallPath":"…","Extract":false}]`. Go
 * matches keys case-insensitively and ignores unknown ones; so does
 * {@linkcode parseComponents}. {@linkcode encodeComponents} emits the exact
 * spelling.
 *
 * @module
 */
import { hasControlCharacters } from "../json/escape_control.ts";
import { primitives } from "../crypto/primitives.ts";
import { SharedLoad } from "../async/shared_load.ts";
import type { Clock } from "../clock.ts";
import type { CustomResource, KubernetesClient } from "../kubernetes/client.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../kubernetes/names.ts";
import type { ComponentsSource } from "./dependencies.ts";
import { apiServerCall, reject } from "./rejections.ts";

/** The ConfigMap data key holding the components JSON. */
export const COMPONENTS_LIST_KEY = "components";
/** Prefix of the components ConfigMap's name. */
export const COMPONENTS_CONFIGMAP_PREFIX = "k8s-components-";

/** One component; the fields of the `components.Component` proto message. */
export interface KubernetesComponent {
  /** Download URL (https or a `data:` URL). */
  url: string;
  /** `sha256:<64 lower-case hex>` of the download. */
  hash: string;
  /** Absolute path the node installs the download at. */
  installPath: string;
  /** The download is an archive to extract into `installPath`. */
  extract: boolean;
}

/** The components JSON is malformed. */
export class ComponentsError extends Error {
  /** A components failure; `message` names what is wrong. */
  constructor(message: string) {
    super(message);
    this.name = "ComponentsError";
  }
}

const HASH_PATTERN = /^sha256:[0-9a-f]{64}$/;

/**
 * Whether `hash` has the one form a node checks a download against:
 * `sha256:<64 lower-case hex digits>`.
 */
export function isComponentHash(hash: string): boolean {
  return HASH_PATTERN.test(hash);
}

/** Linux's NAME_MAX. */
const MAX_FILE_NAME_BYTES = 255;
/** Linux's PATH_MAX, which counts the terminating NUL: a path has at most 4095 bytes. */
export const MAX_PATH_BYTES = 4096;
const utf8 = new TextEncoder();

/** What {@linkcode isComponentInstallPath} accepts, for messages. */
export const COMPONENT_INSTALL_PATH_RULE =
  `an absolute path other than "/", without "..", control characters or a name over ${MAX_FILE_NAME_BYTES} bytes`;

/**
 * Whether a node installs a component at `installPath`: an absolute path,
 * not the root itself (`/`, `/.`, `//`), without a `..` element (the
 * bootstrapper's installer places it under the node's root), and one the
 * node's file system takes: no control character (a NUL failed the install
 * only after the node lock) and no name longer than Linux allows.
 */
export function isComponentInstallPath(installPath: string): boolean {
  const parts = installPath.split("/").filter((part) => part !== "" && part !== ".");
  return installPath.startsWith("/") && parts.length > 0 && !parts.includes("..") &&
    !hasControlCharacters(installPath) &&
    parts.every((part) => utf8.encode(part).length <= MAX_FILE_NAME_BYTES) &&
    utf8.encode(installPath).length < MAX_PATH_BYTES;
}

/** Whether a node can download a component from `url`: https, http (the hash protects it) or data. */
export function isComponentUrl(url: string): boolean {
  return /^(https?|data):/.test(url);
}

/** JSON keys as Go writes them, by field. */
const jsonKeys = { url: "URL", hash: "Hash", installPath: "InstallPath", extract: "Extract" } as const;
type Field = keyof typeof jsonKeys;
const fields: readonly Field[] = ["url", "hash", "installPath", "extract"];
const fieldsByLowerKey = new Map(fields.map((field) => [jsonKeys[field].toLowerCase(), field]));

/**
 * Parses and validates the components JSON. `null` is an empty list (as in
 * Go). Each component needs an https, http or data `URL`, a `Hash` of the
 * form `sha256:<64 lower-case hex>` and an `InstallPath` a node installs to
 * ({@linkcode isComponentInstallPath}); `Extract` defaults to false. Throws
 * {@linkcode ComponentsError}.
 */
export function parseComponents(json: string): KubernetesComponent[] {
  // A ConfigMap's data is typed, not checked: the API answer may hold anything there.
  if (typeof json !== "string") throw new ComponentsError(`components JSON is not a string`);
  if (json.trim() === "") throw new ComponentsError("components JSON is empty");
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (error) {
    throw new ComponentsError(`components JSON is invalid: ${(error as Error).message}`);
  }
  if (value === null) return [];
  if (!Array.isArray(value)) {
    throw new ComponentsError(`components must be a JSON array, got ${typeName(value)}`);
  }
  return value.map((item, index) => parseComponent(item, index));
}

function parseComponent(item: unknown, index: number): KubernetesComponent {
  const fail = (why: string): never => {
    throw new ComponentsError(`component ${index}: ${why}`);
  };
  if (typeof item !== "object" || item === null || Array.isArray(item)) {
    fail(`must be a JSON object, got ${typeName(item)}`);
  }
  const component: KubernetesComponent = { url: "", hash: "", installPath: "", extract: false };
  for (const [key, value] of Object.entries(item as Record<string, unknown>)) {
    const field = fieldsByLowerKey.get(key.toLowerCase());
    if (field === undefined || value === null) continue; // Go ignores unknown keys and nulls
    const expected = field === "extract" ? "boolean" : "string";
    if (typeName(value) !== expected) {
      fail(`"${jsonKeys[field]}" must be a ${expected}, got ${typeName(value)}`);
    }
    (component as unknown as Record<Field, unknown>)[field] = value;
  }
  // As strict as the nodes' installer: a node finds a component it cannot install only after its node lock.
  if (component.url === "") fail(`"URL" is missing or empty`);
  if (!isComponentUrl(component.url)) fail(`"URL" must be an https, http or data URL`);
  if (!isComponentHash(component.hash)) {
    fail(`"Hash" must be sha256:<64 lower-case hex digits>, got ${JSON.stringify(component.hash)}`);
  }
  if (!isComponentInstallPath(component.installPath)) {
    fail(
      `"InstallPath" must be ${COMPONENT_INSTALL_PATH_RULE}, got ${JSON.stringify(component.installPath)}`,
    );
  }
  return component;
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

/** The components JSON with Go's key spelling, for the ConfigMap. */
export function encodeComponents(components: readonly KubernetesComponent[]): string {
  return JSON.stringify(components.map((c) => ({
    [jsonKeys.url]: c.url,
    [jsonKeys.hash]: c.hash,
    [jsonKeys.installPath]: c.installPath,
    [jsonKeys.extract]: c.extract,
  })));
}

/** `"sha256:"` + hex SHA-256 of every component's hash string concatenated in list order. */
export async function componentsHash(components: readonly KubernetesComponent[]): Promise<string> {
  const concatenated = new TextEncoder().encode(components.map((c) => c.hash).join(""));
  return `sha256:${(await primitives.sha256(concatenated)).toHex()}`;
}

/** The components ConfigMap's name: `k8s-components-sha256-<hex>` ({@linkcode componentsHash}, `:` → `-`). */
export async function componentsConfigMapName(components: readonly KubernetesComponent[]): Promise<string> {
  return COMPONENTS_CONFIGMAP_PREFIX + (await componentsHash(components)).replace(":", "-");
}

// --- the join service's components source ---

/** The NodeVersion resource naming the components ConfigMap. */
export const NODE_VERSIONS = {
  group: "update.edgeless.systems",
  version: "v1alpha1",
  plural: "nodeversions",
};
/** Name of the cluster's NodeVersion object. */
export const NODE_VERSION_NAME = "constellation-version";

/** How long a NodeVersion read serves the tickets that follow it. */
export const NODE_VERSION_MAX_AGE_MS = 1000;

/**
 * The components the cluster's NodeVersion names
 * (`spec.kubernetesComponentsReference`), read from that ConfigMap in
 * kube-system. The NodeVersion is read once for all tickets of a second
 * ({@linkcode NODE_VERSION_MAX_AGE_MS}; a node joining during an upgrade
 * gets either components, as it would a moment earlier or later); the
 * ConfigMap is immutable and named by its content's hash, so each is read
 * once.
 */
export function componentsSource(options: { client: KubernetesClient; clock: Clock }): ComponentsSource {
  const { client } = options;
  // Shared by every ticket of its second, so it runs under no ticket's signal; the client's timeout bounds it.
  const nodeVersion = new SharedLoad(
    () =>
      client.getCustomResource<CustomResource<{ kubernetesComponentsReference?: string }>>(
        NODE_VERSIONS,
        NODE_VERSION_NAME,
      ),
    { maxAgeMs: NODE_VERSION_MAX_AGE_MS, clock: options.clock },
  );
  // The ConfigMaps are immutable and named by their hash: the one the NodeVersion names now is all to keep
  // (one per upgrade would pile up).
  let cached: { configMapName: string; components: KubernetesComponent[] } | undefined;
  return {
    current({ signal }) {
      return apiServerCall(async () => {
        const configMapName = (await nodeVersion.get({ signal })).spec?.kubernetesComponentsReference;
        if (!configMapName) {
          throw reject("misconfigured", "kubernetesComponentsReference not found in node version");
        }
        let components = cached?.configMapName === configMapName ? cached.components : undefined;
        if (!components) {
          const configMap = await client.getConfigMap(KUBE_SYSTEM_NAMESPACE, configMapName, { signal });
          try {
            components = parseComponents(configMap.data?.[COMPONENTS_LIST_KEY] ?? "");
          } catch (error) {
            if (!(error instanceof ComponentsError)) throw error;
            throw reject("misconfigured", `components ConfigMap ${configMapName}: ${error.message}`);
          }
          cached = { configMapName, components };
        }
        return { configMapName, components };
      });
    },
  };
}
