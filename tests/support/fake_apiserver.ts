/**
 * The local Kubernetes API (`src/localapi/`) as tests use it: a fresh test
 * PKI (CA, loopback server certificate, a client certificate with
 * `clientSubject`), bearer tokens that expire, kubeconfigs, and request
 * recording on. With `pkiDir` it serves kubeadm's PKI as the product does
 * and issues the client certificate from that CA once it appears.
 *
 * @module
 */
import { stringify as stringifyYaml } from "yaml";
import { type Clock, systemClock } from "../../src/clock.ts";
import type { Identity } from "../../src/localapi/bootstrap.ts";
import {
  type AuthorizationRequest,
  type FailureMode,
  type LocalApi,
  type RecordedRequest,
  startLocalApi,
} from "../../src/localapi/server.ts";
import { JOINING_NODES, NODE_VERSIONS, type ResourceType } from "../../src/localapi/resources.ts";
import { createTestCa, issueCert, issueLoopbackServerCert, type TestCa, type TestCert } from "./pki.ts";
import * as x509 from "../../src/x509/x509.ts";

export { JOINING_NODES, NODE_VERSIONS };
export type { AuthorizationRequest, FailureMode, RecordedRequest };

/** A custom resource type the fake serves. */
export type FakeCustomResource = ResourceType;

/** Options for {@linkcode startFakeApiServer}. */
export interface FakeApiServerOptions {
  /** Custom resource types served; default {@linkcode NODE_VERSIONS} and {@linkcode JOINING_NODES}. */
  customResources?: FakeCustomResource[];
  /** Namespaces that exist; default default, kube-system, kube-public. */
  namespaces?: string[];
  /**
   * Require a client certificate from the test CA in the TLS handshake
   * (default true). With false, a bearer token is accepted instead.
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
  /** How often expired bootstrap tokens are deleted; default 10 s. */
  tokenCleanupIntervalMs?: number;
  /** Serve the PKI kubeadm writes to this directory instead of a generated test PKI. */
  pkiDir?: string;
  /** How often the `pkiDir` is looked at until the PKI is there; default 100 ms. */
  pkiPollMs?: number;
  /** Persist objects under this directory. */
  stateDir?: string;
  /** Port to bind; default any. */
  port?: number;
}

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

/** A running local API with test credentials. */
export interface FakeApiServer extends Omit<LocalApi, "clusterPki"> {
  /** CA of the server and of accepted client certificates (with `pkiDir`: throws until serving). */
  readonly ca: TestCa;
  /** `ca` as PEM. */
  readonly caPem: string;
  /** A client certificate from `ca` with the `clientSubject`. */
  readonly clientCertPem: string;
  /** Its key. */
  readonly clientKeyPem: string;
  /** A bearer token for user `token-user` with the configured lifetime. */
  readonly token: string;
  /** A kubeconfig for this server (YAML). */
  kubeconfig(options?: FakeKubeconfigOptions): string;
  /** Issues a bearer token for `user`, valid for `ttlMs` (negative: already expired). */
  issueToken(user: string, ttlMs: number): string;
  /** Issues a client certificate from the server's CA. */
  issueClientCert(subject: string): Promise<TestCert>;
}

/** Starts the local API on 127.0.0.1 with a fresh test PKI (or kubeadm's, with `pkiDir`). */
export async function startFakeApiServer(options: FakeApiServerOptions = {}): Promise<FakeApiServer> {
  const clock = options.clock ?? systemClock;
  const clientSubject = options.clientSubject ?? "CN=kubernetes-admin, O=system:masters";
  const tokens = new Map<string, { user: string; expiresAt: number }>();
  const issueToken = (user: string, ttlMs: number): string => {
    const token = crypto.getRandomValues(new Uint8Array(24)).toHex();
    tokens.set(token, { user, expiresAt: clock.now() + ttlMs });
    return token;
  };
  const token = issueToken("token-user", options.tokenTtlMs ?? 60 * 60 * 1000);
  const authenticateToken = (bearer: string): Identity | undefined => {
    const entry = tokens.get(bearer);
    return entry && entry.expiresAt > clock.now() ? { user: entry.user, groups: [] } : undefined;
  };

  let pki: { ca: TestCa; clientCert: TestCert } | undefined;
  const common = {
    customResources: options.customResources,
    namespaces: options.namespaces,
    authorize: options.authorize,
    clock: options.clock,
    tokenCleanupIntervalMs: options.tokenCleanupIntervalMs,
    stateDir: options.stateDir,
    port: options.port,
    authenticateToken,
    recordRequests: true,
  };
  let api: LocalApi;
  if (options.pkiDir !== undefined) {
    api = await startLocalApi({
      ...common,
      pkiDir: options.pkiDir,
      pkiPollMs: options.pkiPollMs,
      onPki: async (loaded) => {
        // The test PKI issues with @peculiar/x509; the local API reads its CA without it.
        const cert = new x509.X509Certificate(loaded.ca.certPem);
        const publicKey = await cert.publicKey.export();
        const ca: TestCa = {
          cert,
          keys: { privateKey: loaded.ca.privateKey, publicKey },
          certPem: loaded.ca.certPem,
          keyPem: loaded.ca.keyPem,
        };
        const clientCert = await issueCert(ca, { subject: clientSubject, usages: ["clientAuth"] });
        pki = { ca, clientCert };
      },
    });
  } else {
    const ca = await createTestCa("CN=fake-kubernetes-ca");
    const serverCert = await issueLoopbackServerCert(ca, "CN=kube-apiserver");
    pki = { ca, clientCert: await issueCert(ca, { subject: clientSubject, usages: ["clientAuth"] }) };
    api = await startLocalApi({
      ...common,
      tls: { caPem: ca.certPem, serverChainPem: serverCert.certPem, serverKeyPem: serverCert.keyPem },
      requireClientCertificate: options.requireClientCertificate,
    });
  }
  const current = () => {
    if (!pki) throw new Error("the fake API server has no PKI yet: await whenServing()");
    return pki;
  };
  const close = () => api.close();

  return {
    url: api.url,
    port: api.port,
    requests: api.requests,
    whenServing: (waitOptions) => api.whenServing(waitOptions),
    getObject: (path) => api.getObject(path),
    putObject: (path, object) => api.putObject(path, object),
    deleteObject: (path) => api.deleteObject(path),
    flush: () => api.flush(),
    failNext: (count, mode) => api.failNext(count, mode),
    setHang: (hang) => api.setHang(hang),
    setDown: (down) => api.setDown(down),
    close,
    [Symbol.asyncDispose]: close,
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
    token,
    kubeconfig(kubeconfigOptions = {}) {
      const base64 = (text: string) => btoa(text);
      const { ca, clientCert } = current();
      const cert = kubeconfigOptions.clientCert ?? clientCert;
      const user = kubeconfigOptions.auth === "token"
        ? { token: kubeconfigOptions.token ?? token }
        : { "client-certificate-data": base64(cert.certPem), "client-key-data": base64(cert.keyPem) };
      const context: Record<string, unknown> = { cluster: "fake", user: "fake-user" };
      if (kubeconfigOptions.namespace) context.namespace = kubeconfigOptions.namespace;
      return stringifyYaml({
        apiVersion: "v1",
        kind: "Config",
        clusters: [{
          name: "fake",
          cluster: { server: api.url, "certificate-authority-data": base64(ca.certPem) },
        }],
        contexts: [{ name: "fake", context }],
        "current-context": "fake",
        users: [{ name: "fake-user", user }],
      });
    },
    issueToken,
    issueClientCert: (subject) => issueCert(current().ca, { subject, usages: ["clientAuth"] }),
  };
}
