/**
 * The join service's `join.API`: verifies a joining node's attested request
 * and hands out its join (or rejoin) ticket, sealed to the node's attested
 * key.
 *
 * Order of a join ticket (nothing with side effects happens before the
 * request is attested and the CSR is accepted):
 *  1. admission: per-peer and global rate limits;
 *  2. request shape (sizes, disk UUID form);
 *  3. attestation (bounded verifier pool): nonce, evidence, measurements,
 *     binding to this exact request and the node's key;
 *  4. kubelet certificate from the CSR (rejected CSRs stop here);
 *  5. keys from the key service (measurement secret, state-disk key, SSH CA);
 *  6. components, control-plane files, discovery hash, API endpoint;
 *  7. bootstrap token (first side effect), then the JoiningNode record; if the
 *     record fails, the token is deleted again;
 *  8. the ticket, sealed.
 *
 * Errors carry Connect codes callers can act on: PermissionDenied
 * (attestation), InvalidArgument (malformed request or CSR),
 * ResourceExhausted (rate limits, verifier pool full; retry later),
 * Unavailable (key service or API server down; retry), Internal (other).
 * Every decision is one audit log line; nothing secret is ever logged.
 *
 * @module
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { AttestedRequest, Sealed } from "../gen/atls/v1/atls_pb.ts";
import {
  type API,
  ControlPlaneCertOrKeySchema,
  GetChallengeResponseSchema,
  GetStatusResponseSchema,
  type IssueJoinTicketRequest,
  IssueJoinTicketResponseSchema,
  type IssueRejoinTicketRequest,
  IssueRejoinTicketResponseSchema,
  MeasurementSchema,
} from "../gen/join/join_pb.ts";
import { ComponentSchema } from "../gen/components/components_pb.ts";
import type { Measurements, Verification } from "../attestation/attestation.ts";
import type { Clock } from "../clock.ts";
import type { Logger } from "../log/logger.ts";
import type { Counter, Histogram } from "../metrics/registry.ts";
import type { RateLimiter } from "../limits/ratelimiter.ts";
import { PoolFullError, type WorkPool } from "../limits/pool.ts";
import { peerAddressKey } from "../rpc/peer.ts";
import { SharedLoad } from "../async/shared_load.ts";
import { joinRequestDigest, rejoinRequestDigest } from "../atls/reportdata.ts";
import { DERIVED_KEY_LENGTH, MEASUREMENT_SECRET_KEY_ID, stateDiskKeyId } from "../kms/keys.ts";

/** Name of the JoiningNode that marks a joining control plane: no worker may use it. */
const RESERVED_NODE_NAME = "control-plane";

/** Purposes of the attested exchange used by this service. */
export type ExchangePurpose = "join" | "rejoin";

/** The attested exchange (src/atls), as this service uses it. */
export interface AttestedExchange {
  /** A fresh single-use challenge nonce. */
  challenge(options: { signal?: AbortSignal }): Promise<{ nonce: Uint8Array; expiresAt: number }>;
  /**
   * Verifies the attested part of a request bound to `requestDigest`.
   * Rejects with a ConnectError (PermissionDenied, InvalidArgument, ...)
   * carrying a `reason` in its `cause` when one is known.
   */
  verify(request: {
    attestation: AttestedRequest | undefined;
    purpose: ExchangePurpose;
    requestDigest: Uint8Array;
    signal?: AbortSignal;
  }): Promise<VerifiedRequest>;
}

/** A verified request: what was verified, and how to seal the answer to it. */
export interface VerifiedRequest {
  verification: Verification;
  /** Seals a serialized response to the request's attested key. */
  seal(plaintext: Uint8Array): Promise<Sealed>;
}

/** The attestation config in force, for status and audit (the config watcher). */
export interface AttestationPolicy {
  current(): {
    config: { variant: string; measurements: Measurements };
    /** Measurements digest. */
    digest: string;
    generation: number;
  };
}

