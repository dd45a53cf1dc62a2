/**
 * A small typed Kubernetes API client over `fetch` and
 * `Deno.createHttpClient`: only the calls the bootstrapper and join service
 * make (Secrets, ConfigMaps, custom resources), so a process needs nothing
 * but `--allow-net=<apiserver>` plus read access to its credentials.
 *
 * Every call has a timeout (whole call, retries included, and the wait for
 * one of the client's bounded request slots) and takes an `AbortSignal`.
 * Failures are {@linkcode KubernetesError}s. Only GETs are retried, with a
 * short bounded backoff; writes never are, so a create is sent exactly once. Request and response bodies (Secrets carry tokens) are
 * never logged or put into errors.
 *
 * @module
 */
import type { ConfigMap, Secret } from "kubernetes-types/core/v1.d.ts";
import type { ObjectMeta } from "kubernetes-types/meta/v1.d.ts";
import { sleep } from "../async/sleep.ts";
import { WorkPool } from "../limits/pool.ts";
import { readLimited } from "../streams/read_limited.ts";
import { type Logger, silentLogger } from "../log/logger.ts";
import type { ConnectionConfig } from "./connection.ts";
import { errorFromResponse, KubernetesError, unavailableError } from "./errors.ts";
import { KubeconfigError } from "./kubeconfig.ts";
import { isWellFormedToken } from "./token.ts";

/** Any Kubernetes object. */
export interface KubernetesObject {
  /** The object's API version. */
  apiVersion?: string;
  /** The object's kind. */
  kind?: string;
  /** Name, namespace and the server's bookkeeping. */
  metadata?: ObjectMeta;
}

/** A custom resource with a typed `spec` (and `status`): the default type of the custom-resource calls. */
export interface CustomResource<Spec = unknown, Status = unknown> extends KubernetesObject {
  /** The desired state. */
  spec?: Spec;
  /** The observed state. */
  status?: Status;
}

/** A custom resource type: API group, version and plural resource name; `namespace` for namespaced ones. */
export interface CustomResourceType {
  /** API group, e.g. `update.edgeless.systems`. */
  group: string;
  /** API version, e.g. `v1alpha1`. */
  version: string;
  /** Plural resource name, e.g. `joiningnodes`. */
  plural: string;
  /** Namespace of a namespaced resource; absent for cluster-scoped ones. */
  namespace?: string;
}

/** Options of every call. */
export interface RequestOptions {
  /** Cancels the call; it then rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Bound on the whole call, retries included; default the client's `timeoutMs`. */
  timeoutMs?: number;
}

/** Options of create and update calls. */
export interface WriteOptions extends RequestOptions {
  /** Field manager recorded for the written fields; default: the server's (derived from the user agent). */
  fieldManager?: string;
}

/** Options of delete calls. */
export interface DeleteOptions extends RequestOptions {
  /**
   * Delete only the object with this UID (`DeleteOptions.preconditions.uid`): one created again under the
   * same name since is left alone, and the call fails with a "Conflict" {@linkcode KubernetesError}.
   */
  uid?: string;
}

/** Options of server-side apply. */
export interface ApplyOptions extends RequestOptions {
  /** Field manager that owns the applied fields, e.g. `join-service`. Required. */
  fieldManager: string;
  /** Take over fields owned by other managers instead of failing with `Conflict`; default false. */
  force?: boolean;
}

/** Options for {@linkcode KubernetesClient}. */
export interface KubernetesClientOptions {
  /** Default bound on each call, retries included; default 10 000 ms. */
  timeoutMs?: number;
  /** Attempts of a GET (first try included); default 4. */
  getAttempts?: number;
  /** Wait before the first GET retry, doubled for each further one up to 1 s; default 100 ms. */
  retryDelayMs?: number;
  /** `User-Agent` header; default `constellation-ts`. */
  userAgent?: string;
  /** Receives a warning per retried GET (request name and reason only). */
  logger?: Logger;
  /**
   * Requests in flight at once; more wait their turn (within their
   * timeout). Default {@linkcode DEFAULT_MAX_CONCURRENT_REQUESTS}. Over
   * HTTP/1.1 every concurrent request needs a connection of its own, and
   * each new one a TLS handshake on both sides.
   */
  maxConcurrentRequests?: number;
}

/** Default bound on a client's requests in flight. */
export const DEFAULT_MAX_CONCURRENT_REQUESTS = 16;
/** Largest answer read (an object in etcd is at most about 1.5 MiB; no call here lists). */
export const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;

/**
 * How long an idle connection is kept for the next request. Below the 5 s
 * after which common HTTP/1.1 servers (Node.js's, so the local API's) close
 * an idle keep-alive connection: a request sent on a connection the server
 * is closing at that moment fails ("peer closed connection without sending
 * TLS close_notify"), and a write is never retried. The load benchmark hit
 * that in about one run of three on a busy machine, where the first writes
 * after a pause of more than 5 s found connections the server had just
 * dropped. Reconnecting after 4 s idle costs a TLS handshake.
 */
