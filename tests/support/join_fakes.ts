/**
 * Fakes of every interface the join service's handler declares
 * (`src/joinservice/dependencies.ts`), for unit tests of the handler and for
 * the attested-exchange fixture: `fakeDependencies(overrides)` builds a
 * working set, records every write to the API server in order, and collects
 * audit entries and log lines. Overrides replace single dependencies, e.g.
 * with {@linkcode failing} ones.
 *
 * The fakes' answers are recognizable: a key is {@linkcode fakeKey} of its
 * ID, the node name is the CSR's bytes as text, the sealed ticket is the
 * plaintext (see {@linkcode unsealFake}).
 *
 * @module
 */
import { NONCE_LENGTH } from "../../src/atls/nonce.ts";
import { create, fromBinary } from "@bufbuild/protobuf";
import { createContextValues, createHandlerContext, type HandlerContext } from "@connectrpc/connect";
import type { AkTrust, Validator, Verification } from "../../src/attestation/attestation.ts";
import type { AttestationConfig } from "../../src/attestation/config.ts";
import type { AttestationState } from "../../src/attestation/watcher.ts";
import { ExchangeError, exchangeRejection } from "../../src/atls/errors.ts";
import { type Sealed, SealedSchema } from "../../src/gen/atls/v1/atls_pb.ts";
import {
  API,
  type IssueJoinTicketRequest,
  IssueJoinTicketRequestSchema,
  type IssueJoinTicketResponse,
  IssueJoinTicketResponseSchema,
} from "../../src/gen/join/join_pb.ts";
import { createLogger } from "../../src/log/logger.ts";
import { WorkPool } from "../../src/limits/pool.ts";
import { PeerRateLimiter, TokenBucket } from "../../src/limits/ratelimiter.ts";
import { MetricsRegistry } from "../../src/metrics/registry.ts";
import { callOverloadedKey } from "../../src/rpc/overload.ts";
import { peerAddressKey } from "../../src/rpc/peer.ts";
import type { AuditEntry } from "../../src/joinservice/audit.ts";
import type {
  AttestedExchange,
  JoinServiceDependencies,
  VerifiedAttestation,
} from "../../src/joinservice/dependencies.ts";
import { type JoinReason, reject } from "../../src/joinservice/rejections.ts";
import { ManualClock } from "./manual_clock.ts";

/** The attestation key of the fake worker nodes. */
export const WORKER_KEY = "0a".repeat(32);
/** The attestation key the fake config lets join as a control plane. */
export const CONTROL_PLANE_KEY = "0c".repeat(32);
/** A disk UUID. */
export const DISK_UUID = "6f0d8e2a-3c1b-4a5e-9f7d-2b8c4e6a1d3f";
/** The API server endpoint the fakes hand out. */
export const FAKE_ENDPOINT = "10.0.0.1:6443";
/** The components ConfigMap the fakes name. */
export const FAKE_COMPONENTS_CONFIGMAP = "k8s-components-sha256-00";
/** The peer address of every fake call. */
export const FAKE_PEER = "10.0.0.7";

/** What the fake key source answers for `id`: 32 bytes spelling the ID. */
export function fakeKey(id: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(`key:${id}`.padEnd(32, ".").slice(0, 32));
}

/** A dependency call that rejects with `reason`, as the real adapter would. */
export function failing(reason: JoinReason, message = `${reason} (fake)`): () => Promise<never> {
  return () => Promise.reject(reject(reason, message));
}

/** The join ticket inside a fake-sealed response (the fake seal keeps the plaintext as it is). */
export function unsealFake(response: IssueJoinTicketResponse): IssueJoinTicketResponse {
  return fromBinary(IssueJoinTicketResponseSchema, response.sealed?.ciphertext ?? new Uint8Array());
}

/** Changes to the fake set: dependencies to replace, and the fake exchange's verdict. */
export interface FakeOverrides extends Partial<JoinServiceDependencies> {
  /** Changes to the attestation config in force (default: the two keys above, PCR 4). */
  config?: Partial<AttestationConfig>;
  /** The attestation key the fake exchange reports; default {@linkcode WORKER_KEY}. */
  keyDigest?: string;
  /** Makes the fake exchange reject the cheap checks with this exchange reason (e.g. "nonce-bad-mac"). */
  precheckFails?: ExchangeError["reason"];
  /** Makes the fake exchange reject the evidence with this reason (e.g. "measurement-mismatch"). */
  verifyFails?: ExchangeError["reason"];
  /** Makes sealing the ticket fail ("seal-failed"). */
  sealFails?: boolean;
}