/** Derived keys. Rejects with a ConnectError (Unavailable when the key service cannot be reached). */
export interface KeySource {
  getDataKey(id: string, length: number, options: { signal?: AbortSignal }): Promise<Uint8Array>;
}

/** Signs kubelet certificates with the cluster CA. */
export interface KubeletSigner {
  /**
   * Checks the CSR and signs it; resolves to the certificate and the
   * normalized node name. Rejects with ConnectError InvalidArgument when the
   * CSR breaks a rule, Internal when the CA is broken.
   */
  sign(
    csrDer: Uint8Array,
    options: { signal?: AbortSignal },
  ): Promise<{ certificatePem: string; nodeName: string }>;
}

/** Cluster facts that go into every ticket. Rejects with ConnectError (Unavailable for API-server outages). */
export interface ClusterInfo {
  /** The Kubernetes components to install and the name of the ConfigMap listing them. */
  components(options: { signal?: AbortSignal }): Promise<{
    configMapName: string;
    components: { url: string; hash: string; installPath: string; extract: boolean }[];
  }>;
  /** "sha256:<hex>" pin of the cluster CA's public key. */
  discoveryTokenCaCertHash(options: { signal?: AbortSignal }): Promise<string>;
  /** "host:port" of the API server handed to nodes. */
  apiServerEndpoint(options: { signal?: AbortSignal }): Promise<string>;
  /** The eight CA/key files for control-plane nodes. */
  controlPlaneFiles(options: { signal?: AbortSignal }): Promise<{ name: string; data: Uint8Array }[]>;
}

/** Bootstrap tokens in the API server. */
export interface BootstrapTokens {
  /** Creates a token Secret; resolves to the token "<id>.<secret>". */
  create(options: { signal?: AbortSignal }): Promise<{ token: string; tokenId: string }>;
  /** Deletes a token created by {@linkcode create} (best-effort cleanup). */
  delete(tokenId: string, options: { signal?: AbortSignal }): Promise<void>;
}

/** Records joining nodes for the node operator (JoiningNode resources). */
export interface JoiningNodes {
  record(
    node: { name: string; componentsReference: string; isControlPlane: boolean },
    options: { signal?: AbortSignal },
  ): Promise<void>;
}

/** Certifies SSH host keys. */
export interface SshHostCertifier {
  certify(
    hostPublicKey: Uint8Array,
    principals: string[],
    options: { signal?: AbortSignal },
  ): Promise<{ hostCertificate: Uint8Array; caPublicKey: Uint8Array }>;
}

/** Metrics the service records. */
export interface JoinServiceMetrics {
  /** Labels: method, outcome (issued|rejected), reason. */
  decisions: Counter;
  /** Labels: variant, outcome. */
  verificationSeconds: Histogram;
  /** Labels: operation. */
  keyServiceSeconds: Histogram;
  /** Labels: operation. */
  apiServerSeconds: Histogram;
}

/** Everything the join service handler needs. */
export interface JoinServiceDependencies {
  exchange: AttestedExchange;
  attestation: AttestationPolicy;
  keys: KeySource;
  kubeletSigner: KubeletSigner;
  cluster: ClusterInfo;
  tokens: BootstrapTokens;
  joiningNodes: JoiningNodes;
  ssh: SshHostCertifier;
  /** Raw measurement salt handed to nodes. */
  measurementSalt: Uint8Array;
  rateLimiter: RateLimiter;
  verifierPool: WorkPool;
  metrics: JoinServiceMetrics;
  /** Receives one audit line per decision. */
  audit: Logger;
  logger: Logger;
  clock: Clock;
}