const POOL_IDLE_TIMEOUT_MS = 4_000;

const maxRetryDelayMs = 1000;

/** What one request does; `name` identifies it in errors and logs (no bodies). */
interface ApiRequest {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  query?: Record<string, string>;
  body?: string;
  contentType?: string;
  name: string;
}

/** An API collection: its URL path and how it is named in messages. */
interface Collection {
  path: string;
  /** e.g. `secrets` or `joiningnodes.update.edgeless.systems`. */
  resource: string;
  namespace?: string;
  apiVersion: string;
  kind?: string;
}

/** A typed client for one API server and identity. Close it when done. */
export class KubernetesClient implements Disposable {
  /** Base URL of the API server. */
  readonly server: string;
  /** Default namespace of the connection (its context or service account). */
  readonly namespace: string;

  readonly #connection: ConnectionConfig;
  readonly #http: Deno.HttpClient;
  readonly #timeoutMs: number;
  readonly #getAttempts: number;
  readonly #retryDelayMs: number;
  readonly #userAgent: string;
  readonly #logger: Logger;
  /** One slot per request in flight. */
  readonly #slots: WorkPool;

  /** Creates a client; throws {@linkcode KubeconfigError} if the CA or client certificate cannot be loaded. */
  constructor(connection: ConnectionConfig, options: KubernetesClientOptions = {}) {
    this.server = connection.server.replace(/\/+$/, "");
    this.namespace = connection.namespace;
    this.#connection = connection;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#getAttempts = Math.max(1, options.getAttempts ?? 4);
    this.#retryDelayMs = options.retryDelayMs ?? 100;
    this.#userAgent = options.userAgent ?? "constellation-ts";
    this.#logger = options.logger ?? silentLogger;
    this.#slots = new WorkPool({
      concurrency: options.maxConcurrentRequests ?? DEFAULT_MAX_CONCURRENT_REQUESTS,
      maxQueued: Infinity,
    });
    const tls = connection.clientCertificate
      ? { cert: connection.clientCertificate.certPem, key: connection.clientCertificate.keyPem }
      : {};
    try {
      this.#http = Deno.createHttpClient({
        caCerts: connection.caPem ? [connection.caPem] : undefined,
        poolIdleTimeout: POOL_IDLE_TIMEOUT_MS,
        ...tls,
      });
    } catch (error) {
      throw new KubeconfigError(
        "malformed",
        `loading TLS credentials for ${this.server}: ${(error as Error).message}`,
      );
    }
  }

  /** Reads Secret `namespace/name`. */
  async getSecret(namespace: string, name: string, options?: RequestOptions): Promise<Secret> {
    return await this.#get<Secret>(secrets(namespace), name, options);
  }

  /** Creates `secret` in `namespace` (fills in apiVersion, kind and metadata.namespace when absent). */
  async createSecret(namespace: string, secret: Secret, options?: WriteOptions): Promise<Secret> {
    return await this.#create(secrets(namespace), secret, options);
  }

  /**
   * Replaces Secret `namespace/<secret.metadata.name>`. With
   * `metadata.resourceVersion` set, a concurrent change fails with `Conflict`.
   */
  async updateSecret(namespace: string, secret: Secret, options?: WriteOptions): Promise<Secret> {
    return await this.#update(secrets(namespace), secret, options);
  }

  /** Deletes Secret `namespace/name`. */
  async deleteSecret(namespace: string, name: string, options?: RequestOptions): Promise<void> {
    await this.#delete(secrets(namespace), name, options);
  }

  /** Reads ConfigMap `namespace/name`. */
  async getConfigMap(namespace: string, name: string, options?: RequestOptions): Promise<ConfigMap> {
    return await this.#get<ConfigMap>(configMaps(namespace), name, options);
  }

  /** Creates `configMap` in `namespace` (fills in apiVersion, kind and metadata.namespace when absent). */
  async createConfigMap(namespace: string, configMap: ConfigMap, options?: WriteOptions): Promise<ConfigMap> {
    return await this.#create(configMaps(namespace), configMap, options);
  }

  /** Replaces ConfigMap `namespace/<configMap.metadata.name>` (see {@linkcode updateSecret}). */
  async updateConfigMap(namespace: string, configMap: ConfigMap, options?: WriteOptions): Promise<ConfigMap> {
    return await this.#update(configMaps(namespace), configMap, options);
  }

  /** Reads custom resource `name` of `type`. */
  async getCustomResource<T extends KubernetesObject = CustomResource>(
    type: CustomResourceType,
    name: string,
    options?: RequestOptions,
  ): Promise<T> {
    return await this.#get<T>(customResources(type), name, options);
  }

  /** Creates a custom resource (fills in apiVersion from `type` when absent; `kind` must be set). */
  async createCustomResource<T extends KubernetesObject = CustomResource>(
    type: CustomResourceType,
    object: NoInfer<T>,
    options?: WriteOptions,
  ): Promise<T> {
    return await this.#create(customResources(type), object, options);
  }

  /**
   * Server-side apply (`PATCH application/apply-patch+yaml`): creates the
   * object if absent, else sets the fields `object` holds as owned by
   * `options.fieldManager` and removes the ones that manager applied before
   * and no longer holds. Fields owned by other managers with other values
   * fail with `Conflict` unless `force`. `object` needs `kind` and
   * `metadata.name`; apiVersion is filled in from `type` when absent.
   */
  async applyCustomResource<T extends KubernetesObject = CustomResource>(
    type: CustomResourceType,
    object: NoInfer<T>,
    options: ApplyOptions,
  ): Promise<T> {
    const collection = customResources(type);
    const name = objectName(collection, object);
    if (!options.fieldManager) throw new TypeError("server-side apply needs a fieldManager");
    const query: Record<string, string> = { fieldManager: options.fieldManager };
    if (options.force) query.force = "true";
    return await this.#send<T>({
      method: "PATCH",
      path: `${collection.path}/${segment(name, "name")}`,
      query,
      body: JSON.stringify(withDefaults(collection, object)),
      contentType: "application/apply-patch+yaml",
      name: `apply ${describe(collection, name)}`,
    }, options);
  }

  /** Deletes custom resource `name` of `type`. */
  async deleteCustomResource(
    type: CustomResourceType,
    name: string,
    options?: DeleteOptions,
  ): Promise<void> {
    await this.#delete(customResources(type), name, options);
  }

  /** Closes the connection pool. */
  close(): void {
    this.#http.close();
  }

  /** Same as {@linkcode close}. */
  [Symbol.dispose](): void {
    this.close();
  }

  async #get<T>(collection: Collection, name: string, options?: RequestOptions): Promise<T> {
    return await this.#send<T>({
      method: "GET",
      path: `${collection.path}/${segment(name, "name")}`,
      name: `get ${describe(collection, name)}`,
    }, options);
  }

  async #create<T extends KubernetesObject>(
    collection: Collection,
    object: T,
    options?: WriteOptions,
  ): Promise<T> {
    const name = object.metadata?.name ?? object.metadata?.generateName ?? "";
    return await this.#send<T>({
      method: "POST",
      path: collection.path,
      query: fieldManagerQuery(options),
      body: JSON.stringify(withDefaults(collection, object)),
      contentType: "application/json",
      name: `create ${describe(collection, name)}`,
    }, options);
  }

  async #update<T extends KubernetesObject>(
    collection: Collection,
    object: T,
    options?: WriteOptions,
  ): Promise<T> {
    const name = objectName(collection, object);
    return await this.#send<T>({
      method: "PUT",
      path: `${collection.path}/${segment(name, "name")}`,
      query: fieldManagerQuery(options),
      body: JSON.stringify(withDefaults(collection, object)),
      contentType: "application/json",
      name: `update ${describe(collection, name)}`,
    }, options);
  }

  async #delete(collection: Collection, name: string, options?: DeleteOptions): Promise<void> {
    const preconditions = options?.uid === undefined ? undefined : { uid: options.uid };
    await this.#send<unknown>({
      method: "DELETE",
      path: `${collection.path}/${segment(name, "name")}`,
      ...(preconditions
        ? {
          body: JSON.stringify({ kind: "DeleteOptions", apiVersion: "v1", preconditions }),
          contentType: "application/json",
        }
        : {}),
      name: `delete ${describe(collection, name)}`,
    }, options);
  }

  /** Sends `request` within the call's timeout, retrying GETs on retryable failures. */
  async #send<T>(request: ApiRequest, options: RequestOptions = {}): Promise<T> {
    const { signal } = options;
    signal?.throwIfAborted();
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const deadline = Date.now() + timeoutMs;
    const controller = new AbortController();
    const timer = setTimeout(() => {
      const what = `no response from the API server at ${this.server} within ${timeoutMs} ms`;
      controller.abort(unavailableError(request.name, what));
    }, timeoutMs);
    const forwardAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener("abort", forwardAbort, { once: true });
    try {
      const attempts = request.method === "GET" ? this.#getAttempts : 1;
      for (let attempt = 1;; attempt++) {
        try {
          return await this.#slots.run(() => this.#attempt<T>(request, controller.signal), {
            signal: controller.signal,
          });
        } catch (error) {
          if (controller.signal.aborted) throw controller.signal.reason;
          const delayMs = Math.min(this.#retryDelayMs * 2 ** (attempt - 1), maxRetryDelayMs);
          const retry = error instanceof KubernetesError && error.retryable && attempt < attempts &&
            Date.now() + delayMs < deadline;
          if (!retry) throw error;
          this.#logger.warn("kubernetes request failed, retrying", {
            request: request.name,
            reason: error.reason,
            attempt,
            delayMs,
          });
          await sleep(delayMs, controller.signal);
        }
      }
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", forwardAbort);
    }
  }

  async #attempt<T>(request: ApiRequest, signal: AbortSignal): Promise<T> {
    const headers = new Headers({ "Accept": "application/json", "User-Agent": this.#userAgent });
    if (request.contentType) headers.set("Content-Type", request.contentType);
    if (this.#connection.token) {
      const token = await this.#connection.token.token();
      // Loaders refuse such tokens already; a TokenSource from elsewhere must not make Headers.set throw a
      // TypeError that quotes the header, token included, into a log.
      if (!isWellFormedToken(token)) {
        throw new KubernetesError(
          "Unknown",
          0,
          `kubernetes: ${request.name}: the bearer token is malformed (only visible ASCII characters are allowed)`,
        );
      }
      headers.set("Authorization", `Bearer ${token}`);
    }
    const url = new URL(this.server + request.path);
    for (const [key, value] of Object.entries(request.query ?? {})) url.searchParams.set(key, value);

    let status: number;
    let text: string;
    try {
      const response = await fetch(url, {
        method: request.method,
        headers,
        body: request.body,
        signal,
        redirect: "manual",
        client: this.#http,
      });
      status = response.status;
      const body = await readLimited(response.body, MAX_RESPONSE_BYTES);
      if (body === undefined) {
        throw new KubernetesError(
          "Unknown",
          status,
          `kubernetes: ${request.name}: the response is larger than ${MAX_RESPONSE_BYTES} bytes`,
        );
      }
      text = new TextDecoder().decode(body);
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      if (error instanceof KubernetesError) throw error;
      throw unavailableError(request.name, `cannot reach the API server at ${this.server}`, error, {
        usesClientCertificate: this.#connection.clientCertificate !== undefined,
      });
    }
    if (status < 200 || status > 299) throw errorFromResponse(request.name, status, text);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new KubernetesError("Unknown", status, `kubernetes: ${request.name}: the response is not JSON`);
    }
    // Every call here answers one object (no lists): anything else would surface later as a TypeError.
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      throw new KubernetesError(
        "Unknown",
        status,
        `kubernetes: ${request.name}: the response is not a JSON object`,
      );
    }
    return parsed as T;
  }
}

