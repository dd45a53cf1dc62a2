/**
 * kubeadm's control-plane PKI under `certificatesDir`
 * (`/etc/kubernetes/pki`): three CAs (`ca`, `front-proxy-ca`, `etcd/ca`),
 * the service-account key pair and the leaf certificates of the API server,
 * etcd and their clients, as `kubeadm init phase certs all` writes them and
 * a control-plane `kubeadm join` completes them from the shared CAs.
 *
 * As kubeadm, existing files are used as they are; a missing CA is created
 * on init and refused on a control-plane join (the CAs must be shared).
 *
 * @module
 */
import { KubeadmSimError } from "./errors.ts";
import {
  type Authority,
  type CertificateFiles,
  createAuthority,
  createServiceAccountKey,
  issueLeaf,
  type LeafProfile,
  loadAuthority,
} from "./pki.ts";
import type { SimRoot } from "./root.ts";

/** The CA and key files a control-plane node shares with the others (the join ticket's files). */
export const SHARED_FILES: readonly string[] = [
  "ca.crt",
  "ca.key",
  "sa.key",
  "sa.pub",
  "front-proxy-ca.crt",
  "front-proxy-ca.key",
  "etcd/ca.crt",
  "etcd/ca.key",
];

/** The node facts certificates are issued for. */
export interface CertificateSubjects {
  /** Node path of the PKI directory. */
  certificatesDir: string;
  /** Node name (etcd certificates, API server SAN). */
  nodeName: string;
  /** The node's API server address. */
  advertiseAddress: string;
  /** controlPlaneEndpoint's host, if any. */
  controlPlaneHost?: string;
  /** `apiServer.certSANs`. */
  certSANs: string[];
  /** The service network's first address (the `kubernetes` Service). */
  serviceIp: string;
  /** `networking.dnsDomain`. */
  dnsDomain: string;
}

/** What {@linkcode writeControlPlaneCertificates} did. */
export interface CertificateReport {
  /** Files (relative to the PKI directory) it created. */
  created: string[];
  /** Files that existed and were used as they are. */
  reused: string[];
}

/**
 * Writes every missing file of the control-plane PKI. With `createAuthorities`
 * false (control-plane join) the shared files must all exist, else a
 * "missing-file" error names the missing ones.
 */
