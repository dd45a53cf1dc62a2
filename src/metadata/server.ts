/**
 * A QEMU-style metadata API server, as the original's
 * `hack/qemu-metadata-api` serves it to nodes: `GET /self`, `GET /peers`,
 * `GET /endpoint`, `GET /initsecrethash` and `POST /log`, with the original's
 * paths, JSON shapes and content types.
 *
 * The original finds its instances in libvirt's DHCP leases; here the owner
 * (the local cluster, a test) keeps the instance table and changes it while
 * the server runs.
 *
 * **Who is asking.** The original identifies the caller of `/self` by its
 * source address (an instance's `VPCIP`). That works when every node has its
 * own address (its own network namespace). Nodes that share an address (a
 * local cluster on loopback) use their own base URL instead,
 * `http://<host>:<port>/nodes/<name>/`, under which every path is served as
 * for that instance. A client only ever sees a base URL, so it works the
 * same with both. An unknown caller, an unknown name and an address that
 * several instances share are answered with 404 or 409 and a message
 * saying so.
 *
 * @module
 */
import { isIP } from "node:net";
import { type Logger, silentLogger } from "../log/logger.ts";
import { readLimited } from "../streams/read_limited.ts";
import { type InstanceMetadata, instanceToJson, qemuProviderId, type Role } from "./instance.ts";

/** The original's port (at 10.42.0.1 on the QEMU network). */
export const DEFAULT_METADATA_PORT = 8080;

/** Largest `/log` body accepted. */
export const MAX_LOG_BYTES = 64 * 1024;

/** How many `/log` entries the server keeps (the oldest are dropped). */
export const MAX_LOG_ENTRIES = 1000;

/** An instance as the owner adds it. */
export interface InstanceInput {
  /** Unique name, e.g. "control-plane-0" or "worker-1". */
  name: string;
  /** Whether it is a control-plane node or a worker. */
  role: Role;
  /** Its address in the cluster network; "" or absent while it has none. */
  vpcIp?: string;
  /** Default `qemu:///hostname/<name>`, as the original. */
  providerId?: string;
}

/** One `POST /log` message. */
export interface MetadataLogEntry {
  /** Receive time (Unix ms). */
  time: number;
  /** The caller's source address. */
  address: string;
  /** The caller's instance name, when the server knows it. */
  instance?: string;
  /** The message as the node sent it. */
  message: string;
}

/** Options for {@linkcode startMetadataServer}. */
export interface MetadataServerOptions {
  /** Address to listen on; default 127.0.0.1. */
  hostname?: string;
  /** Port; default 0 (any free port). */
  port?: number;
  /** The initial instance table. */
  instances?: InstanceInput[];
  /** The initial `/endpoint` (see {@linkcode MetadataServer.setEndpoint}). */
  endpoint?: string;
  /** The initial `/initsecrethash`: the bcrypt hash of the cluster's init secret. */
  initSecretHash?: string;
  /** Receives one debug line per request and one info line per `/log` message. */
  logger?: Logger;
  /** Stops the server when aborted. */
  signal?: AbortSignal;
}

/** A running metadata API server. */
export interface MetadataServer extends AsyncDisposable {
  /** `http://<host>:<port>/`: the base URL of nodes identified by their source address. */
  readonly url: string;
  /** The bound port. */
  readonly port: number;
  /** `http://<host>:<port>/nodes/<name>/`: the base URL of the node `name`, whatever its address. */
  nodeUrl(name: string): string;
  /** Adds an instance, or replaces the one with the same name. Throws on a bad name, role or address. */
  setInstance(instance: InstanceInput): void;
  /** Removes an instance; returns whether it existed. */
  removeInstance(name: string): boolean;
  /** The instance table, in the order instances were first added. */
  instances(): InstanceMetadata[];
  /**
   * Sets what `/endpoint` answers: the API server's host, as in the
   * original, or `host:port` when the API server does not listen on 6443.
   * Unset (undefined), it answers the `VPCIP` of the first control-plane
   * instance that has one, as the original answered its first control plane.
   */
  setEndpoint(endpoint: string | undefined): void;
  /** Sets what `/initsecrethash` answers; unset, it answers 404. */
  setInitSecretHash(hash: string | undefined): void;
  /** The `/log` messages received, oldest first (at most {@linkcode MAX_LOG_ENTRIES}). */
  readonly logs: readonly MetadataLogEntry[];
  /** Stops listening and ends open connections. */
  close(): Promise<void>;
}

/** The paths the server answers, at the root and under /nodes/<name>/. */
const SERVED_PATHS = ["self", "peers", "endpoint", "initsecrethash", "log"] as const;
type ServedPath = typeof SERVED_PATHS[number];

/** The caller of one request: named by its URL prefix, or by its address. */
type Caller = { name: string } | { address: string };

const instanceName = /^[A-Za-z0-9]([-A-Za-z0-9._]*[A-Za-z0-9])?$/;

