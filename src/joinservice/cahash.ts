/**
 * The discovery-token CA certificate hash a joining node pins the API
 * server's CA with (kubeadm's `--discovery-token-ca-cert-hash`).
 *
 * @module
 */
import { SharedLoad } from "../async/shared_load.ts";
import type { Clock } from "../clock.ts";
import { FILE_CHECK_INTERVAL_MS, fileStamp } from "../fs/file_stamp.ts";
import { parseKubeconfig, selectDiscoveryCluster } from "../kubernetes/kubeconfig.ts";
import type { DiscoveryHashSource } from "./dependencies.ts";
import { parseCaCertificate } from "./kubeletca.ts";
import { reject } from "./rejections.ts";

/**
 * `"sha256:"` + lower-case hex SHA-256 of the DER SubjectPublicKeyInfo of
 * the first `CERTIFICATE` in `caPem` (kubeadm's public-key pin). `source`
 * names the input in errors (default "ca.crt"). Throws `KubeletCaError`
 * (kubeletca.ts) when there is no valid certificate.
 */
export async function discoveryTokenCaCertHash(caPem: string, source = "ca.crt"): Promise<string> {
  const certificate = parseCaCertificate(caPem, source);
  const digest = await crypto.subtle.digest("SHA-256", certificate.subjectPublicKeyInfo);
  return `sha256:${new Uint8Array(digest).toHex()}`;
}

/**
 * The join service's discovery pin: the hash of the first CA of the cluster
 * kubeadm picks from `adminConf` (`admin.conf`), computed again when the
 * file changes (looked at once a second at most). Rejects with "misconfigured" naming the file.
 */
export function discoveryHashSource(options: { adminConf: string; clock: Clock }): DiscoveryHashSource {
  const { adminConf } = options;
  const stamp = new SharedLoad(() => fileStamp([adminConf]), {
    maxAgeMs: FILE_CHECK_INTERVAL_MS,
    clock: options.clock,
  });
  const hash = new SharedLoad(async () => {
    try {
      const [first] = selectDiscoveryCluster(parseKubeconfig(await Deno.readTextFile(adminConf)));
      return await discoveryTokenCaCertHash(first, adminConf);
    } catch (error) {
      throw reject("misconfigured", `${adminConf}: ${error instanceof Error ? error.message : error}`);
    }
  });
  return {
    async current({ signal }) {
      return await hash.get({ version: await stamp.get({ signal }), signal });
    },
  };
}