/** A fake set and what it saw. */
export interface FakeWorld {
  deps: JoinServiceDependencies;
  /** API server writes in order: "create token <id>", "record <name> (<role>)", "delete token <id>". */
  writes: string[];
  audit: AuditEntry[];
  /** Log lines (parsed JSON), audit entries excluded. */
  logs: Record<string, unknown>[];
  clock: ManualClock;
  registry: MetricsRegistry;
  /** How many cheap checks and verifications the fake exchange ran. */
  exchangeCalls: { precheck: number; verify: number };
}

/** The fake config: the worker and control-plane keys trusted, only the latter for control planes. */
function fakeConfig(overrides: Partial<AttestationConfig> = {}): AttestationConfig {
  const allowed: AkTrust = { kind: "allow-list", keyDigests: new Set([WORKER_KEY, CONTROL_PLANE_KEY]) };
  return {
    variant: "qemu-vtpm",
    measurements: new Map([[4, { expected: new Uint8Array(32).fill(4), warnOnly: false }]]),
    akTrust: allowed,
    controlPlanes: { kind: "allow-list", keyDigests: new Set([CONTROL_PLANE_KEY]) },
    ...overrides,
  };
}

/** A validator the fake exchange never calls (the exchange itself decides). */
const unusedValidator: Validator = {
  variant: "qemu-vtpm",
  validate: () => Promise.reject(new Error("the fake exchange does not validate")),
};

/** Builds a full set of fakes with `overrides` applied. */
export function fakeDependencies(overrides: FakeOverrides = {}): FakeWorld {
  const { config, keyDigest, precheckFails, verifyFails, sealFails, ...replaced } = overrides;
  const clock = new ManualClock();
  const writes: string[] = [];
  const audit: AuditEntry[] = [];
  const logs: Record<string, unknown>[] = [];
  const registry = new MetricsRegistry();
  const exchangeCalls = { precheck: 0, verify: 0 };
  const state: AttestationState = {
    config: fakeConfig(config),
    validator: unusedValidator,
    generation: 1,
    digest: "ab".repeat(32),
  };
  const verification: Verification = {
    variant: "qemu-vtpm",
    warnings: [],
    measurements: { 4: "04".repeat(32) },
    keyDigest: keyDigest ?? WORKER_KEY,
  };
  let tokens = 0;
  const deps: JoinServiceDependencies = {
    exchange: fakeExchange({ verification, precheckFails, verifyFails, sealFails, calls: exchangeCalls }),
    attestation: { current: () => state },
    keys: { getDataKey: (id) => Promise.resolve(fakeKey(id)) },
    kubeletSigner: {
      sign: (csr) => {
        const nodeName = new TextDecoder().decode(csr);
        return Promise.resolve({ certificatePem: `CERTIFICATE for ${nodeName}`, nodeName });
      },
    },
    components: {
      current: () =>
        Promise.resolve({
          configMapName: FAKE_COMPONENTS_CONFIGMAP,
          components: [{
            url: "https://example/kubelet",
            hash: `sha256:${"00".repeat(32)}`,
            installPath: "/k",
            extract: false,
          }],
        }),
    },
    discoveryHash: { current: () => Promise.resolve(`sha256:${"cc".repeat(32)}`) },
    apiServerEndpoint: { current: () => Promise.resolve(FAKE_ENDPOINT) },
    controlPlaneFiles: {
      load: () => Promise.resolve([{ name: "ca.key", data: new TextEncoder().encode("CA KEY") }]),
    },
    tokens: {
      create: () => {
        const tokenId = `tok${String(++tokens).padStart(3, "0")}`;
        writes.push(`create token ${tokenId}`);
        return Promise.resolve({ token: `${tokenId}.0123456789abcdef`, tokenId });
      },
      delete: (tokenId) => {
        writes.push(`delete token ${tokenId}`);
        return Promise.resolve();
      },
    },
    joiningNodes: {
      record: (node) => {
        writes.push(`record ${node.name} (${node.isControlPlane ? "control-plane" : "worker"})`);
        return Promise.resolve({ node, uid: node.isControlPlane ? `uid-${node.name}` : undefined });
      },
      release: ({ node, uid }) => {
        writes.push(`release ${node.name} (${uid ?? "no uid"})`);
        return Promise.resolve();
      },
    },
    ssh: {
      certify: (_key, principals) =>
        Promise.resolve({
          hostCertificate: new TextEncoder().encode(`host certificate for ${principals.join(",")}`),
          caPublicKey: new TextEncoder().encode("ssh-ed25519 CA"),
        }),
    },
    measurementSalt: new Uint8Array(32).fill(0x5a),
    peerLimiter: new PeerRateLimiter({ perPeer: { perSecond: 1000, burst: 1000 }, clock }),
    ticketBudget: new TokenBucket({ rate: { perSecond: 1000, burst: 1000 }, clock }),
    verifierPool: new WorkPool({ concurrency: 4, maxQueued: 16 }),
    metrics: {
      decisions: registry.counter("decisions", "decisions"),
      verificationSeconds: registry.histogram("verification", "verification"),
      keyServiceSeconds: registry.histogram("key_service", "key service"),
      apiServerSeconds: registry.histogram("api_server", "API server"),
    },
    audit: { write: (entry) => audit.push(entry) },
    logger: createLogger({ level: "debug", write: (line) => logs.push(JSON.parse(line)) }),
    clock,
    ...replaced,
  };
  return { deps, writes, audit, logs, clock, registry, exchangeCalls };
}

