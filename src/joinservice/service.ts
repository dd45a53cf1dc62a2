/**
 * The join service's `join.API`: verifies a joining node's attested request
 * and hands out its join (or rejoin) ticket, sealed to the node's attested
 * key. {@linkcode JoinService} walks a ticket by name:
 *
 *  0. the RPC server's bound on calls: a ticket call that arrived with the
 *     server's calls in progress and waiting full (`callOverloadedKey`, for
 *     the {@linkcode TICKET_METHODS} the service asks `serveRpc` to pass it)
 *     is refused with "server-busy" before anything else, so that it is
 *     audited and counted like every other refusal and costs no attestation
 *     work, no peer rate and no ticket budget;
 *  1. {@linkcode JoinService.admit}: the peer's rate (per IPv4 address or
 *     IPv6 /64);
 *  2. the request's own fields (`requestchecks.ts`);
 *  3. {@linkcode JoinService.verify}: the cheap exchange checks (structure,
 *     nonce), then the evidence in the bounded verifier pool: measurements,
 *     binding to this exact request and the node's key;
 *  4. {@linkcode JoinService.authorize}: a control-plane request only from
 *     an attestation key the operator named for control planes;
 *  5. the ticket budget shared by all peers, spent only by attested
 *     requests, so requests failing the steps above cannot exhaust it;
 *  6. {@linkcode JoinService.issueJoin}: the kubelet certificate from the
 *     CSR (a rejected CSR stops here); keys from the key service,
 *     components, control-plane files, discovery hash and endpoint
 *     (concurrently; a failure is reported in this order); then the
 *     bootstrap token (the first side effect; a create whose outcome is
 *     unknown is undone) and the JoiningNode record; if the record or the
 *     sealing fails, or the node is gone before its answer, the token is
 *     deleted again;
 *     {@linkcode JoinService.issueRejoin}: the two keys;
 *  7. the ticket, sealed.
 *
 * Nothing with a side effect happens before step 6's CSR is accepted. Every
 * refusal is a `Rejection` whose reason (`rejections.ts`) goes to the
 * metrics and the one audit entry per decision; the node gets its code and
 * message. Nothing secret is ever logged.
 *
 * @module
 */
import { primitives } from "../crypto/primitives.ts";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { trusts, type Verification } from "../attestation/attestation.ts";
import { CONTROL_PLANE_ANY_KEY_WARNING } from "../attestation/watcher.ts";
import type { AttestationState } from "../attestation/watcher.ts";
import { SharedLoad } from "../async/shared_load.ts";
import { joinRequestDigest, rejoinRequestDigest } from "../atls/reportdata.ts";
import type { AttestedRequest } from "../gen/atls/v1/atls_pb.ts";
import { ComponentSchema } from "../gen/components/components_pb.ts";
import {
  API,
  ControlPlaneCertOrKeySchema,
  DecisionCountSchema,
  DecisionSchema,
  type GetChallengeResponse,
  GetChallengeResponseSchema,
  type GetStatusResponse,
  GetStatusResponseSchema,
  type IssueJoinTicketRequest,
  type IssueJoinTicketResponse,
  IssueJoinTicketResponseSchema,
  type IssueRejoinTicketRequest,
  type IssueRejoinTicketResponse,
  IssueRejoinTicketResponseSchema,
  MeasurementSchema,
} from "../gen/join/join_pb.ts";
import { DERIVED_KEY_LENGTH, MEASUREMENT_SECRET_KEY_ID, stateDiskKeyId } from "../kms/keys.ts";
import { PoolFullError } from "../limits/pool.ts";
import type { Histogram } from "../metrics/registry.ts";
import { callOverloadedKey } from "../rpc/overload.ts";
import { peerAddressKey } from "../rpc/peer.ts";
import { asRejection, toConnectError } from "../rpc/rejection.ts";
import { type AuditEntry, RecentDecisions, type RequestRole, type TicketMethod } from "./audit.ts";
import type {
  ExchangePurpose,
  JoinServiceDependencies,
  RecordedJoiningNode,
  SignalOptions,
  VerifiedAttestation,
} from "./dependencies.ts";
import { CONTROL_PLANE_JOINING_NODE_NAME } from "./joiningnodes.ts";
import { checkJoinRequest, checkRejoinRequest, printable } from "./requestchecks.ts";
import { reject } from "./rejections.ts";

/**
 * The ticket methods: every call is a decision with its audit entry, one
 * beyond the RPC server's bounds too, so `serveRpc` must pass those calls
 * to the service (its `overloadRefusedByService`). The other methods'
 * (GetChallenge, GetStatus) are no decisions: the RPC layer refuses them.
 */
