/**
 * What each simulated command does to the node root, phase by phase, in
 * kubeadm's phase order. Phases that need a running control plane
 * (wait-control-plane, upload-config, upload-certs, mark-control-plane,
 * bootstrap-token, kubelet-finalize, addon) are not simulated: they are
 * listed in {@linkcode CommandOutcome.notSimulated}.
 *
 * @module
 */
import type { Invocation } from "./args.ts";
import { checkSharedCertificates, readClusterAuthority, writeControlPlaneCertificates } from "./certs.ts";
import { type InitSettings, type JoinSettings } from "./config.ts";
import { joinHostPort } from "../net/endpoint.ts";
import { discoverClusterCa } from "./discovery.ts";
import { KubeadmSimError } from "./errors.ts";
import { kubeconfigYaml } from "./kubeconfig_file.ts";
import {
  clientKubeconfig,
  type ClusterAccess,
  KUBELET_CLIENT_CURRENT,
  KUBERNETES_DIR,
  writeControlPlaneKubeconfigs,
  writeControlPlaneManifests,
  writeKubeletFiles,
} from "./node_files.ts";
import type { SimRoot } from "./root.ts";

/** What a command did. */
export interface CommandOutcome {
  /** Phases run, in order. */
  phases: string[];
  /** Phases kubeadm would run that the simulator does not. */
  notSimulated: string[];
  /** What goes to stdout. */
  stdout: string;
}

/** Options of every command. */
export interface CommandOptions {
  /** Cancels the command (discovery waits). */
  signal?: AbortSignal;
}

const INIT_PHASES = [
  "preflight",
  "certs",
  "kubeconfig",
  "etcd",
  "control-plane",
  "kubelet-start",
  "wait-control-plane",
  "upload-config",
  "upload-certs",
  "mark-control-plane",
  "bootstrap-token",
  "kubelet-finalize",
  "addon",
  "show-join-command",
];
const JOIN_PHASES = [
  "preflight",
  "control-plane-prepare",
  "kubelet-start",
  "control-plane-join",
  "wait-control-plane",
];
/** The phases that only write node files: init's first six, and join's but waiting. */
const SIMULATED = new Set([...INIT_PHASES.slice(0, 6), ...JOIN_PHASES.slice(0, 4)]);

/** Phases to skip that name no phase of the command are refused (real kubeadm ignores them silently). */
function skipFilter(known: string[], skipPhases: string[]): (phase: string) => boolean {
  for (const name of skipPhases) {
    if (!known.includes(name.split("/")[0])) {
      throw new KubeadmSimError(
        "usage",
        `kubeadm-sim: --skip-phases names an unknown phase "${name}" (phases: ${known.join(", ")})`,
      );
    }
  }
  return (phase) => skipPhases.includes(phase);
}

/** `https://host:port` of the cluster: controlPlaneEndpoint (port defaulting to the bind port), else the node's address. */
function serverUrl(settings: InitSettings): string {
  const endpoint = settings.cluster.controlPlaneEndpoint;
  if (endpoint) return `https://${joinHostPort(endpoint.host, endpoint.port ?? settings.bindPort)}`;
  return `https://${joinHostPort(settings.advertiseAddress, settings.bindPort)}`;
}

function firstServiceIp(subnet: string): string {
  const [address] = subnet.split("/");
  const parts = address.split(".").map(Number);
  const value = ((parts[0] << 24) >>> 0) + (parts[1] << 16) + (parts[2] << 8) + parts[3] + 1;
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join(".");
}

/** Runs `run` for each phase not skipped, in order; phases not simulated are only listed. */
async function runPhases(
  outcome: CommandOutcome,
  phases: string[],
  skip: (phase: string) => boolean,
  run: (phase: string) => Promise<void>,
): Promise<void> {
  for (const phase of phases) {
    if (skip(phase)) continue;
    if (!SIMULATED.has(phase)) {
      outcome.notSimulated.push(phase);
      continue;
    }
    outcome.phases.push(phase);
    try {
      await run(phase);
    } catch (error) {
      throw KubeadmSimError.inPhase(phase, error);
    }
  }
}

