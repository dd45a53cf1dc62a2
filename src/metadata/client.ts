/**
 * Client of the QEMU-style metadata API (see `server.ts`): who am I, who are
 * my peers, where is the API server, what is the init-secret hash.
 *
 * The client knows only a base URL: `http://10.42.0.1:8080/` (the caller is
 * identified by its address) or `http://127.0.0.1:PORT/nodes/<name>/` (by
 * the path); paths are resolved relative to it. Every call has a timeout and
 * takes an `AbortSignal`. Answers are checked strictly; every failure is a
 * {@linkcode MetadataError} naming the URL, the reason and whether a retry
 * may help.
 *
 * @module
 */
import { isIP } from "node:net";
import { quoted } from "../json/quoted.ts";
import { ReasonError } from "../reason_error.ts";
import { readLimited } from "../streams/read_limited.ts";
import {
  InstanceDecodeError,
  instanceFromJson,
  type InstanceMetadata,
  instancesFromJson,
} from "./instance.ts";

/** The port the original appends to the `/endpoint` host. */
export const KUBERNETES_PORT = 6443;

/** Largest answer the client reads. */
export const MAX_ANSWER_BYTES = 1024 * 1024;

/** Why a call failed. */
export type MetadataErrorReason =
  | "unreachable" // no connection (refused, reset, DNS)
  | "timeout" // no complete answer in time
  | "unavailable" // the server answered 5xx
  | "not-found" // 404: e.g. the caller is not (yet) in the instance table
  | "conflict" // 409: several instances share the caller's address
  | "rejected" // any other 4xx
  | "malformed"; // an answer that is not what the API returns

/** Reasons worth retrying: the server may answer later (a node's lease may appear, a server restart). */
const RETRYABLE: ReadonlySet<MetadataErrorReason> = new Set([
  "unreachable",
  "timeout",
  "unavailable",
  "not-found",
]);

/** A metadata call failed. */
export class MetadataError extends ReasonError<MetadataErrorReason> {
  /** The URL that was asked. */
  readonly url: string;
  /** Whether asking again later may succeed. */
  readonly retryable: boolean;
  /** The HTTP status, when the server answered. */
  readonly status?: number;

  /** A failure of the call to `url` for `reason`; `detail` says what happened (no secrets). */
  constructor(
    url: string,
    reason: MetadataErrorReason,
    detail: string,
    options: { status?: number; cause?: unknown } = {},
  ) {
    super(reason, `metadata API ${url}: ${detail}`, { cause: options.cause });
    this.url = url;
    this.retryable = RETRYABLE.has(reason);
    this.status = options.status;
  }
}

/** The API server endpoint `/endpoint` names. */
export interface ApiServerEndpoint {
  /** An IP address or DNS name (IPv6 without brackets). */
  host: string;
  /** {@linkcode KUBERNETES_PORT} unless the server named another. */
  port: number;
}

/** Options for {@linkcode MetadataClient}. */
export interface MetadataClientOptions {
  /** Base URL; paths are resolved relative to it (a missing trailing slash is added). */
  baseUrl: string | URL;
  /** Default bound on each call; default 10 000 ms. */
  timeoutMs?: number;
}

/** Options of every call. */
export interface MetadataCallOptions {
  /** Cancels the call; it then rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Bound on this call; default the client's. */
  timeoutMs?: number;
}

const BCRYPT_HASH = /^\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}$/;

/** A client for one node's view of the metadata API. */
export class MetadataClient {
  /** The base URL, with a trailing slash. */
  readonly baseUrl: string;
  readonly #timeoutMs: number;