/** Starts a metadata API server; resolves once it listens. */
export function startMetadataServer(options: MetadataServerOptions = {}): Promise<MetadataServer> {
  const logger = options.logger ?? silentLogger;
  const table = new Map<string, InstanceMetadata>();
  const logs: MetadataLogEntry[] = [];
  let endpoint = options.endpoint;
  let initSecretHash = options.initSecretHash;

  const setInstance = (input: InstanceInput) => {
    if (!instanceName.test(input.name)) {
      throw new TypeError(`invalid instance name ${JSON.stringify(input.name)}`);
    }
    if (input.role !== "ControlPlane" && input.role !== "Worker") {
      throw new TypeError(`invalid role ${JSON.stringify(input.role)} for instance ${input.name}`);
    }
    const vpcIp = input.vpcIp ?? "";
    if (vpcIp !== "" && isIP(vpcIp) === 0) {
      throw new TypeError(`invalid VPC IP ${JSON.stringify(vpcIp)} for instance ${input.name}`);
    }
    table.set(input.name, {
      name: input.name,
      role: input.role,
      vpcIp,
      providerId: input.providerId ?? qemuProviderId(input.name),
    });
  };
  for (const instance of options.instances ?? []) setInstance(instance);

  /** The caller's instance, or the error answer saying why there is none. */
  const identify = (caller: Caller): InstanceMetadata | Response => {
    if ("name" in caller) {
      return table.get(caller.name) ?? textError(404, `no instance named ${JSON.stringify(caller.name)}`);
    }
    const matches = [...table.values()].filter((instance) => instance.vpcIp === caller.address);
    if (matches.length === 1) return matches[0];
    if (matches.length === 0) {
      return textError(404, `No matching peer found: no instance has the caller's address ${caller.address}`);
    }
    return textError(
      409,
      `${matches.length} instances have the caller's address ${caller.address} ` +
        `(${matches.map((m) => m.name).join(", ")}): ask under /nodes/<name>/ instead`,
    );
  };

  const currentEndpoint = (): string | undefined =>
    endpoint ?? [...table.values()].find((i) => i.role === "ControlPlane" && i.vpcIp !== "")?.vpcIp;

  const serve = async (request: Request, address: string): Promise<Response> => {
    const route = routeOf(new URL(request.url).pathname);
    if (!route) return textError(404, "404 page not found");
    const caller: Caller = route.name === undefined ? { address } : { name: route.name };
    // Under /nodes/<name>/ every path needs a known name; at the root only /self asks who is calling.
    const named = "name" in caller ? identify(caller) : undefined;
    if (named instanceof Response) return named;
    const wantMethod = route.path === "log" ? "POST" : "GET";
    if (request.method !== wantMethod) return textError(405, "Method not allowed");

    switch (route.path) {
      case "self": {
        const self = named ?? identify(caller);
        return self instanceof Response ? self : jsonAnswer(instanceToJson(self));
      }
      case "peers":
        return jsonAnswer([...table.values()].map(instanceToJson));
      case "endpoint": {
        const value = currentEndpoint();
        return value === undefined
          ? textError(404, "No matching peer found: no control-plane instance")
          : jsonAnswer(value);
      }
      case "initsecrethash":
        return initSecretHash === undefined
          ? textError(404, "no init secret hash set")
          : new Response(initSecretHash, { headers: { "content-type": "text/plain" } });
      case "log": {
        const bytes = await readLimited(request.body, MAX_LOG_BYTES);
        if (bytes === undefined) return textError(413, `log message larger than ${MAX_LOG_BYTES} bytes`);
        if (bytes.length === 0) return textError(400, "Request body is empty");
        const body = new TextDecoder().decode(bytes);
        const self = named ?? identify(caller);
        const entry: MetadataLogEntry = { time: Date.now(), address, message: body };
        if (!(self instanceof Response)) entry.instance = self.name;
        logs.push(entry);
        if (logs.length > MAX_LOG_ENTRIES) logs.shift();
        logger.info("cloud-logging entry", { peer: address, instance: entry.instance, message: body });
        return new Response(null, { status: 200 });
      }
    }
  };

  const server = Deno.serve({
    hostname: options.hostname ?? "127.0.0.1",
    port: options.port ?? 0,
    signal: options.signal,
    onListen() {},
  }, async (request, info) => {
    const address = unmapIpv4(info.remoteAddr.hostname);
    const response = await serve(request, address);
    logger.debug("metadata request", {
      method: request.method,
      path: new URL(request.url).pathname,
      peer: address,
      status: response.status,
    });
    return response;
  });
  const host = server.addr.hostname.includes(":") ? `[${server.addr.hostname}]` : server.addr.hostname;
  const url = `http://${host}:${server.addr.port}/`;
  let closed: Promise<void> | undefined;
  const close = () => closed ??= server.shutdown();

  return Promise.resolve({
    url,
    port: server.addr.port,
    nodeUrl: (name) => `${url}nodes/${encodeURIComponent(name)}/`,
    setInstance,
    removeInstance: (name) => table.delete(name),
    instances: () => [...table.values()].map((instance) => ({ ...instance })),
    setEndpoint(value) {
      endpoint = value;
    },
    setInitSecretHash(hash) {
      initSecretHash = hash;
    },
    logs,
    close,
    [Symbol.asyncDispose]: close,
  });
}

/** The served path ("self", "peers", ...) and, under /nodes/<name>/, the name; undefined for any other path. */
function routeOf(pathname: string): { path: ServedPath; name?: string } | undefined {
  const parts = pathname.split("/").slice(1);
  const isServed = (part: string): part is ServedPath => (SERVED_PATHS as readonly string[]).includes(part);
  if (parts.length === 1 && isServed(parts[0])) return { path: parts[0] };
  if (parts.length === 3 && parts[0] === "nodes" && isServed(parts[2])) {
    try {
      return { path: parts[2], name: decodeURIComponent(parts[1]) };
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** JSON as Go's `json.Encoder` writes it (with a trailing newline). */
function jsonAnswer(value: unknown): Response {
  return new Response(JSON.stringify(value) + "\n", { headers: { "content-type": "application/json" } });
}

/** An error answer as Go's `http.Error` writes it. */
function textError(status: number, message: string): Response {
  return new Response(message + "\n", {
    status,
    headers: { "content-type": "text/plain; charset=utf-8", "x-content-type-options": "nosniff" },
  });
}

/** "::ffff:10.0.0.1" (an IPv4 peer of a dual-stack socket) as "10.0.0.1". */
function unmapIpv4(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return mapped ? mapped[1] : address;
}