/** Request size limits (bytes or counts). */
export const LIMITS = {
  certificateRequest: 16 * 1024,
  hostPublicKey: 4 * 1024,
  principals: 16,
  principalLength: 253,
} as const;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Builds the `join.API` implementation. */
export function createJoinService(deps: JoinServiceDependencies): ServiceImpl<typeof API> {
  const startedAt = deps.clock.now();
  let challengesFailing = false;

  /** Runs one ticket decision: admission, audit, metrics and error mapping around `issue`. */
  async function decide<T>(
    method: "IssueJoinTicket" | "IssueRejoinTicket",
    ctx: HandlerContext,
    fields: Record<string, unknown>,
    issue: (audit: Record<string, unknown>) => Promise<T>,
  ): Promise<T> {
    const peer = ctx.values.get(peerAddressKey);
    const state = deps.attestation.current();
    const audit: Record<string, unknown> = {
      audit: true,
      method,
      peer,
      variant: state.config.variant,
      measurementsDigest: state.digest,
      ...fields,
    };
    try {
      const refused = deps.rateLimiter.take(peer);
      if (refused) {
        throw withReason(
          new ConnectError(
            refused === "peer"
              ? "rate limit exceeded for this peer; retry later"
              : "join service is at its global rate limit; retry later",
            Code.ResourceExhausted,
          ),
          `rate-limit-${refused}`,
        );
      }
      const result = await issue(audit);
      deps.metrics.decisions.inc({ method, outcome: "issued", reason: "" });
      deps.audit.info("ticket issued", { ...audit, outcome: "issued" });
      return result;
    } catch (e) {
      const error = toConnectError(e);
      const reason = reasonOf(error);
      if (error.code === Code.Internal && error.cause !== undefined) {
        deps.logger.error("unexpected error", { method, step: error.rawMessage, error: error.cause });
      }
      deps.metrics.decisions.inc({ method, outcome: "rejected", reason });
      deps.audit.info("ticket rejected", {
        ...audit,
        keyDigest: audit.keyDigest ?? (error as { keyDigest?: string }).keyDigest,
        outcome: "rejected",
        reason,
        code: Code[error.code],
        error: error.rawMessage,
      });
      throw error;
    }
  }

  /** Verifies the attested request inside the bounded verifier pool. */
  async function verify(
    attestation: AttestedRequest | undefined,
    purpose: ExchangePurpose,
    requestDigest: Uint8Array,
    signal: AbortSignal,
    audit: Record<string, unknown>,
  ): Promise<VerifiedRequest> {
    const variant = deps.attestation.current().config.variant;
    try {
      const verified = await deps.verifierPool.run(
        () =>
          deps.metrics.verificationSeconds.time(
            { variant },
            () => deps.exchange.verify({ attestation, purpose, requestDigest, signal }),
          ),
        { signal },
      );
      // Which key attested, and what it reported: the audit trail names the node's TPM and boot state.
      audit.keyDigest = verified.verification.keyDigest;
      audit.reportedMeasurementsDigest = await reportedMeasurementsDigest(verified.verification);
      if (verified.verification.warnings.length > 0) {
        audit.warnings = verified.verification.warnings;
      }
      return verified;
    } catch (e) {
      if (e instanceof PoolFullError) {
        throw withReason(
          new ConnectError(`${e.message}; retry later`, Code.ResourceExhausted),
          "verifier-pool-full",
        );
      }
      throw e;
    }
  }

  const keyService = (operation: string, id: string, signal?: AbortSignal) =>
    step(
      `getting ${operation}`,
      () =>
        deps.metrics.keyServiceSeconds.time(
          { operation },
          () => deps.keys.getDataKey(id, DERIVED_KEY_LENGTH, { signal }),
        ),
    );
  // The measurement secret is one value for the whole cluster: fetched once, again after a failure.
  const sharedMeasurementSecret = new SharedLoad(() =>
    keyService("measurement secret", MEASUREMENT_SECRET_KEY_ID)
  );
  const apiServer = <T>(operation: string, fn: () => Promise<T>) =>
    step(operation, () => deps.metrics.apiServerSeconds.time({ operation }, fn));

  return {
    async getChallenge(_req, ctx) {
      try {
        const { nonce, expiresAt } = await deps.exchange.challenge({ signal: ctx.signal });
        if (challengesFailing) deps.logger.info("issuing challenges again");
        challengesFailing = false;
        return create(GetChallengeResponseSchema, { nonce, expiresAtUnixMs: BigInt(expiresAt) });
      } catch (e) {
        const error = toConnectError(e);
        // Challenges are unauthenticated: log an outage once, not once per caller.
        if (!challengesFailing) {
          deps.logger.warn("cannot issue challenges", { error: error.cause ?? error.rawMessage });
        }
        challengesFailing = true;
        throw error;
      }
    },

    issueJoinTicket(req, ctx) {
      const role = req.isControlPlane ? "control-plane" : "worker";
      return decide("IssueJoinTicket", ctx, { diskUuid: printable(req.diskUuid), role }, async (audit) => {
        checkJoinRequest(req);
        const diskUuid = stateDiskKeyId(req.diskUuid);
        const verified = await verify(req.attestation, "join", await digestOfJoin(req), ctx.signal, audit);
        const signal = ctx.signal;

        const kubelet = await step(
          "signing kubelet certificate",
          () => deps.kubeletSigner.sign(req.certificateRequest, { signal }),
        );
        audit.nodeName = kubelet.nodeName;
        checkIdentity(req, kubelet);
        // Independent reads run together; a failure is reported in this order.
        const [measurementSecret, stateDiskKey, ssh, components, caHash, endpoint, controlPlaneFiles] =
          await firstFailure(
            [
              sharedMeasurementSecret.get({ signal }),
              keyService("state disk key", diskUuid, signal),
              req.hostPublicKey.length > 0
                ? step(
                  "certifying SSH host key",
                  () => deps.ssh.certify(req.hostPublicKey, req.hostCertificatePrincipals, { signal }),
                )
                : Promise.resolve(undefined),
              apiServer("getting components", () => deps.cluster.components({ signal })),
              step("getting discovery CA hash", () => deps.cluster.discoveryTokenCaCertHash({ signal })),
              step("getting API server endpoint", () => deps.cluster.apiServerEndpoint({ signal })),
              req.isControlPlane
                ? step(
                  "loading control-plane certificates and keys",
                  () => deps.cluster.controlPlaneFiles({ signal }),
                )
                : Promise.resolve([]),
            ] as const,
          );

        const { token, tokenId } = await apiServer(
          "creating bootstrap token",
          () => deps.tokens.create({ signal }),
        );
        // A token nobody received is deleted again (the JoiningNode record or the sealing failed).
        try {
          await apiServer("recording joining node", () =>
            deps.joiningNodes.record({
              name: kubelet.nodeName,
              componentsReference: components.configMapName,
              isControlPlane: req.isControlPlane,
            }, { signal }));
          const ticket = create(IssueJoinTicketResponseSchema, {
            stateDiskKey,
            measurementSalt: deps.measurementSalt,
            measurementSecret,
            kubeletCert: new TextEncoder().encode(kubelet.certificatePem),
            apiServerEndpoint: endpoint,
            token,
            discoveryTokenCaCertHash: caHash,
            controlPlaneFiles: controlPlaneFiles.map((f) => create(ControlPlaneCertOrKeySchema, f)),
            kubernetesComponents: components.components.map((c) => create(ComponentSchema, c)),
            authorizedCaPublicKey: ssh?.caPublicKey ?? new Uint8Array(),
            hostCertificate: ssh?.hostCertificate ?? new Uint8Array(),
          });
          const sealed = await step(
            "sealing ticket",
            () => verified.seal(toBinary(IssueJoinTicketResponseSchema, ticket)),
          );
          return create(IssueJoinTicketResponseSchema, { sealed });
        } catch (e) {
          await deps.tokens.delete(tokenId, {}).catch((cleanup) =>
            deps.logger.warn("could not delete unused bootstrap token", { tokenId, error: cleanup })
          );
          throw e;
        }
      });
    },

    issueRejoinTicket(req, ctx) {
      return decide(
        "IssueRejoinTicket",
        ctx,
        { diskUuid: printable(req.diskUuid), role: "rejoin" },
        async (audit) => {
          checkDiskUuid(req);
          const diskUuid = stateDiskKeyId(req.diskUuid);
          const verified = await verify(
            req.attestation,
            "rejoin",
            await digestOfRejoin(req),
            ctx.signal,
            audit,
          );
          const measurementSecret = await sharedMeasurementSecret.get({ signal: ctx.signal });
          const stateDiskKey = await keyService("state disk key", diskUuid, ctx.signal);
          const ticket = create(IssueRejoinTicketResponseSchema, { stateDiskKey, measurementSecret });
          const sealed = await step(
            "sealing ticket",
            () => verified.seal(toBinary(IssueRejoinTicketResponseSchema, ticket)),
          );
          return create(IssueRejoinTicketResponseSchema, { sealed });
        },
      );
    },

    getStatus() {
      const state = deps.attestation.current();
      const counters: Record<string, bigint> = {};
      for (const [labels, value] of deps.metrics.decisions.entries()) {
        counters[labels || "total"] = BigInt(value);
      }
      return create(GetStatusResponseSchema, {
        attestationVariant: state.config.variant,
        measurementsDigest: state.digest,
        configGeneration: BigInt(state.generation),
        counters,
        startedAtUnixMs: BigInt(startedAt),
        measurements: [...state.config.measurements.entries()].sort(([a], [b]) => a - b).map(([index, m]) =>
          create(MeasurementSchema, {
            index,
            expected: Array.from(m.expected, (b) => b.toString(16).padStart(2, "0")).join(""),
            warnOnly: m.warnOnly,
          })
        ),
      });
    },
  };
}

