/**
 * The local Kubernetes API: an HTTPS server with kube-apiserver's JSON
 * shapes and `Status` errors for the resources the system uses, faithful
 * enough for this project's Kubernetes client, kubeadm's join flow and the
 * real `kubectl` (`get`, `describe`, `delete`):
 *
 * - `GET` (one object or a list, with label and `metadata.name` field
 *   selectors, or as a `meta.k8s.io/v1` Table), `POST`, `PUT`, `DELETE` and
 *   server-side apply (`PATCH` with `application/apply-patch+yaml`) on
 *   Secrets, ConfigMaps and custom resources (cluster-scoped
 *   `/apis/{group}/{version}/{plural}[/{name}]` and namespaced);
 * - discovery (`/api`, `/apis`, `/api/v1`, `/apis/{group}[/{version}]`),
 *   `/version`, read-only Namespaces and an always empty Events list (for
 *   `kubectl describe`); `/openapi/v2` and `/openapi/v3` answer 404, which
 *   `kubectl` tolerates for these commands.
 *
 * Objects get `uid`, `resourceVersion`, `creationTimestamp`, `generation`
 * and `managedFields` as on the real server (see `store.ts`). With
 * `stateDir` they persist there (`state.ts`) and are loaded at start.
 *
 * **As the API server of a kubeadm cluster** (`pkiDir`): started before
 * kubeadm has written the cluster PKI, it listens but fails every TLS
 * handshake until `<pkiDir>/ca.{crt,key}` and `apiserver.{crt,key}` exist;
 * then it serves TLS with `apiserver.crt` (chain with the CA) and
 * authenticates client certificates against `ca.crt` (CN the user, O the
 * groups), as kube-apiserver started by kubeadm does. A client certificate
 * from another CA is 401 Unauthorized; no credentials at all is the
 * anonymous user. It also does what such a cluster does for joining nodes
 * (`bootstrap.ts`, `csr.ts`): bootstrap tokens are authenticated, anonymous
 * and bootstrap token users are held to kubeadm's default RBAC, kubelets
 * (`system:nodes`) to their certificate requests, administrators may do
 * anything and other identities nothing (unless `authorize` allows it),
 * `kube-public/cluster-info` carries the bootstrap signer's signatures,
 * kubelet CertificateSigningRequests are approved and signed, and
 * `/healthz`, `/livez` and `/readyz` answer `ok`.
 *
 * For tests it records requests (`recordRequests`) and injects failures
 * ({@linkcode LocalApi.failNext}, {@linkcode LocalApi.setHang},
 * {@linkcode LocalApi.setDown}).
 *
 * @module
 */
import * as https from "node:https";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import { type Clock, systemClock } from "../clock.ts";
import type { Logger } from "../log/logger.ts";
import { silentLogger } from "../log/logger.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../kubernetes/names.ts";
import { rfc3339 } from "../rfc3339.ts";
import {
  ANONYMOUS,
  authenticateBootstrapToken,
  CLUSTER_INFO,
  clusterRbac,
  type Identity,
  isExpiredBootstrapToken,
  kubeadmRbac,
  withClusterInfoSignatures,
} from "./bootstrap.ts";
import { approveAndSign, CERTIFICATE_SIGNING_REQUESTS } from "./csr.ts";
import {
  apiGroup,
  apiGroupList,
  apiResourceList,
  apiVersions,
  type DiscoveredResource,
} from "./discovery.ts";
import { type ClusterPki, type ClusterPkiLoad, loadClusterPki } from "./pki.ts";
import {
  apiVersionOf,
  CORE_RESOURCES,
  JOINING_NODES,
  NODE_VERSIONS,
  parseRoute,
  type ResourceType,
  type Route,
  SECRETS,
  verbOf,
} from "./resources.ts";
import { loadState, StateWriter } from "./state.ts";
import { forbidden, notFoundPath, statusBody, StatusError } from "./status.ts";
import { ObjectStore } from "./store.ts";
import { toTable, wantsTable } from "./table.ts";
import { decodeApply, decodeDeletePreconditions, decodeJson } from "./validation.ts";

import type { JsonObject as Json } from "./json.ts";

