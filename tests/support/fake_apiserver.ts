/**
 * A faithful fake of kube-apiserver for tests: real HTTPS with client
 * certificates from a test CA, bearer tokens that expire, and exactly the
 * endpoints the project's Kubernetes client calls, with the real JSON shapes
 * and `Status` errors:
 *
 * - `GET/PUT/DELETE /api/v1/namespaces/{ns}/{secrets|configmaps}/{name}`,
 *   `POST /api/v1/namespaces/{ns}/{secrets|configmaps}`
 * - the same verbs on custom resources, cluster-scoped
 *   (`/apis/{group}/{version}/{plural}[/{name}]`) and namespaced
 *   (`/apis/{group}/{version}/namespaces/{ns}/{plural}[/{name}]`)
 * - `PATCH` with `application/apply-patch+yaml` (server-side apply) on all of them
 *
 * Objects get `uid`, `resourceVersion`, `creationTimestamp` (and `generation`
 * for custom resources) on create, `managedFields` from a per-leaf field
 * ownership model, so apply conflicts and `force` behave as on the real
 * server. Anything else answers 404 with a `Status` body.
 *
 * **The API server of a kubeadm cluster** (`pkiDir`): started before
 * kubeadm has written the cluster PKI, it listens but drops every
 * connection until `<pkiDir>/ca.{crt,key}` and `apiserver.{crt,key}` exist;
 * then it serves TLS with `apiserver.crt` (chain with the CA) and checks
 * client certificates against `ca.crt`, as kube-apiserver started by
 * kubeadm does. It then also does what such a cluster does for joining
 * nodes (`fake_apiserver_bootstrap.ts`, `fake_apiserver_csr.ts`): anonymous
 * requests and bootstrap tokens are authenticated and held to kubeadm's
 * default RBAC, `kube-public/cluster-info` carries the bootstrap signer's
 * signatures, kubelet CertificateSigningRequests are approved and signed,
 * and `/healthz`, `/livez` and `/readyz` answer `ok`.
 *
 * @module
 */
import * as https from "node:https";
import * as net from "node:net";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { type Clock, systemClock } from "../../src/clock.ts";
import type { KubeletCa } from "../../src/joinservice/kubeletca.ts";
import { rfc3339 } from "../../src/rfc3339.ts";
import { createTestCa, issueCert, issueLoopbackServerCert, type TestCa, type TestCert } from "./pki.ts";
import {
  ANONYMOUS,
  authenticateBootstrapToken,
  CLUSTER_INFO,
  type Identity,
  kubeadmRbac,
  withClusterInfoSignatures,
} from "./fake_apiserver_bootstrap.ts";
import { approveAndSign, CERTIFICATE_SIGNING_REQUESTS } from "./fake_apiserver_csr.ts";
import { loadClusterPki } from "./fake_apiserver_pki.ts";

/** A custom resource type the fake serves. */
export interface FakeCustomResource {
  group: string;
  version: string;
  plural: string;
  kind: string;
  namespaced: boolean;
}

/** Constellation's NodeVersion (cluster-scoped). */
export const NODE_VERSIONS: FakeCustomResource = {
  group: "update.edgeless.systems",
  version: "v1alpha1",
  plural: "nodeversions",
  kind: "NodeVersion",
  namespaced: false,
};

/** Constellation's JoiningNode (cluster-scoped). */
export const JOINING_NODES: FakeCustomResource = {
  group: "update.edgeless.systems",
  version: "v1alpha1",
  plural: "joiningnodes",
  kind: "JoiningNode",
  namespaced: false,
};

/** What the authorizer is asked. */
export interface AuthorizationRequest {
  user: string;
  groups: string[];
  /** get, create, update, patch or delete. */
  verb: string;
  /** API group, "" for core. */
  group: string;
  /** Plural resource, e.g. "secrets". */
  resource: string;
  namespace?: string;
  name?: string;
}

/** Options for {@linkcode startFakeApiServer}. */
export interface FakeApiServerOptions {
  /** Custom resource types served; default {@linkcode NODE_VERSIONS} and {@linkcode JOINING_NODES}. */
  customResources?: FakeCustomResource[];
  /** Namespaces that exist; default default, kube-system, kube-public. */
  namespaces?: string[];
  /**
   * Require a client certificate from the test CA in the TLS handshake
   * (default true): a missing or foreign certificate fails the handshake.
   * With false, as kube-apiserver does, a certificate is optional, a bearer
   * token is accepted instead, and a request with neither gets 401.
   */
  requireClientCertificate?: boolean;
  /** Subject of the generated client certificate; default `CN=kubernetes-admin, O=system:masters`. */
  clientSubject?: string;
  /** Lifetime of the generated bearer token {@linkcode FakeApiServer.token}; default 1 h (negative: expired). */
  tokenTtlMs?: number;
  /** Allows or denies each request (denied: 403 Forbidden); default allows all. */
  authorize?: (request: AuthorizationRequest) => boolean;
  /** Time for token expiry and timestamps; default the system clock. */
  clock?: Clock;
  /**
   * Serve the PKI kubeadm writes to this directory (`<node root>/etc/kubernetes/pki`)
   * instead of a generated test PKI, as the API server of a kubeadm cluster
   * (see the module documentation). It need not exist yet: until it holds
   * `ca.crt`, `ca.key`, `apiserver.crt` and `apiserver.key`, connections are
   * dropped. `requireClientCertificate` is then always false.
   */
  pkiDir?: string;
  /** How often the `pkiDir` is looked at until the PKI is there; default 100 ms. */
  pkiPollMs?: number;
}