function checkDiskUuid(req: { diskUuid: string }): void {
  if (!UUID.test(req.diskUuid)) {
    throw withReason(
      new ConnectError(
        `disk_uuid must be a UUID like 0123abcd-0000-4000-8000-00000000cafe, got ${
          JSON.stringify(printable(req.diskUuid))
        }`,
        Code.InvalidArgument,
      ),
      "malformed-request",
    );
  }
}

function checkJoinRequest(req: IssueJoinTicketRequest): void {
  checkDiskUuid(req);
  const invalid = (message: string) =>
    withReason(new ConnectError(message, Code.InvalidArgument), "malformed-request");
  if (req.certificateRequest.length === 0) throw invalid("certificate_request is empty");
  if (req.certificateRequest.length > LIMITS.certificateRequest) {
    throw invalid(
      `certificate_request is ${req.certificateRequest.length} bytes; at most ${LIMITS.certificateRequest}`,
    );
  }
  if (req.hostPublicKey.length > LIMITS.hostPublicKey) {
    throw invalid(`host_public_key is ${req.hostPublicKey.length} bytes; at most ${LIMITS.hostPublicKey}`);
  }
  if (req.hostCertificatePrincipals.length > LIMITS.principals) {
    throw invalid(`at most ${LIMITS.principals} host_certificate_principals`);
  }
  for (const principal of req.hostCertificatePrincipals) {
    if (principal.length === 0 || principal.length > LIMITS.principalLength) {
      throw invalid(`host certificate principals must be 1 to ${LIMITS.principalLength} characters`);
    }
  }
  if (req.hostCertificatePrincipals.length > 0 && req.hostPublicKey.length === 0) {
    throw invalid("host_certificate_principals given without host_public_key");
  }
}