export const TICKET_METHODS = [API.method.issueJoinTicket, API.method.issueRejoinTicket] as const;

/** One ticket decision in progress: the config it is judged by, and what its audit entry will say. */
export interface Decision {
  /** The attestation config and validator in force when the request arrived. */
  readonly state: AttestationState;
  /** The audit entry so far; steps add what they learn (key digest, node name). */
  readonly audit: Omit<AuditEntry, "outcome" | "reason" | "code" | "error">;
}

/** An attested request's parts that {@linkcode JoinService.verify} checks. */
export interface AttestedRequestParts {
  /** The request's attestation (absent when the node sent none). */
  attestation: AttestedRequest | undefined;
  /** What the request is for. */
  purpose: ExchangePurpose;
  /** Digest of the request's security-relevant fields, which the evidence must be bound to. */
  requestDigest: Uint8Array;
}

/** The `join.API` handler. */
export class JoinService {
  readonly #deps: JoinServiceDependencies;
  readonly #startedAt: number;
  /** The measurement secret is one value for the whole cluster: fetched once, again after a failure. */
  readonly #measurementSecret: SharedLoad<Uint8Array>;
  /** Whether challenges are failing now, so an outage is logged once, not once per caller. */
  #challengesFailing = false;
  /** The last decisions, for the status. */
  readonly #recent = new RecentDecisions();