/** One request as the fake saw it. */
export interface RecordedRequest {
  method: string;
  /** URL path, not decoded. */
  path: string;
  query: Record<string, string>;
  contentType?: string;
  /** Authenticated user name, or undefined when authentication failed. */
  user?: string;
  /** HTTP status answered; 0 while unanswered or when the connection was dropped. */
  status: number;
}

/** How injected failures fail. */
export type FailureMode =
  | "unavailable" // answer 503 ServiceUnavailable with a Status
  | "reset"; // drop the connection without an answer

/** Options for {@linkcode FakeApiServer.kubeconfig}. */
export interface FakeKubeconfigOptions {
  /** Credentials written: the client certificate (default) or the bearer token. */
  auth?: "certificate" | "token";
  /** Another client certificate, e.g. one issued by a foreign CA. */
  clientCert?: TestCert;
  /** Another bearer token, e.g. from {@linkcode FakeApiServer.issueToken}. */
  token?: string;
  /** Namespace of the context. */
  namespace?: string;
}

/** A running fake API server. */
export interface FakeApiServer extends AsyncDisposable {
  /** `https://127.0.0.1:<port>`. */
  readonly url: string;
  /** The port, known before the server serves TLS (`pkiDir`). */
  readonly port: number;
  /**
   * CA of the server certificate and of accepted client certificates. With
   * `pkiDir`, this and the client credentials below throw until
   * {@linkcode whenServing} has resolved.
   */
  readonly ca: TestCa;
  readonly caPem: string;
  /** A client certificate from `ca` with the `clientSubject`. */
  readonly clientCertPem: string;
  readonly clientKeyPem: string;
  /** Resolves once the server serves TLS (at once without `pkiDir`); rejects when it is closed first. */
  whenServing(options?: { signal?: AbortSignal }): Promise<void>;
  /** A bearer token for user `token-user` with the configured lifetime. */
  readonly token: string;
  /** Every request, in order of arrival. */
  readonly requests: RecordedRequest[];
  /** A kubeconfig for this server (YAML). */
  kubeconfig(options?: FakeKubeconfigOptions): string;
  /** Issues a bearer token for `user`, valid for `ttlMs` (negative: already expired). */
  issueToken(user: string, ttlMs: number): string;
  /** Issues a client certificate from the server's CA. */
  issueClientCert(subject: string): Promise<TestCert>;
  /** The stored object at an object URL path (as the server would return it), or undefined. */
  getObject(path: string): Record<string, unknown> | undefined;
  /** Creates or replaces the object at an object URL path, as a test fixture; returns it as stored. */
  putObject(path: string, object: Record<string, unknown>): Record<string, unknown>;
  /** Deletes the object at an object URL path; returns whether it existed. */
  deleteObject(path: string): boolean;
  /** The next `count` requests fail (after TLS, before authentication). */
  failNext(count: number, mode?: FailureMode): void;
  /** While true, requests are recorded but never answered (until close). */
  setHang(hang: boolean): void;
  /** Stops listening and drops every connection (true), or listens again on the same port (false). */
  setDown(down: boolean): Promise<void>;
  /** Stops the server and drops every connection. */
  close(): Promise<void>;
}

type Json = Record<string, unknown>;

/** A served resource type. */
interface Resource {
  group: string;
  version: string;
  plural: string;
  kind: string;
  namespaced: boolean;
}

const coreResources: Resource[] = [
  { group: "", version: "v1", plural: "secrets", kind: "Secret", namespaced: true },
  { group: "", version: "v1", plural: "configmaps", kind: "ConfigMap", namespaced: true },
];

/** A request's target. */
interface Route {
  resource: Resource;
  namespace?: string;
  name?: string;
}

/** Who owns which leaf fields of an object, per field manager. */
interface Manager {
  operation: "Apply" | "Update";
  apiVersion: string;
  time: string;
  /** Leaf paths, each a JSON array of keys. */
  fields: Set<string>;
}