function secrets(namespace: string): Collection {
  return coreCollection(namespace, "secrets", "Secret");
}

function configMaps(namespace: string): Collection {
  return coreCollection(namespace, "configmaps", "ConfigMap");
}

function coreCollection(namespace: string, resource: string, kind: string): Collection {
  return {
    path: `/api/v1/namespaces/${segment(namespace, "namespace")}/${resource}`,
    resource,
    namespace,
    apiVersion: "v1",
    kind,
  };
}

function customResources(type: CustomResourceType): Collection {
  const group = segment(type.group, "group");
  const version = segment(type.version, "version");
  const plural = segment(type.plural, "plural");
  const scope = type.namespace === undefined ? "" : `/namespaces/${segment(type.namespace, "namespace")}`;
  return {
    path: `/apis/${group}/${version}${scope}/${plural}`,
    resource: `${type.plural}.${type.group}`,
    namespace: type.namespace,
    apiVersion: `${type.group}/${type.version}`,
  };
}

/** Checks and encodes one URL path segment: empty, "." and ".." would address another URL. */
function segment(value: string, what: string): string {
  if (value === "" || value === "." || value === "..") throw new TypeError(`invalid ${what} "${value}"`);
  return encodeURIComponent(value);
}

function describe(collection: Collection, name: string): string {
  return collection.namespace === undefined
    ? `${collection.resource} ${name}`
    : `${collection.resource} ${collection.namespace}/${name}`;
}

function objectName(collection: Collection, object: KubernetesObject): string {
  const name = object.metadata?.name;
  if (!name) throw new TypeError(`${collection.resource} object has no metadata.name`);
  return name;
}

/** The object as sent: apiVersion, kind and namespace filled in from the collection when absent. */
function withDefaults(collection: Collection, object: KubernetesObject): KubernetesObject {
  const metadata = collection.namespace === undefined || object.metadata?.namespace !== undefined
    ? object.metadata
    : { ...object.metadata, namespace: collection.namespace };
  return {
    ...object,
    apiVersion: object.apiVersion ?? collection.apiVersion,
    kind: object.kind ?? collection.kind,
    metadata,
  };
}

function fieldManagerQuery(options?: WriteOptions): Record<string, string> | undefined {
  return options?.fieldManager ? { fieldManager: options.fieldManager } : undefined;
}