  /** A handler over `deps`. */
  constructor(deps: JoinServiceDependencies) {
    this.#deps = deps;
    this.#startedAt = deps.clock.now();
    this.#measurementSecret = new SharedLoad(() =>
      timed(
        "getting measurement secret",
        deps.metrics.keyServiceSeconds,
        () => deps.keys.getDataKey(MEASUREMENT_SECRET_KEY_ID, DERIVED_KEY_LENGTH, {}),
      )
    );
  }

  /** The `join.API` implementation, for a Connect router. */
  handlers(): ServiceImpl<typeof API> {
    return {
      getChallenge: (_request, context) => this.getChallenge({ signal: context.signal }),
      issueJoinTicket: (request, context) =>
        this.#decide(
          context,
          "IssueJoinTicket",
          request.diskUuid,
          request.isControlPlane ? "control-plane" : "worker",
          (decision) => this.issueJoin(request, decision, { signal: context.signal }),
        ),
      issueRejoinTicket: (request, context) =>
        this.#decide(
          context,
          "IssueRejoinTicket",
          request.diskUuid,
          "rejoin",
          (decision) => this.issueRejoin(request, decision, { signal: context.signal }),
        ),
      getStatus: () => this.status(),
    };
  }

  /** A fresh challenge nonce. Challenges are unauthenticated: an outage is logged once. */
  async getChallenge(options: SignalOptions): Promise<GetChallengeResponse> {
    try {
      const { nonce, expiresAt } = await this.#deps.exchange.challenge(options);
      if (this.#challengesFailing) this.#deps.logger.info("issuing challenges again");
      this.#challengesFailing = false;
      return create(GetChallengeResponseSchema, { nonce, expiresAtUnixMs: BigInt(expiresAt) });
    } catch (error) {
      const rejection = asRejection(error);
      if (!this.#challengesFailing) {
        this.#deps.logger.warn("cannot issue challenges", { error: rejection.cause ?? rejection.message });
      }
      this.#challengesFailing = true;
      throw toConnectError(rejection);
    }
  }

  /** Step 1: the peer's rate. Rejects with "rate-limit-peer". */
  admit(decision: Decision): void {
    if (!this.#deps.peerLimiter.take(decision.audit.peer)) {
      throw reject("rate-limit-peer", "rate limit exceeded for this peer; retry later");
    }
  }

  /**
   * Step 3: the attested request, cheap checks first (outside the verifier
   * pool, so garbage does not queue behind real nodes), then the evidence
   * in the pool. Records the node's key and reported measurements in the
   * audit entry. Rejects with an exchange or attestation reason,
   * "verifier-pool-full" or "key-service-unavailable".
   */
  async verify(
    decision: Decision,
    request: AttestedRequestParts,
    options: SignalOptions,
  ): Promise<VerifiedAttestation> {
    const { signal } = options;
    const { exchange, verifierPool, metrics } = this.#deps;
    const { validator, config } = decision.state;
    const prechecked = await exchange.precheck({
      attestation: request.attestation,
      purpose: request.purpose,
      signal,
    });
    let verified: VerifiedAttestation;
    try {
      verified = await verifierPool.run(
        () =>
          metrics.verificationSeconds.time(
            { variant: config.variant },
            () => prechecked.verify({ requestDigest: request.requestDigest, validator, signal }),
          ),
        { signal },
      );
    } catch (error) {
      if (error instanceof PoolFullError) throw reject("verifier-pool-full", `${error.message}; retry later`);
      throw error;
    }
    // Which key attested, and what it reported: the audit trail names the node's TPM and boot state.
    const { audit } = decision;
    audit.keyDigest = verified.verification.keyDigest;
    audit.reportedMeasurementsDigest = await reportedMeasurementsDigest(verified.verification);
    if (verified.verification.warnings.length > 0) audit.warnings = verified.verification.warnings;
    return verified;
  }

  /**
   * Step 4: the role. Workers and control planes boot the same image, so
   * only the operator's choice of attestation keys
   * (`akTrust.controlPlaneKeyDigests`) tells them apart: a control-plane
   * request from any other key is refused with "control-plane-not-allowed".
   * A grant that rests on `controlPlaneAnyKey` is logged as insecure.
   */
  authorize(decision: Decision, verification: Verification, isControlPlane: boolean): void {
    if (!isControlPlane) return;
    const { controlPlanes } = decision.state.config;
    if (!trusts(controlPlanes, verification.keyDigest)) {
      throw reject(
        "control-plane-not-allowed",
        "this node's attestation key may not join as a control plane; the operator names control-plane keys in the attestation config (akTrust.controlPlaneKeyDigests)",
      );
    }
    if (controlPlanes.kind === "any") {
      this.#deps.logger.warn(CONTROL_PLANE_ANY_KEY_WARNING, {
        event: "control-plane role granted",
        keyDigest: verification.keyDigest,
      });
    }
  }

  /** Steps 1–7 of a join ticket. */
  async issueJoin(
    request: IssueJoinTicketRequest,
    decision: Decision,
    options: SignalOptions,
  ): Promise<IssueJoinTicketResponse> {
    const deps = this.#deps;
    this.admit(decision);
    checkJoinRequest(request);
    const verified = await this.verify(decision, {
      attestation: request.attestation,
      purpose: "join",
      requestDigest: await joinRequestDigest(request),
    }, options);
    this.authorize(decision, verified.verification, request.isControlPlane);
    this.#spendTicketBudget();

    const kubelet = await timed(
      "signing kubelet certificate",
      undefined,
      () => deps.kubeletSigner.sign(request.certificateRequest, options),
    );
    decision.audit.nodeName = kubelet.nodeName;
    if (!request.isControlPlane && kubelet.nodeName === CONTROL_PLANE_JOINING_NODE_NAME) {
      throw reject("reserved-node-name", `node name "${CONTROL_PLANE_JOINING_NODE_NAME}" is reserved`);
    }
    const [measurementSecret, stateDiskKey, ssh, components, caHash, endpoint, controlPlaneFiles] =
      await allInOrder([
        this.#measurementSecret.get(options),
        this.#stateDiskKey(request.diskUuid, options),
        request.hostPublicKey.length > 0
          ? timed(
            "certifying SSH host key",
            undefined,
            () => deps.ssh.certify(request.hostPublicKey, request.hostCertificatePrincipals, options),
          )
          : Promise.resolve(undefined),
        timed("getting components", deps.metrics.apiServerSeconds, () => deps.components.current(options)),
        timed("getting discovery CA hash", undefined, () => deps.discoveryHash.current(options)),
        timed("getting API server endpoint", undefined, () => deps.apiServerEndpoint.current(options)),
        request.isControlPlane
          ? timed(
            "loading control-plane certificates and keys",
            undefined,
            () => deps.controlPlaneFiles.load(options),
          )
          : Promise.resolve([]),
      ]);

    // The side effects, in this order, and why (see "Faults under load" in the README):
    //  - the token first: it is the one object that is a credential and a fresh one per attempt, and a
    //    failed create whose outcome is unknown (no answer, a server error, the node gone mid-request)
    //    is undone by the token source itself;
    //  - then the JoiningNode: idempotent per node name (a worker's is applied; the same control plane
    //    may record itself again), so one left by a failed attempt is what the node's next attempt
    //    writes anyway; recorded after the token so a failed token create leaves no record at all;
    //  - a failure after the token (record, sealing, or the node gone before its answer) deletes the
    //    token again, best effort, and releases a control plane's record (the object it wrote, by UID).
    // What no order avoids: a node that disconnects after the answer left, a process killed between
    // create and answer, or a delete that fails while the API server is down. Those tokens were never
    // sent anywhere, and the API server's token cleaner deletes them when their TTL ends.
    const { token, tokenId } = await timed(
      "creating bootstrap token",
      deps.metrics.apiServerSeconds,
      () => deps.tokens.create(options),
    );
    let recorded: RecordedJoiningNode | undefined;
    try {
      recorded = await timed(
        "recording joining node",
        deps.metrics.apiServerSeconds,
        () =>
          deps.joiningNodes.record({
            name: kubelet.nodeName,
            componentsReference: components.configMapName,
            isControlPlane: request.isControlPlane,
          }, options),
      );
      const ticket = create(IssueJoinTicketResponseSchema, {
        stateDiskKey,
        measurementSalt: deps.measurementSalt,
        measurementSecret,
        kubeletCert: new TextEncoder().encode(kubelet.certificatePem),
        apiServerEndpoint: endpoint,
        token,
        discoveryTokenCaCertHash: caHash,
        controlPlaneFiles: controlPlaneFiles.map((file) => create(ControlPlaneCertOrKeySchema, file)),
        kubernetesComponents: components.components.map((component) => create(ComponentSchema, component)),
        authorizedCaPublicKey: ssh?.caPublicKey ?? new Uint8Array(),
        hostCertificate: ssh?.hostCertificate ?? new Uint8Array(),
      });
      const sealed = await timed(
        "sealing ticket",
        undefined,
        () => verified.seal(toBinary(IssueJoinTicketResponseSchema, ticket)),
      );
      // A node that gave up already cannot receive the ticket: its token would only wait for the TTL.
      options.signal?.throwIfAborted();
      return create(IssueJoinTicketResponseSchema, { sealed });
    } catch (error) {
      // Cleanup runs even when the node gave up: the token must not outlive the failed ticket, and a
      // control plane's record must not keep the other control planes waiting for its deadline.
      await Promise.all([
        deps.tokens.delete(tokenId, {}).catch((cleanup) =>
          deps.logger.warn("could not delete unused bootstrap token", { tokenId, error: cleanup })
        ),
        recorded &&
        deps.joiningNodes.release(recorded, {}).catch((cleanup) =>
          deps.logger.warn("could not release the control-plane JoiningNode", {
            node: recorded!.node.name,
            error: cleanup,
          })
        ),
      ]);
      throw error;
    }
  }

  /** Steps 1–7 of a rejoin ticket: the state disk key, the measurement secret and salt, nothing else. */
  async issueRejoin(
    request: IssueRejoinTicketRequest,
    decision: Decision,
    options: SignalOptions,
  ): Promise<IssueRejoinTicketResponse> {
    this.admit(decision);
    checkRejoinRequest(request);
    const verified = await this.verify(decision, {
      attestation: request.attestation,
      purpose: "rejoin",
      requestDigest: await rejoinRequestDigest(request),
    }, options);
    this.#spendTicketBudget();
    const [measurementSecret, stateDiskKey] = await allInOrder([
      this.#measurementSecret.get(options),
      this.#stateDiskKey(request.diskUuid, options),
    ]);
    const ticket = create(IssueRejoinTicketResponseSchema, {
      stateDiskKey,
      measurementSecret,
      measurementSalt: this.#deps.measurementSalt,
    });
    const sealed = await timed(
      "sealing ticket",
      undefined,
      () => verified.seal(toBinary(IssueRejoinTicketResponseSchema, ticket)),
    );
    return create(IssueRejoinTicketResponseSchema, { sealed });
  }

  /**
   * The variant, the measurements in force, their digest, the config
   * generation, the decision counters and the most recent decisions (their
   * audit entries, which hold no secret).
   */
  status(): GetStatusResponse {
    const state = this.#deps.attestation.current();
    const { decisions } = this.#deps.metrics;
    const counters: Record<string, bigint> = {};
    for (const [labels, value] of decisions.entries()) {
      counters[labels || "total"] = BigInt(value);
    }
    return create(GetStatusResponseSchema, {
      attestationVariant: state.config.variant,
      measurementsDigest: state.digest,
      configGeneration: BigInt(state.generation),
      counters,
      startedAtUnixMs: BigInt(this.#startedAt),
      measurements: [...state.config.measurements.entries()].sort(([a], [b]) => a - b).map(([index, m]) =>
        create(MeasurementSchema, { index, expected: m.expected.toHex(), warnOnly: m.warnOnly })
      ),
      decisionCounts: decisions.series().map(({ labels, value }) =>
        create(DecisionCountSchema, {
          method: labels.method ?? "",
          outcome: labels.outcome ?? "",
          reason: labels.reason ?? "",
          count: BigInt(value),
        })
      ),
      recentDecisions: this.#recent.list().map((entry) =>
        create(DecisionSchema, {
          timeUnixMs: BigInt(entry.timeUnixMs),
          method: entry.method,
          peer: entry.peer,
          role: entry.role,
          nodeName: entry.nodeName ?? "",
          diskUuid: entry.diskUuid,
          outcome: entry.outcome,
          reason: entry.reason ?? "",
          code: entry.code ?? "",
          message: entry.error ?? "",
          keyDigest: entry.keyDigest ?? "",
        })
      ),
    });
  }

  /** Step 5: one token of the budget all peers share. Rejects with "rate-limit-global". */
  #spendTicketBudget(): void {
    if (!this.#deps.ticketBudget.take()) {
      throw reject("rate-limit-global", "join service is at its global rate limit; retry later");
    }
  }

  #stateDiskKey(diskUuid: string, options: SignalOptions): Promise<Uint8Array> {
    return timed(
      "getting state disk key",
      this.#deps.metrics.keyServiceSeconds,
      () => this.#deps.keys.getDataKey(stateDiskKeyId(diskUuid), DERIVED_KEY_LENGTH, options),
    );
  }

  /** Runs one ticket decision: its audit entry, metrics and the conversion of any failure. */
  async #decide<T>(
    context: HandlerContext,
    method: TicketMethod,
    diskUuid: string,
    role: RequestRole,
    issue: (decision: Decision) => Promise<T>,
  ): Promise<T> {
    const { metrics, logger } = this.#deps;
    const state = this.#deps.attestation.current();
    const decision: Decision = {
      state,
      audit: {
        method,
        peer: context.values.get(peerAddressKey),
        variant: state.config.variant,
        measurementsDigest: state.digest,
        diskUuid: printable(diskUuid),
        role,
      },
    };
    try {
      // Step 0: beyond the server's bounds, nothing but this refusal and its audit entry.
      const overloaded = context.values.get(callOverloadedKey);
      if (overloaded !== undefined) throw reject("server-busy", overloaded);
      const result = await issue(decision);
      metrics.decisions.inc({ method, outcome: "issued", reason: "" });
      this.#record({ ...decision.audit, outcome: "issued" });
      return result;
    } catch (error) {
      const rejection = asRejection(error);
      if (rejection.code === Code.Internal && rejection.cause !== undefined) {
        logger.error("unexpected error", {
          method,
          step: rejection.step,
          reason: rejection.reason,
          error: rejection.cause,
        });
      }
      metrics.decisions.inc({ method, outcome: "rejected", reason: rejection.reason });
      this.#record({
        ...decision.audit,
        keyDigest: decision.audit.keyDigest ?? rejection.keyDigest,
        outcome: "rejected",
        reason: rejection.reason,
        code: Code[rejection.code],
        error: rejection.message,
      });
      throw toConnectError(rejection);
    }
  }

  /** Writes a decision's audit entry and keeps it among the recent ones. */
  #record(entry: AuditEntry): void {
    this.#deps.audit.write(entry);
    this.#recent.add(entry, this.#deps.clock.now());
  }
}

