/**
 * The join client (reference §5, with the fixes of DESIGN §4): finds the
 * control-plane nodes, asks their join services for a join ticket with an
 * attested request, and hands the first ticket to the {@linkcode TicketApplier}
 * (`apply_ticket.ts`), which takes the node lock and joins the cluster.
 *
 * The run, in order:
 *
 *  1. the state disk's UUID, retried until the disk answers (the original
 *     gave up silently and left the node unable to join);
 *  2. the node's own metadata (`/self`), retried until it answers with a
 *     name that normalizes into a Kubernetes node name;
 *  3. the join loop: the control-plane peers (`/peers`, role ControlPlane,
 *     with an address, this node excluded) on port 30090, in list order
 *     from a control plane picked at random each round, then around (the
 *     original always began with the first, so a fleet booting at once all
 *     queued at one join service, however many there were);
 *     per endpoint a fresh P-256 kubelet key and CSR (CN
 *     `system:node:<normalized name>`, O `system:nodes`, the node's VPC IP
 *     as IP SAN) and one ticket request, bounded by the per-call deadline;
 *     the first ticket goes to the applier. Every refusal is logged with
 *     its reason and the join service's message (a measurement mismatch
 *     names every PCR that differs); after a round without a ticket the
 *     client waits the retry interval and starts again.
 *
 * Before the node lock everything is retried and an abort stops the client
 * cleanly (`run` resolves `{ status: "stopped" }`, no timer left). Once a
 * ticket reached the applier and the lock was taken, the applier's verdict
 * is final: `run` resolves `{ status: "joined" }` or rejects with the
 * applier's error (terminal for this boot; `apply_ticket.ts` says what state
 * it leaves). A ticket the applier refuses before the lock (a malformed
 * ticket: its error has `retryable: true`) counts as one more refusal.
 *
 * @module
 */
import { generateKeyPairSync, sign } from "node:crypto";
import type { IssueJoinTicketResponse } from "../gen/join/join_pb.ts";
import { k8sCompliantHostname } from "../kubernetes/nodename.ts";
import type { Logger } from "../log/logger.ts";
import { ReasonError } from "../reason_error.ts";
import { parseIp } from "../net/ip.ts";
import {
  derBitString,
  derContextTag,
  derElement,
  derExtension,
  derOid,
  derSequence,
  DerTag,
  derUnsignedInteger,
} from "../x509/der.ts";
import { encodePem, PEM_EC_PRIVATE_KEY } from "../x509/pem.ts";
import type { JoinTicketRequest, TicketCallOptions } from "./join_ticket_source.ts";
import { errorFields, retryUntilDone, systemTimers, type Timers, withDeadline } from "./retry.ts";
import { joinHostPort } from "../net/endpoint.ts";

/** The join service's node port on control-plane nodes (`JoinServiceNodePort`). */
export const JOIN_SERVICE_NODE_PORT = 30090;

/** Default pause between rounds (reference §2.7). */
export const DEFAULT_RETRY_INTERVAL_MS = 30_000;

/** Default deadline of one metadata call or one ticket request (reference §2.7). */
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;

/** A node's role. */
export type NodeRole = "ControlPlane" | "Worker";

/** One instance as the metadata API describes it (the shape of `src/metadata/instance.ts`). */
export interface InstanceMetadata {
  /** Host name, not yet normalized. */
  name: string;
  /** e.g. "qemu:///hostname/worker-0"; "" when unknown. */
  providerId: string;
  /** The node's role. */
  role: NodeRole;
  /** Primary address in the cluster network; "" when it has none yet. */
  vpcIp: string;
}

/** Options of a metadata call. */
export interface MetadataCallOptions {
  /** Cancels the call. */
  signal?: AbortSignal;
  /** Bound on the call. */
  timeoutMs?: number;
}

/** The metadata the join client reads (satisfied by `src/metadata/client.ts`'s `MetadataClient`). */
export interface Metadata {
  /** This instance. */
  self(options?: MetadataCallOptions): Promise<InstanceMetadata>;
  /** Every instance of the cluster, this one included. */
  peers(options?: MetadataCallOptions): Promise<InstanceMetadata[]>;
}

/** Where join tickets come from (satisfied by `join_ticket_source.ts`'s `AttestedTicketSource`). */
export interface JoinTicketSource {
  /** Requests and opens a join ticket from the join service at `endpoint` ("host:port"). */
  joinTicket(
    endpoint: string,
    request: JoinTicketRequest,
    options?: TicketCallOptions,
  ): Promise<IssueJoinTicketResponse>;
}