export async function writeControlPlaneCertificates(
  root: SimRoot,
  subjects: CertificateSubjects,
  options: { createAuthorities: boolean },
): Promise<CertificateReport> {
  const dir = subjects.certificatesDir;
  const report: CertificateReport = { created: [], reused: [] };
  if (!options.createAuthorities) await checkSharedCertificates(root, dir);
  const authority = async (name: string, commonName: string): Promise<Authority> => {
    const certPem = await root.readIfExists(`${dir}/${name}.crt`);
    const keyText = await root.readIfExists(`${dir}/${name}.key`);
    if (certPem !== undefined && keyText !== undefined) {
      report.reused.push(`${name}.crt`, `${name}.key`);
      try {
        return await loadAuthority(certPem, keyText, `${dir}/${name}`);
      } catch (error) {
        throw new KubeadmSimError(
          "missing-file",
          `failure loading ${name} certificate authority: ${(error as Error).message}`,
        );
      }
    }
    const created = await createAuthority(commonName);
    await writePair(root, dir, name, created.files);
    report.created.push(`${name}.crt`, `${name}.key`);
    return created.authority;
  };
  const leaf = async (ca: Authority, name: string, profile: LeafProfile) => {
    if (await root.exists(`${dir}/${name}.crt`) && await root.exists(`${dir}/${name}.key`)) {
      report.reused.push(`${name}.crt`, `${name}.key`);
      return;
    }
    await writePair(root, dir, name, await issueLeaf(ca, profile));
    report.created.push(`${name}.crt`, `${name}.key`);
  };

  const ca = await authority("ca", "kubernetes");
  const apiServerDns = [
    subjects.nodeName,
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    `kubernetes.default.svc.${subjects.dnsDomain}`,
  ];
  const apiServerIps = [subjects.serviceIp, subjects.advertiseAddress];
  for (const name of [subjects.controlPlaneHost, ...subjects.certSANs]) {
    if (name === undefined || name === "") continue;
    if (/^[\d.]+$/.test(name) || name.includes(":")) apiServerIps.push(name);
    else apiServerDns.push(name);
  }
  await leaf(ca, "apiserver", {
    commonName: "kube-apiserver",
    dnsNames: unique(apiServerDns),
    ips: unique(apiServerIps),
    usages: ["serverAuth"],
  });
  await leaf(ca, "apiserver-kubelet-client", {
    commonName: "kube-apiserver-kubelet-client",
    organizations: ["system:masters"],
    usages: ["clientAuth"],
  });
  const frontProxy = await authority("front-proxy-ca", "front-proxy-ca");
  await leaf(frontProxy, "front-proxy-client", { commonName: "front-proxy-client", usages: ["clientAuth"] });
  const etcd = await authority("etcd/ca", "etcd-ca");
  const etcdNames = {
    dnsNames: [subjects.nodeName, "localhost"],
    ips: unique([subjects.advertiseAddress, "127.0.0.1", "::1"]),
  };
  await leaf(etcd, "etcd/server", {
    commonName: subjects.nodeName,
    ...etcdNames,
    usages: ["serverAuth", "clientAuth"],
  });
  await leaf(etcd, "etcd/peer", {
    commonName: subjects.nodeName,
    ...etcdNames,
    usages: ["serverAuth", "clientAuth"],
  });
  await leaf(etcd, "etcd/healthcheck-client", {
    commonName: "kube-etcd-healthcheck-client",
    usages: ["clientAuth"],
  });
  await leaf(etcd, "apiserver-etcd-client", {
    commonName: "kube-apiserver-etcd-client",
    usages: ["clientAuth"],
  });
  if (await root.exists(`${dir}/sa.key`) && await root.exists(`${dir}/sa.pub`)) {
    report.reused.push("sa.key", "sa.pub");
  } else {
    const sa = await createServiceAccountKey();
    await root.write(`${dir}/sa.key`, sa.keyPem, { mode: 0o600 });
    await root.write(`${dir}/sa.pub`, sa.publicPem, { mode: 0o644 });
    report.created.push("sa.key", "sa.pub");
  }
  return report;
}

/** Refuses (a "missing-file" error naming them) when any of {@linkcode SHARED_FILES} is missing from `pkiDir`. */
export async function checkSharedCertificates(root: SimRoot, pkiDir: string): Promise<void> {
  const missing: string[] = [];
  for (const name of SHARED_FILES) {
    if (!(await root.exists(`${pkiDir}/${name}`))) missing.push(`${pkiDir}/${name}`);
  }
  if (missing.length > 0) {
    throw new KubeadmSimError(
      "missing-file",
      "One or more conditions for hosting a new control plane instance is not satisfied. " +
        `[failure loading the shared certificates: missing ${missing.join(", ")}] ` +
        "Please ensure that: * The certificates that must be shared among control plane instances are provided.",
    );
  }
}

/** The cluster CA of `certificatesDir` (`ca.crt`, `ca.key`), as kubeadm's kubeconfig phase loads it. */
export async function readClusterAuthority(root: SimRoot, certificatesDir: string): Promise<Authority> {
  const certFile = `${certificatesDir}/ca.crt`;
  const keyFile = `${certificatesDir}/ca.key`;
  const certPem = await root.readIfExists(certFile);
  const keyText = await root.readIfExists(keyFile);
  if (certPem === undefined || keyText === undefined) {
    const missing = certPem === undefined ? certFile : keyFile;
    throw new KubeadmSimError(
      "missing-file",
      `couldn't create a kubeconfig; the CA files couldn't be loaded: failure loading ca certificate authority: ` +
        `couldn't load the file ${missing}: open ${missing}: no such file or directory`,
    );
  }
  try {
    return await loadAuthority(certPem, keyText, `${certificatesDir}/ca`);
  } catch (error) {
    throw new KubeadmSimError(
      "missing-file",
      `failure loading ca certificate authority: ${(error as Error).message}`,
    );
  }
}

async function writePair(root: SimRoot, dir: string, name: string, files: CertificateFiles): Promise<void> {
  await root.write(`${dir}/${name}.key`, files.keyPem, { mode: 0o600 });
  await root.write(`${dir}/${name}.crt`, files.certPem, { mode: 0o644 });
}

function unique(values: string[]): string[] {
  return [...new Set(values)];
}