function digestOfJoin(req: IssueJoinTicketRequest): Promise<Uint8Array> {
  return joinRequestDigest({
    diskUuid: req.diskUuid,
    certificateRequest: req.certificateRequest,
    isControlPlane: req.isControlPlane,
    hostPublicKey: req.hostPublicKey,
    hostCertificatePrincipals: req.hostCertificatePrincipals,
  });
}

function digestOfRejoin(req: IssueRejoinTicketRequest): Promise<Uint8Array> {
  return rejoinRequestDigest({ diskUuid: req.diskUuid });
}

/** SHA-256 hex of the reported measurements as canonical JSON (indices ascending, lower-case hex). */
async function reportedMeasurementsDigest(verification: Verification): Promise<string> {
  const entries = Object.entries(verification.measurements).sort(([a], [b]) => Number(a) - Number(b));
  const canonical = new TextEncoder().encode(JSON.stringify(Object.fromEntries(entries)));
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", canonical));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * No worker may take the name that marks a joining control plane. (The
 * node's name, IP addresses and SSH principals are otherwise its own claims,
 * as in the original: attestation proves the node runs the cluster's image,
 * not which name it should have.)
 */
function checkIdentity(req: IssueJoinTicketRequest, kubelet: { nodeName: string }): void {
  if (!req.isControlPlane && kubelet.nodeName === RESERVED_NODE_NAME) {
    throw withReason(
      new ConnectError(`node name "${RESERVED_NODE_NAME}" is reserved`, Code.InvalidArgument),
      "identity",
    );
  }
}