/** The state disk, for its UUID (satisfied by `LuksStateDisk`). */
export interface DiskUuidSource {
  /** The LUKS UUID, lower-case. */
  uuid(options?: { signal?: AbortSignal }): Promise<string>;
}

/** The node a ticket was issued to, as the applier needs it. */
export interface JoiningNode {
  /** The metadata name, as is. */
  metadataName: string;
  /** The normalized Kubernetes node name (CSR CN and kubeadm node name). */
  nodeName: string;
  /** The node's role. */
  role: NodeRole;
  /** The node's address in the cluster network ("" when it has none). */
  vpcIp: string;
  /** The node's provider ID ("" when unknown). */
  providerId: string;
  /** PEM of the kubelet key the ticket's certificate is for (a secret: never log it). */
  kubeletKeyPem: string;
}

/** What an applied ticket yielded. */
export interface AppliedTicket {
  /** The cluster ID the node is now bound to. */
  clusterId: Uint8Array;
}

/**
 * Applies a ticket (satisfied by `apply_ticket.ts`'s `JoinTicketApplier`).
 * `signal` cancels only until the node lock is taken. A rejection whose
 * error has `retryable: true` means the ticket was refused before the lock;
 * any other rejection is terminal.
 */
export interface TicketApplier {
  /** Takes the lock and joins the cluster with `ticket`. */
  apply(
    ticket: IssueJoinTicketResponse,
    node: JoiningNode,
    options?: { signal?: AbortSignal },
  ): Promise<AppliedTicket>;
}

/** What the join client needs. */
export interface JoinClientDependencies {
  /** This node's and its peers' metadata. */
  metadata: Metadata;
  /** Requests tickets from join services. */
  tickets: JoinTicketSource;
  /** The state disk. */
  disk: DiskUuidSource;
  /** Applies the first usable ticket. */
  applier: TicketApplier;
  /** Structured log; never receives a secret. */
  logger: Logger;
  /** Delays and deadlines; default real time. */
  timers?: Timers;
}

/** Intervals and ports of the join client. */
export interface JoinClientOptions {
  /** Pause after a failed round; default 30 s. */
  retryIntervalMs?: number;
  /** Deadline of each metadata call and each ticket request; default 30 s. */
  callTimeoutMs?: number;
  /** The join service port on control-plane nodes; default 30090. */
  joinServicePort?: number;
  /**
   * Which of `count` control planes a round asks first (an index below `count`); default one picked
   * at random. Tests fix it.
   */
  firstEndpoint?: (count: number) => number;
}

/** A uniformly random index below `count`. */
function randomIndex(count: number): number {
  return crypto.getRandomValues(new Uint32Array(1))[0] % count;
}

/** How a run ended. */
export type JoinOutcome =
  | {
    status: "joined";
    /** The join service that issued the ticket. */
    endpoint: string;
    nodeName: string;
    role: NodeRole;
    clusterId: Uint8Array;
  }
  /** Aborted before a ticket was applied. */
  | { status: "stopped" };

/** Why a round found nobody to ask. */
export class JoinRoundError extends ReasonError<"no-control-planes" | "all-refused"> {}

/** The join client. One `run` at a time. */
export class JoinClient {
  readonly #deps: JoinClientDependencies;
  readonly #timers: Timers;
  readonly #retryIntervalMs: number;
  readonly #callTimeoutMs: number;
  readonly #port: number;
  readonly #firstEndpoint: (count: number) => number;
  #running = false;

  /** A client over `deps`. */
  constructor(deps: JoinClientDependencies, options: JoinClientOptions = {}) {
    this.#deps = deps;
    this.#timers = deps.timers ?? systemTimers;
    this.#retryIntervalMs = options.retryIntervalMs ?? DEFAULT_RETRY_INTERVAL_MS;
    this.#callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.#port = options.joinServicePort ?? JOIN_SERVICE_NODE_PORT;
    this.#firstEndpoint = options.firstEndpoint ?? randomIndex;
  }

