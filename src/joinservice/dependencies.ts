/**
 * What the join service's handler needs, declared by the handler: each
 * interface names the failures it rejects with (a `Rejection` whose reason
 * is in `rejections.ts`) and takes a `signal` wherever a call can wait. The
 * adapters that implement them live beside their concept (`keysource.ts`,
 * `kubeletca.ts`, `components.ts`, `cahash.ts`, `endpoint.ts`,
 * `controlplanefiles.ts`, `bootstraptoken.ts`, `joiningnodes.ts`,
 * `sshca.ts`, `exchange.ts`, `audit.ts`); `main.ts` wires them.
 *
 * @module
 */
import type { Verification } from "../attestation/attestation.ts";
import type { AttestationState } from "../attestation/watcher.ts";
import type { Clock } from "../clock.ts";
import type { AttestedRequest, Sealed } from "../gen/atls/v1/atls_pb.ts";
import type { Logger } from "../log/logger.ts";
import type { Counter, Histogram } from "../metrics/registry.ts";
import type { AuditLog } from "./audit.ts";
import type { KubernetesComponent } from "./components.ts";
import type { ControlPlaneFile } from "./controlplanefiles.ts";

/** Options of every call that can wait. */
export interface SignalOptions {
  /** Stops waiting: the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Purposes of the attested exchange this service verifies. */
export type ExchangePurpose = "join" | "rejoin";

/** The attested exchange (src/atls), as this service uses it. */
export interface AttestedExchange {
  /** A fresh single-use challenge nonce. Rejects with "key-service-unavailable" while the nonce key cannot be had. */
  challenge(options: SignalOptions): Promise<{ nonce: Uint8Array; expiresAt: number }>;
  /**
   * The cheap checks of an attested request: structure, sizes and the
   * nonce (MAC, expiry, single use: it is consumed). Rejects with an
   * exchange reason ("nonce-bad-mac", "evidence-missing", ...) or
   * "key-service-unavailable".
   */
  precheck(
    request: { attestation: AttestedRequest | undefined; purpose: ExchangePurpose } & SignalOptions,
  ): Promise<PrecheckedAttestation>;
}

/** An attested request that passed the cheap checks. */
export interface PrecheckedAttestation {
  /**
   * Validates the evidence with the validator in force, bound to the
   * request's digest and the node's key. Rejects with an exchange or
   * attestation reason ("measurement-mismatch", "untrusted-key", ..., with
   * the attestation key's digest when known) or "verifier-error".
   */
  verify(
    options: { requestDigest: Uint8Array; validator: AttestationState["validator"] } & SignalOptions,
  ): Promise<VerifiedAttestation>;
}

/** A verified request: what was verified, and how to seal the answer to it. */
export interface VerifiedAttestation {
  /** The validator's verdict: warnings, reported measurements, the attestation key. */
  verification: Verification;
  /** Seals a serialized response to the request's attested key. Rejects with "seal-failed". */
  seal(plaintext: Uint8Array<ArrayBuffer>): Promise<Sealed>;
}

/** The attestation config and validator in force (the config watcher). */
export interface AttestationPolicy {
  /** The config, validator, digest and generation in force. */
  current(): AttestationState;
}

/** Keys derived from the master secret. Rejects with "key-service-unavailable". */
export interface KeySource {
  /** The `length`-byte key derived for `id`. */
  getDataKey(id: string, length: number, options: SignalOptions): Promise<Uint8Array>;
}

/** Signs kubelet client certificates with the cluster CA. */
export interface KubeletSigner {
  /**
   * Checks the CSR and signs it; resolves to the certificate and the
   * normalized node name. Rejects with "csr-rejected" when the CSR breaks a
   * rule, "misconfigured" when the CA is unusable.
   */
  sign(csrDer: Uint8Array, options: SignalOptions): Promise<{ certificatePem: string; nodeName: string }>;
}

/** The Kubernetes components to install. */
export interface ComponentsSource {
  /**
   * The components and the name of the ConfigMap listing them. Rejects with
   * "api-server-unavailable", "api-server-refused" or "misconfigured".
   */
  current(options: SignalOptions): Promise<{ configMapName: string; components: KubernetesComponent[] }>;
}

/** The discovery pin of the cluster CA. */
export interface DiscoveryHashSource {
  /** "sha256:<hex>" of the cluster CA's public key. Rejects with "misconfigured". */
  current(options: SignalOptions): Promise<string>;
}

/** Where nodes reach the API server. */
export interface ApiServerEndpointSource {
  /** "host:port" handed to nodes. Rejects with "metadata-unavailable" or "misconfigured". */
  current(options: SignalOptions): Promise<string>;
}

/** The eight CA/key files for control-plane nodes. */
export interface ControlPlaneFilesSource {
  /** Rejects with "misconfigured" when a file is missing or unreadable. */
  load(options: SignalOptions): Promise<ControlPlaneFile[]>;
}

/** Bootstrap tokens in the API server. */
export interface BootstrapTokens {
  /**
   * Creates a token Secret; resolves to the token "<id>.<secret>" and its
   * ID. Rejects with "api-server-unavailable" or "api-server-refused".
   */
  create(options: SignalOptions): Promise<{ token: string; tokenId: string }>;
  /** Deletes a token created by {@linkcode create} (best-effort cleanup). */
  delete(tokenId: string, options: SignalOptions): Promise<void>;
}

/** A joining node as recorded for the node operator. */
export interface JoiningNode {
  /** The node's name (from its accepted CSR). */
  name: string;
  /** The components ConfigMap the node installs from. */
  componentsReference: string;
  /** Whether it joins as a control plane (recorded as the single "control-plane" object). */
  isControlPlane: boolean;
}

/** What {@linkcode JoiningNodes.record} wrote, for {@linkcode JoiningNodes.release}. */
export interface RecordedJoiningNode {
  /** The node recorded. */
  node: JoiningNode;
  /** UID of the object written (a control plane's; a worker's record is applied and not released). */
  uid?: string;
}

/** Records joining nodes for the node operator (JoiningNode resources). */
export interface JoiningNodes {
  /**
   * Records a node. Rejects with "control-plane-busy" while another control
   * plane is joining, "api-server-unavailable" or "api-server-refused".
   */
  record(node: JoiningNode, options: SignalOptions): Promise<RecordedJoiningNode>;
  /**
   * Undoes a record whose ticket was never delivered: a control plane's is
   * deleted, so other control planes need not wait for its deadline, but
   * only the very object this record wrote (an attempt of the same node since
   * wrote its own); gone or replaced already counts as done. A worker's
   * record stays: it is the same for every attempt of the node and expires
   * by itself. Rejects with "api-server-unavailable" or "api-server-refused".
   */
  release(recorded: RecordedJoiningNode, options: SignalOptions): Promise<void>;
}

/** Certifies SSH host keys. */
export interface SshHostCertifier {
  /**
   * An OpenSSH host certificate for `hostPublicKey` valid for `principals`,
   * and the CA's public key. Rejects with "ssh-host-key-rejected" or
   * "key-service-unavailable".
   */
  certify(
    hostPublicKey: Uint8Array,
    principals: string[],
    options: SignalOptions,
  ): Promise<{ hostCertificate: Uint8Array; caPublicKey: Uint8Array }>;
}

/** A rate limit per peer. */
export interface PeerLimiter {
  /** Takes one token of `peer`'s group; false when it is over its rate. */
  take(peer: string): boolean;
}

/** A rate shared by all callers. */
export interface SharedBudget {
  /** Takes one token; false when the budget is spent. */
  take(): boolean;
}

/** A bounded pool of concurrent work. */
export interface BoundedPool {
  /** Runs `task` when a slot is free; rejects with `PoolFullError` when too many wait. */
  run<T>(task: () => Promise<T>, options: SignalOptions): Promise<T>;
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
  /** Nonces, cheap checks, verification and sealing. */
  exchange: AttestedExchange;
  /** The attestation config and validator in force. */
  attestation: AttestationPolicy;
  /** The key service. */
  keys: KeySource;
  /** The cluster CA, for kubelet certificates. */
  kubeletSigner: KubeletSigner;
  /** The Kubernetes components to install. */
  components: ComponentsSource;
  /** The discovery pin of the cluster CA. */
  discoveryHash: DiscoveryHashSource;
  /** The API server endpoint handed to nodes. */
  apiServerEndpoint: ApiServerEndpointSource;
  /** The control-plane CA files. */
  controlPlaneFiles: ControlPlaneFilesSource;
  /** Bootstrap tokens. */
  tokens: BootstrapTokens;
  /** JoiningNode records. */
  joiningNodes: JoiningNodes;
  /** The SSH CA. */
  ssh: SshHostCertifier;
  /** Raw measurement salt handed to nodes. */
  measurementSalt: Uint8Array;
  /** Per-peer rate, taken at admission. */
  peerLimiter: PeerLimiter;
  /** Tickets per second over all peers, taken only once a request is attested. */
  ticketBudget: SharedBudget;
  /** Attestation verifications at once and waiting. */
  verifierPool: BoundedPool;
  /** Decisions and latencies. */
  metrics: JoinServiceMetrics;
  /** Receives one entry per decision. */
  audit: AuditLog;
  /** Receives operational log lines (never secrets). */
  logger: Logger;
  /** Time source. */
  clock: Clock;
}