/** What the authorizer is asked. */
export interface AuthorizationRequest {
  /** The user name. */
  user: string;
  /** The user's groups. */
  groups: string[];
  /** get, list, create, update, patch or delete. */
  verb: string;
  /** API group, "" for core. */
  group: string;
  /** Plural resource, e.g. "secrets". */
  resource: string;
  /** The namespace, for namespaced resources. */
  namespace?: string;
  /** The object's name; undefined for list and create. */
  name?: string;
}

/** The server certificate and client CA of a local API that does not serve a kubeadm PKI. */
export interface LocalApiTls {
  /** CA certificate (PEM) client certificates must chain to. */
  caPem: string;
  /** Server certificate chain (PEM). */
  serverChainPem: string;
  /** Server private key (PEM). */
  serverKeyPem: string;
}

/** Options for {@linkcode startLocalApi}; exactly one of `tls` and `pkiDir` is required. */
export interface LocalApiOptions {
  /** Serve with this certificate and CA. */
  tls?: LocalApiTls;
  /**
   * Serve the PKI kubeadm writes to this directory (`/etc/kubernetes/pki`),
   * as the API server of a kubeadm cluster (see the module documentation).
   * It need not exist yet. `requireClientCertificate` is then always false.
   */
  pkiDir?: string;
  /** How often `pkiDir` is looked at until the PKI is there; default 100 ms. */
  pkiPollMs?: number;
  /** Called with the cluster PKI once loaded, before the server serves it (`pkiDir`). */
  onPki?: (pki: ClusterPki) => Promise<void>;
  /**
   * With `tls`: require a client certificate from the CA in the TLS
   * handshake (default true). With false, a certificate is optional, a
   * bearer token is accepted instead, and a request with neither gets 401.
   */
  requireClientCertificate?: boolean;
  /** Authenticates a bearer token (besides bootstrap tokens); undefined rejects it. */
  authenticateToken?: (token: string) => Identity | undefined;
  /** Allows or denies each request (denied: 403 Forbidden); default allows all. */
  authorize?: (request: AuthorizationRequest) => boolean;
  /** Persist objects under this directory and load them at start. */
  stateDir?: string;
  /** Address to bind; default 127.0.0.1. */
  hostname?: string;
  /** Port to bind; default 0 (any free port). */
  port?: number;
  /** Custom resource types served; default {@linkcode NODE_VERSIONS} and {@linkcode JOINING_NODES}. */
  customResources?: ResourceType[];
  /** Namespaces that exist; default default, kube-system, kube-public (and kube-node-lease with `pkiDir`). */
  namespaces?: string[];
  /** How often expired bootstrap tokens are deleted (the token cleaner); default 10 s. */
  tokenCleanupIntervalMs?: number;
  /** Time for timestamps and token expiry; default the system clock. */
  clock?: Clock;
  /** Record every request in {@linkcode LocalApi.requests} (tests); default false. */
  recordRequests?: boolean;
  /** Where failures (e.g. of persistence) are logged; default nowhere. */
  logger?: Logger;
}

/** One request as the server saw it. */
export interface RecordedRequest {
  /** HTTP method. */
  method: string;
  /** URL path, not decoded. */
  path: string;
  /** Query parameters. */
  query: Record<string, string>;
  /** The `content-type` header. */
  contentType?: string;
  /** Authenticated user name, or undefined when authentication failed. */
  user?: string;
  /** HTTP status answered; 0 while unanswered or when the connection was dropped. */
  status: number;
}

/** How injected failures fail: 503 ServiceUnavailable with a Status, or a dropped connection. */
export type FailureMode = "unavailable" | "reset";