/** The fake exchange: the cheap checks and the verdict as configured; sealing keeps the plaintext. */
function fakeExchange(options: {
  verification: Verification;
  precheckFails?: ExchangeError["reason"];
  verifyFails?: ExchangeError["reason"];
  sealFails?: boolean;
  calls: { precheck: number; verify: number };
}): AttestedExchange {
  const { verification, precheckFails, verifyFails, sealFails, calls } = options;
  const verified: VerifiedAttestation = {
    verification,
    seal: (plaintext): Promise<Sealed> =>
      sealFails
        ? Promise.reject(exchangeRejection(new ExchangeError("seal-failed", "fake: no usable key")))
        : Promise.resolve(create(SealedSchema, { ciphertext: plaintext })),
  };
  return {
    challenge: () => Promise.resolve({ nonce: new Uint8Array(NONCE_LENGTH), expiresAt: 0 }),
    precheck: ({ attestation }) => {
      calls.precheck++;
      if (precheckFails) return Promise.reject(exchangeRejection(new ExchangeError(precheckFails, "fake")));
      if (!attestation) {
        return Promise.reject(exchangeRejection(new ExchangeError("evidence-missing", "no attestation")));
      }
      return Promise.resolve({
        verify: () => {
          calls.verify++;
          if (verifyFails) {
            const error = new ExchangeError(verifyFails, "fake verdict", {
              keyDigest: verification.keyDigest,
            });
            return Promise.reject(exchangeRejection(error));
          }
          return Promise.resolve(verified);
        },
      });
    },
  };
}

/** A join request as a worker named `nodeName` sends it (the fake signer reads the name from the CSR). */
export function fakeJoinRequest(
  init: Omit<Partial<IssueJoinTicketRequest>, "$typeName" | "$unknown"> & { nodeName?: string } = {},
): IssueJoinTicketRequest {
  const { nodeName = "worker-1", ...fields } = init;
  return create(IssueJoinTicketRequestSchema, {
    diskUuid: DISK_UUID,
    certificateRequest: new TextEncoder().encode(nodeName),
    attestation: {
      nonce: new Uint8Array(NONCE_LENGTH),
      publicKey: new Uint8Array(32),
      evidence: { variant: "qemu-vtpm" },
    },
    ...fields,
  });
}

/**
 * A handler context of a `join.API` call from {@linkcode FAKE_PEER} (or `peer`); `overloaded` flags it
 * as beyond the RPC server's bounds, with that message, as `serveRpc` does.
 */
export function fakeContext(
  options: { peer?: string; signal?: AbortSignal; overloaded?: string } = {},
): HandlerContext {
  const values = createContextValues().set(peerAddressKey, options.peer ?? FAKE_PEER);
  if (options.overloaded !== undefined) values.set(callOverloadedKey, options.overloaded);
  return createHandlerContext({
    service: API,
    method: API.method.issueJoinTicket,
    protocolName: "grpc",
    requestMethod: "POST",
    url: "https://join-service/join.API/IssueJoinTicket",
    requestSignal: options.signal,
    contextValues: values,
  });
}