  /**
   * Runs until a ticket was applied (`joined`), `signal` aborted before that
   * (`stopped`), or the applier failed terminally (rejects with its error).
   */
  async run(options: { signal?: AbortSignal } = {}): Promise<JoinOutcome> {
    if (this.#running) throw new Error("the join client is already running");
    this.#running = true;
    const { signal } = options;
    const { logger } = this.#deps;
    try {
      const diskUuid = await this.#retry(
        "reading the state disk UUID",
        (s) => this.#deadline("reading the state disk UUID", s, (d) => this.#deps.disk.uuid({ signal: d })),
        signal,
      );
      const self = await this.#retry("reading this node's metadata", (s) => this.#self(s), signal);
      logger.info("joining as", { nodeName: self.nodeName, role: self.role, vpcIp: self.vpcIp, diskUuid });
      const joined = await this.#retry("join round", (s) => this.#round(diskUuid, self, s), signal);
      logger.info("joined the cluster", {
        endpoint: joined.endpoint,
        nodeName: self.nodeName,
        role: self.role,
      });
      return joined;
    } catch (error) {
      if (signal?.aborted && !(error instanceof TerminalApplyError)) {
        logger.info("join client stopped");
        return { status: "stopped" };
      }
      const cause = error instanceof TerminalApplyError ? error.cause : error;
      const lockHeld = typeof cause === "object" && cause !== null && "reason" in cause &&
        cause.reason === "lock-held";
      logger.error(
        lockHeld
          ? "the node lock is held by init; the join client ends"
          : "joining failed; this boot cannot join",
        errorFields(cause),
      );
      throw cause;
    } finally {
      this.#running = false;
    }
  }

  /** The node's metadata, checked: a name that normalizes. */
  async #self(signal: AbortSignal | undefined): Promise<Omit<JoiningNode, "kubeletKeyPem">> {
    const self = await this.#deadline(
      "metadata self",
      signal,
      (d) => this.#deps.metadata.self({ signal: d, timeoutMs: this.#callTimeoutMs }),
    );
    const nodeName = k8sCompliantHostname(self.name);
    if (self.vpcIp === "") {
      this.#deps.logger.warn("metadata names no VPC IP for this node; the CSR has no IP SAN");
    }
    return {
      metadataName: self.name,
      nodeName,
      role: self.role,
      vpcIp: self.vpcIp,
      providerId: self.providerId,
    };
  }

  /** One round: list the control planes, ask each until one ticket is applied. */
  async #round(
    diskUuid: string,
    self: Omit<JoiningNode, "kubeletKeyPem">,
    signal: AbortSignal | undefined,
  ): Promise<JoinOutcome & { status: "joined" }> {
    const { logger, tickets, applier } = this.#deps;
    const peers = await this.#deadline(
      "metadata peers",
      signal,
      (d) => this.#deps.metadata.peers({ signal: d, timeoutMs: this.#callTimeoutMs }),
    );
    const listed = controlPlaneEndpoints(peers, self, this.#port);
    if (listed.length === 0) {
      throw new JoinRoundError(
        "no-control-planes",
        "metadata lists no control-plane node with an address yet",
      );
    }
    const first = this.#firstEndpoint(listed.length);
    const endpoints = [...listed.slice(first), ...listed.slice(0, first)];
    for (const endpoint of endpoints) {
      signal?.throwIfAborted();
      let ticket: IssueJoinTicketResponse;
      let kubeletKeyPem: string;
      try {
        const credentials = kubeletCredentials(self.nodeName, self.vpcIp === "" ? [] : [self.vpcIp]);
        kubeletKeyPem = credentials.keyPem;
        ticket = await this.#deadline("join ticket request", signal, (d) =>
          tickets.joinTicket(endpoint, {
            diskUuid,
            certificateRequest: credentials.csr,
            isControlPlane: self.role === "ControlPlane",
          }, { signal: d }));
      } catch (error) {
        signal?.throwIfAborted();
        logger.warn("join service refused or unreachable", { endpoint, ...errorFields(error) });
        continue;
      }
      logger.info("received a join ticket", { endpoint });
      try {
        const applied = await applier.apply(ticket, { ...self, kubeletKeyPem }, { signal });
        return { status: "joined", endpoint, nodeName: self.nodeName, role: self.role, ...applied };
      } catch (error) {
        if (isRetryable(error) && !signal?.aborted) {
          logger.warn("join ticket refused before the node lock", { endpoint, ...errorFields(error) });
          continue;
        }
        if (isRetryable(error)) throw error; // aborted before the lock: stopped
        throw new TerminalApplyError(error);
      }
    }
    throw new JoinRoundError(
      "all-refused",
      `no join service issued a usable ticket (${endpoints.join(", ")})`,
    );
  }

  #retry<T>(what: string, attempt: (signal: AbortSignal | undefined) => Promise<T>, signal?: AbortSignal) {
    return retryUntilDone(what, attempt, {
      signal,
      timers: this.#timers,
      intervalMs: this.#retryIntervalMs,
      logger: this.#deps.logger,
      isTerminal: (error) => error instanceof TerminalApplyError,
    });
  }

  #deadline<T>(what: string, signal: AbortSignal | undefined, call: (signal: AbortSignal) => Promise<T>) {
    return withDeadline(this.#timers, what, this.#callTimeoutMs, signal, call);
  }
}