/** kubeadm's preflight FileAvailable checks, honouring ignorePreflightErrors. */
async function preflight(root: SimRoot, files: string[], ignore: string[]): Promise<void> {
  const ignored = new Set(ignore.map((name) => name.toLowerCase()));
  const errors: string[] = [];
  for (const file of files) {
    const check = `FileAvailable-${file.replaceAll("/", "-")}`;
    if (ignored.has("all") || ignored.has(check.toLowerCase())) continue;
    if (await root.exists(file)) errors.push(`\t[ERROR ${check}]: ${file} already exists`);
  }
  if (errors.length > 0) {
    throw new KubeadmSimError(
      "preflight",
      `[preflight] Some fatal errors occurred:\n${errors.join("\n")}\n` +
        "[preflight] If you know what you are doing, you can make a check non-fatal with `--ignore-preflight-errors=...`",
    );
  }
}

const CONTROL_PLANE_MANIFESTS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"].map((
  name,
) => `${KUBERNETES_DIR}/manifests/${name}.yaml`);

/** `kubeadm init` or one of its phases (`only`). */
export async function runInit(
  root: SimRoot,
  invocation: Invocation,
  settings: InitSettings,
  only?: "preflight" | "certs",
): Promise<CommandOutcome> {
  const skipped = skipFilter(INIT_PHASES, [...settings.skipPhases, ...invocation.skipPhases]);
  const outcome: CommandOutcome = { phases: [], notSimulated: [], stdout: "" };
  const cluster = settings.cluster;
  await runPhases(outcome, only ? [only] : INIT_PHASES, (phase) => !only && skipped(phase), async (phase) => {
    switch (phase) {
      case "preflight":
        await preflight(root, [
          ...CONTROL_PLANE_MANIFESTS,
          `${KUBERNETES_DIR}/admin.conf`,
          `${KUBERNETES_DIR}/kubelet.conf`,
        ], settings.node.ignorePreflightErrors);
        break;
      case "certs": {
        const report = await writeControlPlaneCertificates(root, {
          certificatesDir: cluster.certificatesDir,
          nodeName: settings.node.name,
          advertiseAddress: settings.advertiseAddress,
          controlPlaneHost: cluster.controlPlaneEndpoint?.host,
          certSANs: cluster.certSANs,
          serviceIp: firstServiceIp(cluster.serviceSubnet),
          dnsDomain: cluster.dnsDomain,
        }, { createAuthorities: true });
        for (const file of report.created) outcome.stdout += `[certs] Generated ${file}\n`;
        for (const file of report.reused) outcome.stdout += `[certs] Using the existing ${file}\n`;
        break;
      }
      case "kubeconfig": {
        const access: ClusterAccess = {
          clusterName: cluster.clusterName,
          server: serverUrl(settings),
          authority: await readClusterAuthority(root, cluster.certificatesDir),
        };
        await writeControlPlaneKubeconfigs(root, access);
        await root.write(
          `${KUBERNETES_DIR}/kubelet.conf`,
          await clientKubeconfig(access, `system:node:${settings.node.name}`, ["system:nodes"]),
          { mode: 0o600 },
        );
        outcome.stdout +=
          `[kubeconfig] Wrote admin.conf, kubelet.conf, controller-manager.conf, scheduler.conf\n`;
        break;
      }
      case "etcd":
      case "control-plane":
        if (phase === "control-plane" || !skipped("control-plane")) {
          await writeControlPlaneManifests(root, {
            kubernetesVersion: cluster.kubernetesVersion,
            imageRepository: cluster.imageRepository,
            advertiseAddress: settings.advertiseAddress,
            bindPort: settings.bindPort,
            extraArgs: {
              apiServer: cluster.apiServerExtraArgs,
              controllerManager: cluster.controllerManagerExtraArgs,
              scheduler: cluster.schedulerExtraArgs,
            },
          });
        }
        break;
      case "kubelet-start":
        await writeKubeletFiles(root, settings.kubelet, {
          criSocket: settings.node.criSocket,
          extraArgs: settings.node.kubeletExtraArgs,
        });
        break;
    }
  });
  if (!only) outcome.stdout += "Your Kubernetes control-plane has initialized successfully! (kubeadm-sim)\n";
  return outcome;
}

/** `kubeadm kubeconfig user`: a kubeconfig for `--client-name` in `--org` groups, on stdout. */
export async function runKubeconfigUser(
  root: SimRoot,
  invocation: Invocation,
  settings: InitSettings,
): Promise<CommandOutcome> {
  const authority = await readClusterAuthority(root, settings.cluster.certificatesDir);
  const access = { clusterName: settings.cluster.clusterName, server: serverUrl(settings), authority };
  const stdout = await clientKubeconfig(access, invocation.clientName!, invocation.orgs);
  return { phases: [], notSimulated: [], stdout };
}