/** A running local API. */
export interface LocalApi extends AsyncDisposable {
  /** `https://<address>:<port>` (127.0.0.1 when bound to all addresses). */
  readonly url: string;
  /** The bound port, known before the server serves TLS (`pkiDir`). */
  readonly port: number;
  /** The cluster PKI once loaded (`pkiDir`); undefined before and with `tls`. */
  readonly clusterPki: ClusterPki | undefined;
  /** Resolves once the server serves TLS (at once with `tls`); rejects when it is closed first. */
  whenServing(options?: { signal?: AbortSignal }): Promise<void>;
  /** Every request in order of arrival, with `recordRequests` (else empty). */
  readonly requests: RecordedRequest[];
  /** The stored object at an object URL path (as the server would return it), or undefined. */
  getObject(path: string): Json | undefined;
  /** Creates or replaces the object at an object URL path, as a fixture; returns it as stored. */
  putObject(path: string, object: Json): Json;
  /** Deletes the object at an object URL path; returns whether it existed. */
  deleteObject(path: string): boolean;
  /** Resolves once every change so far is persisted (at once without `stateDir`). */
  flush(): Promise<void>;
  /** The next `count` requests fail (after TLS, before authentication). */
  failNext(count: number, mode?: FailureMode): void;
  /** While true, requests are recorded but never answered (until close). */
  setHang(hang: boolean): void;
  /** Stops listening and drops every connection (true), or listens again on the same port (false). */
  setDown(down: boolean): Promise<void>;
  /** Stops the server, drops every connection and waits for pending writes. */
  close(): Promise<void>;
}

const maxBodyBytes = 3 * 1024 * 1024;
/** kube-apiserver's health endpoints (anonymous users may read them). */
const healthPaths = new Set(["/healthz", "/livez", "/readyz"]);
const objectVerbs = ["create", "delete", "get", "list", "patch", "update"];
/** Namespaces, served read-only from the configured set. */
const NAMESPACES: ResourceType = {
  group: "",
  version: "v1",
  plural: "namespaces",
  kind: "Namespace",
  namespaced: false,
  shortNames: ["ns"],
};
/** Events, always an empty list. */
const EVENTS: ResourceType = {
  group: "",
  version: "v1",
  plural: "events",
  kind: "Event",
  namespaced: true,
  shortNames: ["ev"],
};
/** The version `/version` reports. */
const VERSION = {
  major: "1",
  minor: "32",
  gitVersion: "v1.32.0-constellation-local",
  platform: "linux/amd64",
};