interface Stored {
  object: Json;
  managers: Map<string, Manager>;
}

/** An error answered as a `Status`. */
class StatusError extends Error {
  constructor(readonly code: number, readonly reason: string, message: string, readonly details?: Json) {
    super(message);
  }
}

const maxBodyBytes = 3 * 1024 * 1024;
/** kube-apiserver's health endpoints (anonymous users may read them). */
const healthPaths = new Set(["/healthz", "/livez", "/readyz"]);
const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const configKey = /^[-._a-zA-Z0-9]+$/;
const generateNameAlphabet = "bcdfghjklmnpqrstvwxz2456789";

/** Starts a fake API server on 127.0.0.1 with a fresh test PKI. */
export async function startFakeApiServer(options: FakeApiServerOptions = {}): Promise<FakeApiServer> {
  const clock = options.clock ?? systemClock;
  const clusterMode = options.pkiDir !== undefined;
  const clientSubject = options.clientSubject ?? "CN=kubernetes-admin, O=system:masters";
  /** The CA and client credentials: a fresh test PKI, or (pkiDir) kubeadm's once it is written. */
  let pki: { ca: TestCa; clientCert: TestCert; signer?: KubeletCa } | undefined;
  const resources = [
    ...coreResources,
    ...(options.customResources ?? [NODE_VERSIONS, JOINING_NODES]),
    ...(clusterMode ? [CERTIFICATE_SIGNING_REQUESTS] : []),
  ];
  const namespaces = new Set(
    options.namespaces ??
      ["default", "kube-system", "kube-public", ...(clusterMode ? ["kube-node-lease"] : [])],
  );
  const tokens = new Map<string, { user: string; expiresAt: number }>();
  const store = new Map<string, Stored>();
  const requests: RecordedRequest[] = [];
  const sockets = new Set<Socket>();
  let resourceVersion = 1000;
  let failures: { remaining: number; mode: FailureMode } = { remaining: 0, mode: "unavailable" };
  let hang = false;

  const issueToken = (user: string, ttlMs: number): string => {
    const token = crypto.getRandomValues(new Uint8Array(24)).toHex();
    tokens.set(token, { user, expiresAt: clock.now() + ttlMs });
    return token;
  };
  const token = issueToken("token-user", options.tokenTtlMs ?? 60 * 60 * 1000);
  const now = () => rfc3339(clock.now());

  /** The HTTPS server for a server certificate (chain) and key. */
  const createTlsServer = (tls: { certPem: string; keyPem: string }): net.Server => {
    const tlsServer = https.createServer({
      key: tls.keyPem,
      cert: tls.certPem,
      ca: [pki!.ca.certPem],
      requestCert: true,
      rejectUnauthorized: clusterMode ? false : options.requireClientCertificate ?? true,
    }, (req, res) => {
      handle(req, res).catch((error) => {
        if (res.headersSent) return;
        sendStatus(res, new StatusError(500, "InternalError", `internal error in the fake: ${error}`));
      });
    });
    tlsServer.on("secureConnection", track);
    // Failed handshakes (foreign client certificates) are expected in tests.
    tlsServer.on("tlsClientError", () => {});
    return tlsServer;
  };
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  };

  let server: net.Server;
  if (clusterMode) {
    // Holds the port and drops connections until kubeadm has written the PKI.
    server = net.createServer((socket) => socket.destroy());
  } else {
    const ca = await createTestCa("CN=fake-kubernetes-ca");
    const serverCert = await issueLoopbackServerCert(ca, "CN=kube-apiserver");
    pki = { ca, clientCert: await issueCert(ca, { subject: clientSubject, usages: ["clientAuth"] }) };
    server = createTlsServer(serverCert);
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "https://fake");
    const record: RecordedRequest = {
      method: req.method ?? "",
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      contentType: req.headers["content-type"],
      status: 0,
    };
    requests.push(record);
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

  function authenticate(req: IncomingMessage): Identity {
    const socket = req.socket as TLSSocket;
    if (socket.authorized) {
      const subject = socket.getPeerCertificate().subject as unknown as Record<string, string | string[]>;
      const groups = subject.O === undefined ? [] : ([] as string[]).concat(subject.O);
      return { user: String(subject.CN ?? ""), groups };
    }
    const header = req.headers.authorization ?? "";
    const match = /^Bearer (.+)$/.exec(header);
    const entry = match ? tokens.get(match[1]) : undefined;
    if (entry && entry.expiresAt > clock.now()) return { user: entry.user, groups: [] };
    if (clusterMode && match) {
      const secret = (namespace: string, name: string) =>
        store.get(objectPath({ resource: coreResources[0], namespace, name }))?.object;
      const bootstrap = authenticateBootstrapToken(match[1], secret, clock.now());
      if (bootstrap) return bootstrap;
    }
    // As kube-apiserver with anonymous auth (kubeadm's default): no credentials at all is anonymous.
    if (clusterMode && !header) return ANONYMOUS;
    throw new StatusError(401, "Unauthorized", "Unauthorized");
  }

  async function serve(
    method: string,
    url: URL,
    body: string,
    headers: IncomingMessage["headers"],
    identity: Identity,
  ): Promise<{ code: number; object: Json }> {
    const route = parseRoute(url.pathname, resources);
    const verb = verbOf(method, route);
    if (!route || !verb) throw notFoundPath();
    const { resource, namespace, name } = route;
    const request = { ...identity, verb, group: resource.group, resource: resource.plural, namespace, name };
    const allowed = (clusterMode ? kubeadmRbac(request) : undefined) ?? options.authorize?.(request) ?? true;
    if (!allowed) throw forbidden(identity.user, verb, route);
    const userAgent = String(headers["user-agent"] ?? "");
    const fieldManager = url.searchParams.get("fieldManager") ?? managerFromUserAgent(userAgent);

    switch (verb) {
      case "get": {
        const object = render(find(route));
        if (
          clusterMode && resource.plural === "configmaps" && namespace === CLUSTER_INFO.namespace &&
          name === CLUSTER_INFO.name
        ) {
          return {
            code: 200,
            object: await withClusterInfoSignatures(object, bootstrapTokenSecrets(), clock.now()),
          };
        }
        return { code: 200, object };
      }
      case "create": {
        const object = decodeJson(body, headers, resource);
        const stored = create(route, object, fieldManager, "Update");
        if (resource === CERTIFICATE_SIGNING_REQUESTS) {
          await approveAndSign(stored.object, identity, pki!.signer!);
        }
        return { code: 201, object: render(stored) };
      }
      case "update": {
        const object = decodeJson(body, headers, resource);
        return { code: 200, object: render(update(route, object, fieldManager)) };
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
        const force = url.searchParams.get("force") === "true";
        return apply(route, object, fieldManager, force);
      }
      case "delete": {
        const stored = find(route);
        store.delete(objectPath(route));
        if (resource.group === "") {
          const metadata = stored.object.metadata as Json;
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
        return { code: 200, object: render(stored) };
      }
    }
    throw notFoundPath();
  }

  /** Every stored Secret in kube-system named bootstrap-token-*. */
  function bootstrapTokenSecrets(): Json[] {
    const prefix = "/api/v1/namespaces/kube-system/secrets/bootstrap-token-";
    return [...store].filter(([path]) => path.startsWith(prefix)).map(([, stored]) => stored.object);
  }

  function find(route: Route): Stored {
    const stored = store.get(objectPath(route));
    if (!stored) throw notFound(route);
    return stored;
  }

  /** Creates the object at `route` (whose name may come from the body). */
  function create(route: Route, input: Json, manager: string, operation: Manager["operation"]): Stored {
    const metadata = { ...(input.metadata as Json | undefined) };
    if (!metadata.name && typeof metadata.generateName === "string" && metadata.generateName) {
      metadata.name = metadata.generateName + randomSuffix();
    }
    const name = typeof metadata.name === "string" ? metadata.name : "";
    const target: Route = { ...route, name: route.name ?? name };
    if (route.namespace !== undefined && !namespaces.has(route.namespace)) {
      throw new StatusError(404, "NotFound", `namespaces "${route.namespace}" not found`, {
        name: route.namespace,
        kind: "namespaces",
      });
    }
    checkNamespace(route, metadata);
    validateName(route.resource, name);
    if (store.has(objectPath(target))) {
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
    meta.resourceVersion = String(++resourceVersion);
    if (route.resource.group !== "") meta.generation = 1;
    meta.creationTimestamp = now();
    const stored: Stored = { object, managers: new Map() };
    own(stored, manager, operation, leaves(object).keys(), route.resource);
    store.set(objectPath(target), stored);
    return stored;
  }

  function update(route: Route, input: Json, manager: string): Stored {
    const stored = find(route);
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
    return write(stored, object, manager, "Update", route.resource, changedLeaves(stored.object, object));
  }

  function apply(route: Route, input: Json, manager: string, force: boolean): { code: number; object: Json } {
    const path = objectPath(route);
    const stored = store.get(path);
    const appliedObject = normalize(route.resource, input, route);
    if (!stored) {
      validateContent(route.resource, appliedObject, route.name!);
      return { code: 201, object: render(create(route, appliedObject, manager, "Apply")) };
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
    const result = write(stored, next, manager, "Apply", route.resource, new Set(applied.keys()));
    return { code: 200, object: render(result) };
  }

  /** Stores `object` as the new state of `stored`; `owned` are the leaves `manager` now owns. */
  function write(
    stored: Stored,
    object: Json,
    manager: string,
    operation: Manager["operation"],
    resource: Resource,
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
    own(stored, manager, operation, owned, resource);
    for (const [name, owner] of stored.managers) if (owner.fields.size === 0) stored.managers.delete(name);
    if (!jsonEqual(withoutVolatile(stored.object), withoutVolatile(object))) {
      meta.resourceVersion = String(++resourceVersion);
      if (resource.group !== "" && !jsonEqual(stored.object.spec, object.spec)) {
        meta.generation = Number(current.generation ?? 0) + 1;
      }
    }
    stored.object = object;
    return stored;
  }

  function own(
    stored: Stored,
    manager: string,
    operation: Manager["operation"],
    fields: Iterable<string>,
    resource: Resource,
  ): void {
    const existing = stored.managers.get(manager);
    const entry: Manager = existing?.operation === operation
      ? existing
      : { operation, apiVersion: apiVersionOf(resource), time: now(), fields: new Set() };
    for (const leaf of fields) entry.fields.add(leaf);
    entry.time = now();
    stored.managers.set(manager, entry);
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

  function render(stored: Stored): Json {
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

  function routeOf(path: string): Route & { name: string } {
    const route = parseRoute(path, resources);
    if (!route?.name) throw new Error(`not an object path of the fake API server: ${path}`);
    return route as Route & { name: string };
  }

  async function listen(port: number): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => {
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

  const port = await listen(0);
  const url = `https://127.0.0.1:${port}`;

  // With pkiDir: wait for kubeadm's PKI, then swap the connection dropper for the TLS server.
  let serving: Promise<void> = Promise.resolve();
  let pollTimer: ReturnType<typeof setTimeout> | undefined;
  if (clusterMode) {
    serving = new Promise<void>((resolve, reject) => {
      const poll = async () => {
        pollTimer = undefined;
        if (closed) {
          return reject(new Error("the fake API server was closed before the cluster PKI appeared"));
        }
        const loaded = await loadClusterPki(options.pkiDir!).catch(() => undefined);
        if (closed) {
          return reject(new Error("the fake API server was closed before the cluster PKI appeared"));
        }
        if (!loaded) {
          pollTimer = setTimeout(poll, options.pkiPollMs ?? 100);
          return;
        }
        const clientCert = await issueCert(loaded.ca, { subject: clientSubject, usages: ["clientAuth"] });
        pki = { ca: loaded.ca, clientCert, signer: loaded.signer };
        const wasListening = listening;
        await stop();
        server = createTlsServer({ certPem: loaded.serverChainPem, keyPem: loaded.serverKeyPem });
        if (wasListening) {
          await listen(port);
          listening = true;
        }
        resolve();
      };
      poll();
    });
    serving.catch(() => {}); // a server closed early rejects only its callers of whenServing
  }
  const current = () => {
    if (!pki) throw new Error("the fake API server has no PKI yet: await whenServing()");
    return pki;
  };
  const close = async () => {
    closed = true;
    clearTimeout(pollTimer);
    await stop();
  };

  return {
    url,
    port,
    get ca() {
      return current().ca;
    },
    get caPem() {
      return current().ca.certPem;
    },
    get clientCertPem() {
      return current().clientCert.certPem;
    },
    get clientKeyPem() {
      return current().clientCert.keyPem;
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
    token,
    requests,
    kubeconfig(kubeconfigOptions = {}) {
      const base64 = (text: string) => btoa(text);
      const { ca, clientCert } = current();
      const cert = kubeconfigOptions.clientCert ?? clientCert;
      const user = kubeconfigOptions.auth === "token"
        ? { token: kubeconfigOptions.token ?? token }
        : { "client-certificate-data": base64(cert.certPem), "client-key-data": base64(cert.keyPem) };
      const context: Json = { cluster: "fake", user: "fake-user" };
      if (kubeconfigOptions.namespace) context.namespace = kubeconfigOptions.namespace;
      return stringifyYaml({
        apiVersion: "v1",
        kind: "Config",
        clusters: [{
          name: "fake",
          cluster: { server: url, "certificate-authority-data": base64(ca.certPem) },
        }],
        contexts: [{ name: "fake", context }],
        "current-context": "fake",
        users: [{ name: "fake-user", user }],
      });
    },
    issueToken,
    issueClientCert: (subject) => issueCert(current().ca, { subject, usages: ["clientAuth"] }),
    getObject(path) {
      const stored = store.get(objectPath(routeOf(path)));
      return stored ? render(stored) : undefined;
    },
    putObject(path, object) {
      const route = routeOf(path);
      const input = { ...object, metadata: { ...(object.metadata as Json | undefined), name: route.name } };
      const fixture = normalize(route.resource, input, route);
      const stored = store.get(objectPath(route));
      if (!stored) return render(create(route, fixture, "fake-apiserver-fixture", "Update"));
      const owned = new Set(leaves(fixture).keys());
      return render(write(stored, fixture, "fake-apiserver-fixture", "Update", route.resource, owned));
    },
    deleteObject(path) {
      return store.delete(objectPath(routeOf(path)));
    },
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

/** Parses an URL path into a route; undefined when it addresses nothing the fake serves. */
function parseRoute(pathname: string, resources: Resource[]): Route | undefined {
  let parts: string[];
  try {
    parts = pathname.split("/").slice(1).map(decodeURIComponent);
  } catch {
    return undefined;
  }
  if (parts.some((part) => part === "")) return undefined;
  let group: string, version: string, rest: string[];
  if (parts[0] === "api") [group, version, rest] = ["", parts[1], parts.slice(2)];
  else if (parts[0] === "apis") [group, version, rest] = [parts[1], parts[2], parts.slice(3)];
  else return undefined;
  let namespace: string | undefined;
  if (rest[0] === "namespaces" && rest.length >= 3) {
    namespace = rest[1];
    rest = rest.slice(2);
  }
  if (rest.length < 1 || rest.length > 2) return undefined;
  const resource = resources.find((r) =>
    r.group === group && r.version === version && r.plural === rest[0] &&
    r.namespaced === (namespace !== undefined)
  );
  return resource ? { resource, namespace, name: rest[1] } : undefined;
}

function verbOf(method: string, route: Route | undefined): string | undefined {
  if (!route) return undefined;
  if (route.name === undefined) return method === "POST" ? "create" : undefined;
  return ({ GET: "get", PUT: "update", PATCH: "patch", DELETE: "delete" } as Record<string, string>)[method];
}

function objectPath(route: Route): string {
  const { group, version, plural } = route.resource;
  const base = group === "" ? `/api/${version}` : `/apis/${group}/${version}`;
  const scope = route.namespace === undefined ? "" : `/namespaces/${route.namespace}`;
  return `${base}${scope}/${plural}/${route.name}`;
}

function apiVersionOf(resource: Resource): string {
  return resource.group === "" ? resource.version : `${resource.group}/${resource.version}`;
}

function resourceLabel(resource: Resource): string {
  return resource.group === "" ? resource.plural : `${resource.plural}.${resource.group}`;
}

function groupDetail(resource: Resource): Json {
  return resource.group === "" ? {} : { group: resource.group };
}

function managerFromUserAgent(userAgent: string): string {
  return userAgent.split("/")[0].slice(0, 128);
}

function randomSuffix(): string {
  return Array.from(
    crypto.getRandomValues(new Uint8Array(5)),
    (b) => generateNameAlphabet[b % generateNameAlphabet.length],
  ).join("");
}

function notFound(route: Route): StatusError {
  return new StatusError(404, "NotFound", `${resourceLabel(route.resource)} "${route.name}" not found`, {
    name: route.name,
    ...groupDetail(route.resource),
    kind: route.resource.plural,
  });
}

function notFoundPath(): StatusError {
  return new StatusError(404, "NotFound", "the server could not find the requested resource", {});
}

function conflict(route: Route): StatusError {
  return new StatusError(
    409,
    "Conflict",
    `Operation cannot be fulfilled on ${resourceLabel(route.resource)} "${route.name}": ` +
      "the object has been modified; please apply your changes to the latest version and try again",
    { name: route.name, ...groupDetail(route.resource), kind: route.resource.plural },
  );
}

function applyConflict(conflicts: { manager: string; apiVersion: string; path: string }[]): StatusError {
  const fields = conflicts.map((c) => ({ ...c, field: "." + (JSON.parse(c.path) as string[]).join(".") }));
  const message = fields.length === 1
    ? `Apply failed with 1 conflict: conflict with "${fields[0].manager}" using ${fields[0].apiVersion}: ${
      fields[0].field
    }`
    : `Apply failed with ${fields.length} conflicts: ` +
      fields.map((f) => `conflict with "${f.manager}" using ${f.apiVersion}: ${f.field}`).join("\n");
  return new StatusError(409, "Conflict", message, {
    causes: fields.map((f) => ({
      reason: "FieldManagerConflict",
      message: `conflict with "${f.manager}" using ${f.apiVersion}`,
      field: f.field,
    })),
  });
}

function forbidden(user: string, verb: string, route: Route): StatusError {
  const { resource, namespace, name } = route;
  const scope = namespace === undefined ? "at the cluster scope" : `in the namespace "${namespace}"`;
  const subject = name === undefined ? resourceLabel(resource) : `${resourceLabel(resource)} "${name}"`;
  return new StatusError(
    403,
    "Forbidden",
    `${subject} is forbidden: User "${user}" cannot ${verb} resource "${resource.plural}" in API group "${resource.group}" ${scope}`,
    { name, ...groupDetail(resource), kind: resource.plural },
  );
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
  const status: Json = {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message: error.message,
    reason: error.reason,
  };
  if (error.details) status.details = error.details;
  status.code = error.code;
  sendJson(res, error.code, status);
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

function mediaType(headers: IncomingMessage["headers"]): string {
  return String(headers["content-type"] ?? "").split(";")[0].trim().toLowerCase();
}

function decodeJson(body: string, headers: IncomingMessage["headers"], resource: Resource): Json {
  if (mediaType(headers) !== "application/json") throw unsupportedMediaType();
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch (error) {
    throw new StatusError(
      400,
      "BadRequest",
      `couldn't get version/kind; json parse error: ${(error as Error).message}`,
    );
  }
  return checkTypeMeta(value, resource);
}

function decodeApply(
  body: string,
  headers: IncomingMessage["headers"],
  resource: Resource,
  route: Route,
): Json {
  if (mediaType(headers) !== "application/apply-patch+yaml") {
    throw new StatusError(
      415,
      "UnsupportedMediaType",
      `the body of the request was in an unknown format - accepted media types include: application/apply-patch+yaml`,
    );
  }
  let value: unknown;
  try {
    value = parseYaml(body);
  } catch {
    throw new StatusError(400, "BadRequest", "error decoding YAML: the apply patch is not valid YAML");
  }
  const object = checkTypeMeta(value, resource);
  if (typeof object.apiVersion !== "string" || typeof object.kind !== "string") {
    throw new StatusError(400, "BadRequest", "invalid object type: apiVersion and kind must be set");
  }
  const metadata = (object.metadata ?? {}) as Json;
  checkNameMatchesUrl(metadata, route);
  return object;
}

function unsupportedMediaType(): StatusError {
  return new StatusError(
    415,
    "UnsupportedMediaType",
    "the body of the request was in an unknown format - accepted media types include: application/json",
  );
}

/** Checks apiVersion and kind against the endpoint (core types may omit them; custom resources need kind). */
function checkTypeMeta(value: unknown, resource: Resource): Json {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new StatusError(400, "BadRequest", "the request body is not an object");
  }
  const object = value as Json;
  const expected = apiVersionOf(resource);
  if (object.apiVersion !== undefined && object.apiVersion !== expected) {
    throw new StatusError(
      400,
      "BadRequest",
      `the API version in the data (${
        String(object.apiVersion)
      }) does not match the expected API version (${expected})`,
    );
  }
  if (object.kind === undefined && resource.group !== "") {
    throw new StatusError(400, "BadRequest", "Object 'Kind' is missing in the request body");
  }
  if (object.kind !== undefined && object.kind !== resource.kind) {
    throw new StatusError(
      400,
      "BadRequest",
      `the kind in the data (${String(object.kind)}) does not match the expected kind (${resource.kind})`,
    );
  }
  if (object.metadata !== undefined && (typeof object.metadata !== "object" || object.metadata === null)) {
    throw new StatusError(400, "BadRequest", "metadata is not an object");
  }
  return object;
}

/** The object as stored: type meta set, server-owned metadata dropped, Secret stringData folded into data. */
function normalize(resource: Resource, input: Json, route: Route): Json {
  const object = structuredClone(input);
  object.apiVersion = apiVersionOf(resource);
  object.kind = resource.kind;
  const metadata = { ...(object.metadata as Json | undefined) };
  for (const key of ["uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"]) {
    delete metadata[key];
  }
  if (route.name !== undefined) metadata.name = route.name;
  if (resource.namespaced) metadata.namespace = route.namespace;
  else delete metadata.namespace;
  object.metadata = metadata;
  if (resource.kind === "Secret") {
    const data = { ...(object.data as Record<string, string> | undefined) };
    for (const [key, value] of Object.entries(data)) {
      if (typeof value !== "string" || !isBase64(value)) {
        throw new StatusError(
          400,
          "BadRequest",
          `Secret in version "v1" cannot be handled as a Secret: illegal base64 data in data[${key}]`,
        );
      }
    }
    for (const [key, value] of Object.entries((object.stringData ?? {}) as Record<string, string>)) {
      data[key] = btoa(String.fromCharCode(...new TextEncoder().encode(String(value))));
    }
    delete object.stringData;
    if (Object.keys(data).length > 0) object.data = data;
    object.type ??= "Opaque";
  }
  return object;
}

function validateName(resource: Resource, name: string): void {
  if (name === "") {
    throw invalid(resource, name, "metadata.name", "Required value: name or generateName is required");
  }
  if (name.length > 253 || !dns1123Subdomain.test(name)) {
    throw invalid(
      resource,
      name,
      "metadata.name",
      `Invalid value: "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric ` +
        "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', " +
        "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    );
  }
}

/** Secret and ConfigMap data keys, as the real validation checks them. */
function validateContent(resource: Resource, object: Json, name: string): void {
  if (resource.group !== "") return;
  for (const field of ["data", "binaryData"]) {
    for (const key of Object.keys((object[field] ?? {}) as Json)) {
      if (!configKey.test(key)) {
        throw invalid(
          resource,
          name,
          `${field}[${key}]`,
          `Invalid value: "${key}": a valid config key must consist of alphanumeric characters, '-', '_' or '.' ` +
            "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        );
      }
    }
  }
}

function invalid(resource: Resource, name: string, field: string, detail: string): StatusError {
  return new StatusError(422, "Invalid", `${resource.kind} "${name}" is invalid: ${field}: ${detail}`, {
    name,
    ...groupDetail(resource),
    kind: resource.kind,
    causes: [{
      reason: detail.startsWith("Required") ? "FieldValueRequired" : "FieldValueInvalid",
      message: detail,
      field,
    }],
  });
}

function isBase64(value: string): boolean {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(value) || value.length % 4 !== 0) return false;
  try {
    atob(value);
    return true;
  } catch {
    return false;
  }
}

/**
 * Leaf fields an object sets, as JSON arrays of keys → value: everything but
 * type meta, status and server-owned metadata (labels and annotations
 * count). Arrays are atomic leaves.
 */
function leaves(object: Json): Map<string, unknown> {
  const result = new Map<string, unknown>();
  const walk = (value: unknown, path: string[]) => {
    if (
      typeof value === "object" && value !== null && !Array.isArray(value) && Object.keys(value).length > 0
    ) {
      for (const [key, child] of Object.entries(value)) walk(child, [...path, key]);
    } else {
      result.set(JSON.stringify(path), value);
    }
  };
  for (const [key, value] of Object.entries(object)) {
    if (key === "apiVersion" || key === "kind" || key === "status") continue;
    if (key === "metadata") {
      const metadata = value as Json;
      for (const field of ["labels", "annotations"]) {
        if (metadata[field] !== undefined) walk(metadata[field], ["metadata", field]);
      }
      continue;
    }
    walk(value, [key]);
  }
  return result;
}

function changedLeaves(before: Json, after: Json): Set<string> {
  const old = leaves(before);
  const changed = new Set<string>();
  for (const [leaf, value] of leaves(after)) {
    if (!old.has(leaf) || !jsonEqual(old.get(leaf), value)) changed.add(leaf);
  }
  return changed;
}

/** Encodes leaf paths as FieldsV1 (`{"f:spec":{"f:name":{}}}`). */
function fieldsV1(fields: Set<string>): Json {
  const root: Json = {};
  for (const leaf of [...fields].sort()) {
    let node = root;
    for (const key of JSON.parse(leaf) as string[]) node = (node[`f:${key}`] ??= {}) as Json;
  }
  return root;
}

function getAt(object: Json, path: string[]): unknown {
  let node: unknown = object;
  for (const key of path) {
    if (typeof node !== "object" || node === null) return undefined;
    node = (node as Json)[key];
  }
  return node;
}

function setAt(object: Json, path: string[], value: unknown): void {
  let node = object;
  for (const key of path.slice(0, -1)) {
    if (typeof node[key] !== "object" || node[key] === null || Array.isArray(node[key])) node[key] = {};
    node = node[key] as Json;
  }
  node[path[path.length - 1]] = value;
}

/** Deletes a leaf and the maps it leaves empty. */
function deleteAt(object: Json, path: string[]): void {
  const parents: Json[] = [];
  let node = object;
  for (const key of path.slice(0, -1)) {
    if (typeof node[key] !== "object" || node[key] === null) return;
    parents.push(node);
    node = node[key] as Json;
  }
  delete node[path[path.length - 1]];
  for (let i = parents.length - 1; i >= 0 && Object.keys(node).length === 0; i--) {
    const key = path[i];
    if (i === 0 && key === "metadata") break;
    node = parents[i];
    delete node[key];
  }
}

function withoutVolatile(object: Json): Json {
  const { metadata, ...rest } = object;
  const { resourceVersion: _rv, generation: _generation, ...meta } = metadata as Json;
  return { ...rest, metadata: meta };
}

function jsonEqual(a: unknown, b: unknown): boolean {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.keys(value).sort().map((key) => [key, canonical((value as Json)[key])]));
  }
  return value;
}

/** The API server's 400 for an object whose metadata.name is not the name in the URL. */
function checkNameMatchesUrl(metadata: Json, route: Route): void {
  if (metadata.name === route.name) return;
  throw new StatusError(
    400,
    "BadRequest",
    `the name of the object (${
      String(metadata.name ?? "")
    }) does not match the name on the URL (${route.name})`,
  );
}