/**
 * Runs one step of a ticket: its latency into `histogram` (as operation
 * `step`) when given, and a failure that is not the node's own (not
 * InvalidArgument or PermissionDenied) named after the step.
 */
async function timed<T>(step: string, histogram: Histogram | undefined, fn: () => Promise<T>): Promise<T> {
  try {
    return await (histogram ? histogram.time({ operation: step }, fn) : fn());
  } catch (error) {
    const rejection = asRejection(error);
    const nodesOwn = rejection.code === Code.InvalidArgument || rejection.code === Code.PermissionDenied;
    throw nodesOwn ? rejection : rejection.during(step);
  }
}

/**
 * Awaits every promise; when some fail, rejects with the failure of the
 * earliest one in the list (not the first to settle), so the error a node
 * gets does not depend on timing.
 */
async function allInOrder<T extends readonly unknown[] | []>(promises: T) {
  await Promise.allSettled(promises);
  return await Promise.all(promises);
}

/** SHA-256 hex of the reported measurements as canonical JSON (indices ascending, lower-case hex). */
async function reportedMeasurementsDigest(verification: Verification): Promise<string> {
  const entries = Object.entries(verification.measurements).sort(([a], [b]) => Number(a) - Number(b));
  const canonical = new TextEncoder().encode(JSON.stringify(Object.fromEntries(entries)));
  return (await primitives.sha256(canonical)).toHex();
}