/** `kubeadm join`: discovery, then the node's files; a control-plane join completes the PKI from the shared CAs. */
export async function runJoin(
  root: SimRoot,
  invocation: Invocation,
  settings: JoinSettings,
  options: CommandOptions = {},
): Promise<CommandOutcome> {
  const skipped = skipFilter(
    [...JOIN_PHASES, "control-plane-prepare/download-certs"],
    [...settings.skipPhases, ...invocation.skipPhases],
  );
  const outcome: CommandOutcome = { phases: [], notSimulated: [], stdout: "" };
  const discovery = settings.discovery;
  const server = `https://${
    joinHostPort(discovery.apiServerEndpoint.host, discovery.apiServerEndpoint.port)
  }`;
  const pkiDir = settings.caCertPath.replace(/\/[^/]*$/, "");
  let caPem = "";
  await runPhases(outcome, JOIN_PHASES, skipped, async (phase) => {
    switch (phase) {
      case "preflight": {
        const files = [`${KUBERNETES_DIR}/kubelet.conf`, `${KUBERNETES_DIR}/bootstrap-kubelet.conf`];
        if (!settings.controlPlane) files.push(settings.caCertPath);
        await preflight(root, files, settings.node.ignorePreflightErrors);
        if (settings.controlPlane) {
          // kubeadm checks the shared certificates before it joins a control-plane node.
          await checkSharedCertificates(root, pkiDir);
        }
        // Discovery runs as part of preflight in kubeadm (the cluster configuration is fetched there).
        caPem = await discoverClusterCa({
          host: discovery.apiServerEndpoint.host,
          port: discovery.apiServerEndpoint.port,
          token: discovery.token,
          caCertHashes: discovery.caCertHashes,
          unsafeSkipCaVerification: discovery.unsafeSkipCaVerification,
          timeoutMs: discovery.timeoutMs,
          signal: options.signal,
        });
        outcome.stdout +=
          `[discovery] Cluster info signature and contents are valid, will use API Server "${server}"\n`;
        break;
      }
      case "control-plane-prepare": {
        const controlPlane = settings.controlPlane;
        if (!controlPlane) break;
        const caCert = await root.readIfExists(`${pkiDir}/ca.crt`);
        if (caCert !== undefined && caCert.trim() !== caPem.trim()) {
          throw new KubeadmSimError(
            "missing-file",
            `${pkiDir}/ca.crt is not the CA the cluster-info ConfigMap names`,
          );
        }
        await writeControlPlaneCertificates(root, {
          certificatesDir: pkiDir,
          nodeName: settings.node.name,
          advertiseAddress: controlPlane.advertiseAddress,
          controlPlaneHost: discovery.apiServerEndpoint.host,
          certSANs: [],
          serviceIp: "10.96.0.1",
          dnsDomain: "cluster.local",
        }, { createAuthorities: false });
        const authority = await readClusterAuthority(root, pkiDir);
        await writeControlPlaneKubeconfigs(root, { clusterName: "kubernetes", server, authority });
        await writeControlPlaneManifests(root, {
          kubernetesVersion: "v0.0.0-unknown", // kubeadm reads it from the cluster's kubeadm-config; not simulated
          imageRepository: "registry.k8s.io",
          advertiseAddress: controlPlane.advertiseAddress,
          bindPort: controlPlane.bindPort,
          extraArgs: { apiServer: {}, controllerManager: {}, scheduler: {} },
        });
        break;
      }
      case "kubelet-start":
        if (!settings.controlPlane) await root.write(settings.caCertPath, caPem, { mode: 0o644 });
        // After TLS bootstrap the kubelet's kubeconfig points at its rotated client certificate.
        await root.write(
          `${KUBERNETES_DIR}/kubelet.conf`,
          kubeconfigYaml({
            clusterName: "default-cluster",
            server,
            caPem,
            userName: "default-auth",
            client: { certFile: KUBELET_CLIENT_CURRENT, keyFile: KUBELET_CLIENT_CURRENT },
          }),
          { mode: 0o600 },
        );
        await writeKubeletFiles(root, settings.kubelet, {
          criSocket: settings.node.criSocket,
          extraArgs: settings.node.kubeletExtraArgs,
        });
        break;
      case "control-plane-join":
        break;
    }
  });
  outcome.stdout += "This node has joined the cluster (kubeadm-sim)\n";
  return outcome;
}