  /** Throws `TypeError` for a base URL that is not http(s) or has a query or fragment. */
  constructor(options: MetadataClientOptions) {
    const url = new URL(options.baseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`metadata API URL must be http or https: ${url}`);
    }
    if (url.search || url.hash) {
      throw new TypeError(`metadata API URL may not have a query or fragment: ${url}`);
    }
    if (!url.pathname.endsWith("/")) url.pathname += "/";
    this.baseUrl = url.href;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
  }

  /** The calling instance (`GET self`). */
  async self(options: MetadataCallOptions = {}): Promise<InstanceMetadata> {
    return await this.#getJson("self", instanceFromJson, options);
  }

  /** Every instance of the cluster, the caller included (`GET peers`). */
  async peers(options: MetadataCallOptions = {}): Promise<InstanceMetadata[]> {
    return await this.#getJson("peers", instancesFromJson, options);
  }

  /** The API server endpoint (`GET endpoint`: a JSON string, host or host:port). */
  async endpoint(options: MetadataCallOptions = {}): Promise<ApiServerEndpoint> {
    return await this.#getJson("endpoint", parseEndpoint, options);
  }

  /** The bcrypt hash of the cluster's init secret (`GET initsecrethash`, plain text). */
  async initSecretHash(options: MetadataCallOptions = {}): Promise<string> {
    const { url, text } = await this.#call("initsecrethash", { method: "GET" }, options);
    if (!BCRYPT_HASH.test(text)) {
      throw new MetadataError(
        url,
        "malformed",
        `the init secret hash is not a bcrypt hash (${text.length} characters)`,
      );
    }
    return text;
  }

  /**
   * Sends a message to the cloud log (`POST log`), as the original's QEMU
   * logger did. The message goes to a non-confidential sink: never log a
   * secret with it.
   */
  async log(message: string, options: MetadataCallOptions = {}): Promise<void> {
    await this.#call("log", {
      method: "POST",
      body: message,
      headers: { "content-type": "application/json" },
    }, options);
  }

  async #getJson<T>(path: string, decode: (value: unknown) => T, options: MetadataCallOptions): Promise<T> {
    const { url, text } = await this.#call(path, { method: "GET" }, options);
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw new MetadataError(url, "malformed", "the answer is not JSON");
    }
    try {
      return decode(value);
    } catch (error) {
      if (!(error instanceof InstanceDecodeError)) throw error;
      throw new MetadataError(url, "malformed", error.message);
    }
  }

  /** One request: its body as text on 2xx, otherwise a {@linkcode MetadataError}. */
  async #call(
    path: string,
    init: RequestInit,
    options: MetadataCallOptions,
  ): Promise<{ url: string; text: string }> {
    const url = new URL(path, this.baseUrl).href;
    options.signal?.throwIfAborted();
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
    const failed = (error: unknown): never => {
      if (options.signal?.aborted) throw options.signal.reason;
      if (timeout.aborted) throw new MetadataError(url, "timeout", `no answer within ${timeoutMs} ms`);
      throw new MetadataError(url, "unreachable", `cannot connect: ${(error as Error).message}`, {
        cause: error,
      });
    };
    let response: Response;
    try {
      response = await fetch(url, { ...init, signal, redirect: "manual" });
    } catch (error) {
      return failed(error);
    }
    let bytes: Uint8Array | undefined;
    try {
      bytes = await readLimited(response.body, MAX_ANSWER_BYTES);
    } catch (error) {
      return failed(error);
    }
    if (bytes === undefined) {
      throw new MetadataError(url, "malformed", `the answer is larger than ${MAX_ANSWER_BYTES} bytes`, {
        status: response.status,
      });
    }
    const text = new TextDecoder().decode(bytes);
    if (response.status >= 200 && response.status <= 299) return { url, text };
    const reason: MetadataErrorReason = response.status >= 500
      ? "unavailable"
      : response.status === 404
      ? "not-found"
      : response.status === 409
      ? "conflict"
      : "rejected";
    throw new MetadataError(url, reason, `answered ${response.status}: ${summary(text)}`, {
      status: response.status,
    });
  }
}

/** `/endpoint`'s JSON string: "host", "host:port", "[v6]:port" or a bare IPv6 address. */
function parseEndpoint(value: unknown): ApiServerEndpoint {
  if (typeof value !== "string" || value === "") {
    throw new InstanceDecodeError(
      "",
      `want the endpoint as a non-empty JSON string, got ${quoted(value)}`,
    );
  }
  let host = value;
  let port = KUBERNETES_PORT;
  const withPort = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(value);
  if (withPort) {
    host = withPort[1].replace(/^\[(.*)\]$/, "$1");
    port = Number(withPort[2]);
  } else if (/^\[[^\]]+\]$/.test(value)) {
    host = value.slice(1, -1);
  }
  const dnsName = /^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$/;
  if (!(isIP(host) !== 0 || (dnsName.test(host) && !/^[\d.]+$/.test(host)))) {
    throw new InstanceDecodeError("", `the endpoint ${quoted(value)} is not a host or host:port`);
  }
  if (!(port >= 1 && port <= 65535)) {
    throw new InstanceDecodeError("", `the endpoint ${quoted(value)} has an invalid port`);
  }
  return { host, port };
}

/** The first line of an error answer, shortened. */
function summary(text: string): string {
  const line = text.trim().split("\n")[0] ?? "";
  return line === "" ? "(no message)" : line.length > 200 ? line.slice(0, 200) + "…" : line;
}