/** Starts the local API. */
export async function startLocalApi(options: LocalApiOptions): Promise<LocalApi> {
  if ((options.tls === undefined) === (options.pkiDir === undefined)) {
    throw new Error("the local API needs exactly one of tls and pkiDir");
  }
  const clock = options.clock ?? systemClock;
  const logger = options.logger ?? silentLogger;
  const clusterMode = options.pkiDir !== undefined;
  const hostname = options.hostname ?? "127.0.0.1";
  let clusterPki: ClusterPki | undefined;
  const resources: ResourceType[] = [
    ...CORE_RESOURCES,
    ...(options.customResources ?? [NODE_VERSIONS, JOINING_NODES]),
    ...(clusterMode ? [CERTIFICATE_SIGNING_REQUESTS] : []),
  ];
  const routable = [...resources, NAMESPACES, EVENTS];
  const discovered: DiscoveredResource[] = [
    ...resources.map((r) => ({ ...r, verbs: objectVerbs })),
    { ...NAMESPACES, verbs: ["get", "list"] },
    { ...EVENTS, verbs: ["list"] },
  ];
  const now = () => rfc3339(clock.now());
  const store = new ObjectStore(
    options.namespaces ??
      ["default", "kube-system", "kube-public", ...(clusterMode ? ["kube-node-lease"] : [])],
    now,
    { trackChanges: options.stateDir !== undefined },
  );
  const startedAt = now();
  let writer: StateWriter | undefined;
  if (options.stateDir !== undefined) {
    try {
      await Deno.mkdir(options.stateDir, { recursive: true, mode: 0o700 });
    } catch (error) {
      if (!(error instanceof Deno.errors.AlreadyExists)) throw error;
      throw new Error(`--state-dir ${options.stateDir} exists and is not a directory`);
    }
    const state = await loadState(options.stateDir);
    if (state) {
      try {
        store.restore(state.snapshot);
      } catch (error) {
        throw new Error(`${options.stateDir}: ${(error as Error).message}`, { cause: error });
      }
    }
    writer = new StateWriter({ stateDir: options.stateDir, store, generation: state?.generation });
  }
  const persist = async () => {
    if (!writer) return;
    try {
      await writer.save();
    } catch (error) {
      logger.error("cannot persist the local API state", { error: (error as Error).message });
      throw new StatusError(500, "InternalError", `cannot persist: ${(error as Error).message}`);
    }
  };
  const requests: RecordedRequest[] = [];
  const sockets = new Set<Socket>();
  let failures: { remaining: number; mode: FailureMode } = { remaining: 0, mode: "unavailable" };
  let hang = false;

  /**
   * The HTTPS server, with its server certificate (chain) and key; without them (`pkiDir` before kubeadm
   * wrote the PKI) every handshake fails until {@linkcode https.Server.setSecureContext} gives them.
   * One server for the whole life: closing a placeholder and binding again would let another process
   * take the port in between.
   */
  const createTlsServer = (tls?: { certPem: string; keyPem: string; caPem: string }): https.Server => {
    const tlsServer = https.createServer({
      ...(tls && { key: tls.keyPem, cert: tls.certPem, ca: [tls.caPem] }),
      requestCert: true,
      rejectUnauthorized: clusterMode ? false : options.requireClientCertificate ?? true,
    }, (req, res) => {
      handle(req, res).catch((error) => {
        if (res.headersSent) return;
        sendStatus(res, new StatusError(500, "InternalError", `internal error: ${error}`));
      });
    });
    tlsServer.on("secureConnection", track);
    // Failed handshakes (foreign client certificates, or no PKI yet) are the clients' problem.
    tlsServer.on("tlsClientError", () => {});
    return tlsServer;
  };
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  };

  const server = createTlsServer(
    options.tls && {
      certPem: options.tls.serverChainPem,
      keyPem: options.tls.serverKeyPem,
      caPem: options.tls.caPem,
    },
  );

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "https://local");
    const record: RecordedRequest = {
      method: req.method ?? "",
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      contentType: req.headers["content-type"],
      status: 0,
    };
    if (options.recordRequests) requests.push(record);
    res.on("finish", () => record.status = res.statusCode);

    if (failures.remaining > 0) {
      failures.remaining--;
      if (failures.mode === "reset") {
        req.socket.destroy();
        return;
      }
      sendStatus(
        res,
        new StatusError(503, "ServiceUnavailable", "the server is currently unable to handle the request"),
      );
      return;
    }
    if (hang) return;

    try {
      const identity = authenticate(req);
      record.user = identity.user;
      if (clusterMode && req.method === "GET" && healthPaths.has(url.pathname)) {
        res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
        res.end("ok");
        return;
      }
      const body = await readBody(req);
      const { code, object } = await serve(req.method ?? "", url, body, req.headers, identity);
      sendJson(res, code, object);
    } catch (error) {
      if (!(error instanceof StatusError)) throw error;
      sendStatus(res, error);
    }
  }

  // A connection's client certificate is the same for all its requests; reading it is a good part of a
  // request's cost (it is rebuilt from the TLS session each time), so it is read once per connection.
  const certificateIdentities = new WeakMap<TLSSocket, Identity>();

  function authenticate(req: IncomingMessage): Identity {
    const socket = req.socket as TLSSocket;
    if (socket.authorized) {
      let identity = certificateIdentities.get(socket);
      if (!identity) {
        const subject = socket.getPeerCertificate().subject as unknown as Record<string, string | string[]>;
        const groups = subject.O === undefined ? [] : ([] as string[]).concat(subject.O);
        identity = { user: String(subject.CN ?? ""), groups };
        certificateIdentities.set(socket, identity);
      }
      return identity;
    }
    // A certificate that does not chain to the cluster CA is an authentication failure, not anonymous.
    const presented = Object.keys(socket.getPeerCertificate?.() ?? {}).length > 0;
    if (presented) throw new StatusError(401, "Unauthorized", "Unauthorized");
    const header = req.headers.authorization ?? "";
    const match = /^Bearer (.+)$/.exec(header);
    const fromToken = match ? options.authenticateToken?.(match[1]) : undefined;
    if (fromToken) return fromToken;
    if (clusterMode && match) {
      const secret = (namespace: string, name: string) => store.peek({ resource: SECRETS, namespace, name });
      const bootstrap = authenticateBootstrapToken(match[1], secret, clock.now());
      if (bootstrap) return bootstrap;
    }
    // As kube-apiserver with anonymous auth (kubeadm's default): no credentials at all is anonymous.
    if (clusterMode && !header) return ANONYMOUS;
    throw new StatusError(401, "Unauthorized", "Unauthorized");
  }

  /** Discovery, `/version` and the OpenAPI paths; undefined for every other path. */
  function serveDiscovery(method: string, url: URL, identity: Identity): Json | undefined {
    const parts = url.pathname.split("/").filter((part) => part !== "");
    const isDiscovery = (parts[0] === "api" && parts.length <= 2) ||
      (parts[0] === "apis" && parts.length <= 3) ||
      url.pathname === "/version" || parts[0] === "openapi";
    if (!isDiscovery || method !== "GET") return undefined;
    if (identity.user === ANONYMOUS.user && url.pathname !== "/version") {
      throw new StatusError(
        403,
        "Forbidden",
        `forbidden: User "${ANONYMOUS.user}" cannot get path "${url.pathname}"`,
        {},
      );
    }
    let document: Json | undefined;
    if (url.pathname === "/version") document = { ...VERSION, buildDate: startedAt };
    else if (parts[0] === "api" && parts.length === 1) document = apiVersions(`${hostname}:${port}`);
    else if (parts[0] === "api") document = apiResourceList(discovered, "", parts[1]);
    else if (parts.length === 1) document = apiGroupList(discovered);
    else if (parts.length === 2) document = apiGroup(discovered, parts[1]);
    else document = apiResourceList(discovered, parts[1], parts[2]);
    if (!document) throw notFoundPath();
    return document;
  }

  async function serve(
    method: string,
    url: URL,
    body: string,
    headers: IncomingMessage["headers"],
    identity: Identity,
  ): Promise<{ code: number; object: Json }> {
    const discovery = serveDiscovery(method, url, identity);
    if (discovery) return { code: 200, object: discovery };
    const route = parseRoute(url.pathname, routable);
    const verb = verbOf(method, route);
    if (!route || !verb) throw notFoundPath();
    const { resource, namespace, name } = route;
    const request = { ...identity, verb, group: resource.group, resource: resource.plural, namespace, name };
    // In cluster mode as a kubeadm cluster decides, an identity it does not know refused; otherwise open.
    const allowed = clusterMode
      ? kubeadmRbac(request) ?? clusterRbac(request) ?? options.authorize?.(request) ?? false
      : options.authorize?.(request) ?? true;
    if (!allowed) throw forbidden(identity.user, verb, route);
    if (resource === NAMESPACES || resource === EVENTS) return readOnly(route, verb, url, headers);
    const userAgent = String(headers["user-agent"] ?? "");
    const fieldManager = url.searchParams.get("fieldManager") ?? managerFromUserAgent(userAgent);

    switch (verb) {
      case "get": {
        const object = store.get(route);
        if (
          clusterMode && resource.plural === "configmaps" && namespace === CLUSTER_INFO.namespace &&
          name === CLUSTER_INFO.name
        ) {
          const tokens = store.objectsUnder("/api/v1/namespaces/kube-system/secrets/bootstrap-token-");
          return { code: 200, object: await withClusterInfoSignatures(object, tokens, clock.now()) };
        }
        return { code: 200, object: maybeTable(resource, [object], url, headers) ?? object };
      }
      case "list": {
        const items = store.list(route, {
          labelSelector: url.searchParams.get("labelSelector") ?? undefined,
          fieldSelector: url.searchParams.get("fieldSelector") ?? undefined,
        });
        return { code: 200, object: maybeTable(resource, items, url, headers) ?? listOf(resource, items) };
      }
      case "create": {
        const object = decodeJson(body, headers, resource);
        if (resource === CERTIFICATE_SIGNING_REQUESTS) {
          // Approved and signed before it is stored, in one write: a save between the two (another
          // request's) would journal it without its certificate, and a client's own status is not taken.
          delete object.status;
          await approveAndSign(object, identity, clusterPki!.signer);
        }
        const created = store.create(route, object, fieldManager, "Update");
        await persist();
        return { code: 201, object: created };
      }
      case "update": {
        const object = decodeJson(body, headers, resource);
        const updated = store.update(route, object, fieldManager);
        await persist();
        return { code: 200, object: updated };
      }
      case "patch": {
        const object = decodeApply(body, headers, resource, route);
        if (!url.searchParams.get("fieldManager")) {
          throw new StatusError(
            422,
            "Invalid",
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
          );
        }
        const result = store.apply(route, object, fieldManager, url.searchParams.get("force") === "true");
        await persist();
        return result;
      }
      case "delete": {
        const deleted = store.delete(route, decodeDeletePreconditions(body, headers));
        await persist();
        if (resource.group === "") {
          const metadata = deleted.metadata as Json;
          return {
            code: 200,
            object: {
              kind: "Status",
              apiVersion: "v1",
              metadata: {},
              status: "Success",
              details: { name, kind: resource.plural, uid: metadata.uid },
            },
          };
        }
        return { code: 200, object: deleted };
      }
    }
    throw notFoundPath();
  }

  /** Namespaces (the configured set) and Events (none). */
  function readOnly(route: Route, verb: string, url: URL, headers: IncomingMessage["headers"]) {
    const namespaceObject = (name: string): Json => ({
      kind: "Namespace",
      apiVersion: "v1",
      metadata: { name, uid: `namespace-${name}`, resourceVersion: "1", creationTimestamp: startedAt },
      spec: { finalizers: ["kubernetes"] },
      status: { phase: "Active" },
    });
    let items: Json[] = [];
    if (route.resource === NAMESPACES) {
      if (verb === "get") {
        if (!store.namespaces.includes(route.name!)) {
          throw new StatusError(404, "NotFound", `namespaces "${route.name}" not found`, {
            name: route.name,
            kind: "namespaces",
          });
        }
        const object = namespaceObject(route.name!);
        return { code: 200, object: maybeTable(NAMESPACES, [object], url, headers) ?? object };
      }
      if (verb !== "list") throw notFoundPath();
      items = store.namespaces.sort().map(namespaceObject);
    } else if (verb !== "list") {
      throw notFoundPath();
    }
    return {
      code: 200,
      object: maybeTable(route.resource, items, url, headers) ?? listOf(route.resource, items),
    };
  }

  function listOf(resource: ResourceType, items: Json[]): Json {
    return {
      kind: `${resource.kind}List`,
      apiVersion: apiVersionOf(resource),
      metadata: { resourceVersion: store.resourceVersion },
      items,
    };
  }

  function maybeTable(
    resource: ResourceType,
    items: Json[],
    url: URL,
    headers: IncomingMessage["headers"],
  ): Json | undefined {
    if (!wantsTable(headers.accept)) return undefined;
    return toTable(resource.kind, items, {
      resourceVersion: store.resourceVersion,
      includeObject: url.searchParams.get("includeObject") ?? undefined,
      now: clock.now(),
    });
  }

  function routeOf(path: string): Route & { name: string } {
    const route = parseRoute(path, resources);
    if (!route?.name) throw new Error(`not an object path of the local API: ${path}`);
    return route as Route & { name: string };
  }

  async function listen(port: number): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, hostname, () => {
        server.off("error", reject);
        resolve();
      });
    });
    return (server.address() as { port: number }).port;
  }

  let listening = true;
  let closed = false;
  async function stop(): Promise<void> {
    if (!listening) return;
    listening = false;
    const closing = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of sockets) socket.destroy();
    await closing;
  }

  const port = await listen(options.port ?? 0);
  const urlHost = hostname === "0.0.0.0" || hostname === "::" || hostname === "[::]"
    ? "127.0.0.1"
    : hostname.includes(":") && !hostname.startsWith("[")
    ? `[${hostname}]`
    : hostname;
  const url = `https://${urlHost}:${port}`;

  // With pkiDir: wait for kubeadm's PKI, then give it to the TLS server.
  let serving: Promise<void> = Promise.resolve();
  let pollTimer: ReturnType<typeof setTimeout> | undefined;
  if (clusterMode) {
    const closedEarly = () => new Error("the local API was closed before the cluster PKI appeared");
    serving = new Promise<void>((resolve, reject) => {
      let lastProblem: string | undefined;
      const poll = async () => {
        pollTimer = undefined;
        if (closed) return reject(closedEarly());
        const { pki: loaded, problem } = await loadClusterPki(options.pkiDir!)
          .catch((error): ClusterPkiLoad => ({ problem: (error as Error).message }));
        if (closed) return reject(closedEarly());
        if (!loaded) {
          // Said once per problem: a PKI that never becomes usable must not leave the API silently waiting.
          if (problem !== lastProblem) logger.info("waiting for a usable cluster PKI", { problem });
          lastProblem = problem;
          pollTimer = setTimeout(poll, options.pkiPollMs ?? 100);
          return;
        }
        try {
          await options.onPki?.(loaded);
        } catch (error) {
          return reject(error);
        }
        clusterPki = loaded;
        server.setSecureContext({
          key: loaded.serverKeyPem,
          cert: loaded.serverChainPem,
          ca: [loaded.ca.certPem],
        });
        resolve();
      };
      poll();
    });
    serving.catch(() => {}); // a server closed early rejects only its callers of whenServing
  }
  const close = async () => {
    closed = true;
    clearInterval(tokenCleaner);
    clearTimeout(pollTimer);
    await stop();
    await writer?.close();
  };
  const persistInBackground = () => {
    persist().catch(() => {}); // logged by persist
  };
  // kube-controller-manager's token cleaner: an orphaned token (its ticket lost) lives only until its TTL.
  const tokenCleaner = setInterval(() => {
    const route = { resource: SECRETS, namespace: KUBE_SYSTEM_NAMESPACE };
    const expired = store.list(route).filter((secret) => isExpiredBootstrapToken(secret, clock.now()));
    for (const secret of expired) store.remove({ ...route, name: (secret.metadata as Json).name as string });
    if (expired.length > 0) {
      logger.info("deleted expired bootstrap tokens", { count: expired.length });
      persistInBackground();
    }
  }, options.tokenCleanupIntervalMs ?? 10_000);

  return {
    url,
    port,
    get clusterPki() {
      return clusterPki;
    },
    whenServing(waitOptions = {}) {
      const signal = waitOptions.signal;
      if (!signal) return serving;
      return Promise.race([
        serving,
        new Promise<never>((_, reject) => {
          signal.throwIfAborted();
          signal.addEventListener("abort", () => reject(signal.reason), { once: true });
        }),
      ]);
    },
    requests,
    getObject(path) {
      const route = routeOf(path);
      return store.has(route) ? store.get(route) : undefined;
    },
    putObject(path, object) {
      const stored = store.put(routeOf(path), object, "fake-apiserver-fixture");
      persistInBackground();
      return stored;
    },
    deleteObject(path) {
      const existed = store.remove(routeOf(path));
      if (existed) persistInBackground();
      return existed;
    },
    flush: () => writer?.flush() ?? Promise.resolve(),
    failNext(count, mode = "unavailable") {
      failures = { remaining: count, mode };
    },
    setHang(value) {
      hang = value;
    },
    async setDown(down) {
      if (down) return await stop();
      if (listening) return;
      await listen(port);
      listening = true;
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}

function managerFromUserAgent(userAgent: string): string {
  return userAgent.split("/")[0].slice(0, 128);
}

function sendJson(res: ServerResponse, code: number, object: Json): void {
  res.writeHead(code, {
    "content-type": "application/json",
    "cache-control": "no-cache, private",
    "audit-id": crypto.randomUUID(),
  });
  res.end(JSON.stringify(object));
}

function sendStatus(res: ServerResponse, error: StatusError): void {
  sendJson(res, error.code, statusBody(error));
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > maxBodyBytes) throw new StatusError(413, "RequestEntityTooLarge", "Request entity too large");
    chunks.push(chunk);
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return new TextDecoder().decode(bytes);
}