/**
 * Awaits every promise; when some fail, rejects with the failure of the
 * earliest one in the list (not the first to settle), so errors do not
 * depend on timing.
 */
async function firstFailure<T extends readonly unknown[]>(
  promises: { [K in keyof T]: Promise<T[K]> },
): Promise<T> {
  const settled = await Promise.allSettled(promises);
  const failed = settled.find((result) => result.status === "rejected");
  if (failed) throw (failed as PromiseRejectedResult).reason;
  return settled.map((result) => (result as PromiseFulfilledResult<unknown>).value) as unknown as T;
}

/** Runs one step; a failure becomes a ConnectError whose message names the step. */
async function step<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    const error = toConnectError(e);
    if (error.code === Code.PermissionDenied || error.code === Code.InvalidArgument) throw error;
    return Promise.reject(
      withReason(
        new ConnectError(`${what}: ${error.rawMessage}`, error.code, undefined, undefined, error.cause),
        reasonOf(error),
      ),
    );
  }
}

/**
 * Any error as a ConnectError. An unexpected one (a bug, not a dependency's
 * answer) reaches the client only as "internal error"; the original stays
 * in `cause` for the service's own log.
 */
function toConnectError(e: unknown): ConnectError {
  if (e instanceof ConnectError) return e;
  if (e instanceof DOMException && e.name === "AbortError") {
    return withReason(new ConnectError("request canceled", Code.Canceled), "canceled");
  }
  if (e instanceof DOMException && e.name === "TimeoutError") {
    return withReason(new ConnectError("request timed out", Code.DeadlineExceeded), "deadline");
  }
  return withReason(new ConnectError("internal error", Code.Internal, undefined, undefined, e), "internal");
}

/** Attaches a machine-readable reason (for metrics and audit) to an error. */
function withReason(error: ConnectError, reason: string): ConnectError {
  (error as ConnectError & { reason?: string }).reason = reason;
  return error;
}

function reasonOf(e: unknown): string {
  const own = (e as { reason?: unknown })?.reason;
  if (typeof own === "string") return own;
  const cause = (e as { cause?: { reason?: unknown } })?.cause?.reason;
  if (typeof cause === "string") return cause;
  if (e instanceof ConnectError) return Code[e.code].toLowerCase();
  return "internal";
}

/** A request field made safe for logs: bounded length, no control characters. */
function printable(value: string): string {
  // deno-lint-ignore no-control-regex
  return value.slice(0, 80).replace(/[\u0000-\u001f\u007f]/g, "?");
}