/** Wraps an applier failure after the lock, so the retry loop lets it through. */
class TerminalApplyError extends Error {
  constructor(cause: unknown) {
    super("terminal", { cause });
  }
}

function isRetryable(error: unknown): boolean {
  return typeof error === "object" && error !== null && "retryable" in error && error.retryable === true;
}

/**
 * The join service endpoints of the control-plane peers: role
 * ControlPlane, a VPC IP, not `self` (by name or address), in list order,
 * as "ip:port" ("[v6]:port").
 */
export function controlPlaneEndpoints(
  peers: readonly InstanceMetadata[],
  self: { metadataName: string; vpcIp: string },
  port: number = JOIN_SERVICE_NODE_PORT,
): string[] {
  return peers
    .filter((peer) => peer.role === "ControlPlane" && peer.vpcIp !== "")
    .filter((peer) => peer.name !== self.metadataName && (self.vpcIp === "" || peer.vpcIp !== self.vpcIp))
    .map((peer) => joinHostPort(peer.vpcIp, port));
}

/** A fresh kubelet key and the CSR for it. */
export interface KubeletCredentials {
  /** `EC PRIVATE KEY` PEM (SEC1), P-256. A secret. */
  keyPem: string;
  /** DER PKCS#10: O=system:nodes, CN=system:node:<nodeName>, IP SANs, no DNS names. */
  csr: Uint8Array<ArrayBuffer>;
}

/**
 * Generates a P-256 kubelet key and its CSR for `nodeName` (already
 * normalized) with IP SANs `ips`. Both are built as DER (no certificate
 * library: the bootstrapper starts faster without one). The key is
 * node:crypto's, not WebCrypto's: the runtime's first WebCrypto ECDSA key
 * generation costs 35–45 ms, and node:crypto writes the SEC1 key with its
 * curve named (`parameters [0]`), as the original wrote the kubelet key.
 */
export function kubeletCredentials(nodeName: string, ips: readonly string[]): KubeletCredentials {
  const keys = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const names = ips.map((text) => {
    const address = parseIp(text);
    if (!address) throw new TypeError(`not an IP address: ${JSON.stringify(text)}`);
    return derElement(derContextTag(7, false), address); // GeneralName iPAddress [7]
  });
  // PKCS#10 (RFC 2986): CertificationRequestInfo ::= SEQUENCE { version 0, subject, subjectPKInfo,
  // attributes [0] }, the SANs in an extensionRequest attribute.
  const info = derSequence(
    derUnsignedInteger(Uint8Array.of(0)),
    derSequence(rdn(OID_ORGANIZATION, "system:nodes"), rdn(OID_COMMON_NAME, `system:node:${nodeName}`)),
    new Uint8Array(keys.publicKey.export({ type: "spki", format: "der" })),
    derElement(
      derContextTag(0, true),
      ...(names.length > 0
        ? [derSequence(
          derOid(OID_EXTENSION_REQUEST),
          derElement(
            DerTag.set,
            derSequence(derExtension(OID_SUBJECT_ALT_NAME, false, derSequence(...names))),
          ),
        )]
        : []),
    ),
  );
  // node:crypto's ECDSA signature is DER already, as PKCS#10 wants it.
  const csr = derSequence(
    info,
    ECDSA_WITH_SHA256,
    derBitString(new Uint8Array(sign("sha256", info, keys.privateKey))),
  );
  const sec1 = keys.privateKey.export({ type: "sec1", format: "der" });
  try {
    return { keyPem: encodePem(sec1, PEM_EC_PRIVATE_KEY), csr };
  } finally {
    sec1.fill(0);
  }
}

const OID_ORGANIZATION = "2.5.4.10";
const OID_COMMON_NAME = "2.5.4.3";
const OID_EXTENSION_REQUEST = "1.2.840.113549.1.9.14";
const OID_SUBJECT_ALT_NAME = "2.5.29.17";
const ECDSA_WITH_SHA256 = derSequence(derOid("1.2.840.10045.4.3.2"));
/** UTF8String. */
const UTF8_STRING = 0x0c;

/** A RelativeDistinguishedName of one attribute, a UTF8String. */
function rdn(oid: string, value: string): Uint8Array {
  return derElement(
    DerTag.set,
    derSequence(derOid(oid), derElement(UTF8_STRING, new TextEncoder().encode(value))),
  );
}
