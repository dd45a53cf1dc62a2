/**
 * The permission matrix of the built artifacts: what each may and may not
 * read, write, connect to, run and see of the environment, one named row
 * each.
 *
 * Most rows run a probe (tests/build/permission_probe.ts) through the
 * artifact's own built launcher: the launcher is copied unchanged into a
 * temporary directory with the probe as the bundle beside it, and run as
 * its `#!/bin/sh` line runs it, so the probe runs under exactly the flags
 * the artifact runs under (and the launchers are first shown to be what
 * the build makes from deno.json's permission sets). A row is "not
 * permitted" only when Deno's permission check refused (`NotCapable`); a
 * missing file that was permitted to be looked at counts as permitted. The
 * trust rows fetch from a TLS server whose CA the environment trusts (the
 * services must not). The last rows drive the real bootstrapper bundle into
 * running programs: it runs its tool, and cannot run `/bin/sh` or `curl`.
 *
 * The rows where a service's own code meets its permissions (the key
 * service's secrets and listen address, the join service's inputs and
 * /etc/shadow) are in build_test.ts, which sets up /var/config.
 */
import assert from "node:assert/strict";
import { artifactFlags, COMPONENTS, launcherScript } from "../../scripts/build.ts";
import { runToExit, startProcess } from "../../src/os/service_process.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";
import { ARTIFACTS, buildArtifacts, DIST, PINNED_DENO } from "./artifacts.ts";
import { withTempDir } from "../support/temp_dir.ts";
import { createTestCa, issueLoopbackServerCert } from "../support/pki.ts";

/** Placeholders in a row's probe: the ports of the two listeners the test opens. */
const LOOPBACK_PORT = "$LOOPBACK_PORT";
const OTHER_LOOPBACK_PORT = "$OTHER_LOOPBACK_PORT";
/** A loopback address outside the key service's net list (Linux routes all of 127.0.0.0/8 to lo). */
const OTHER_LOOPBACK = "127.0.0.2";

/** One row: an artifact tries something through its launcher, and is permitted or not. */
interface ProbeRow {
  artifact: string;
  name: string;
  /** The probe's arguments (see permission_probe.ts). */
  probe: string[];
  permitted: boolean;
}

/** The matrix, by artifact. A file a permitted "write" row creates is removed again by the probe. */
const PROBE_ROWS: ProbeRow[] = [
  {
    artifact: "key-service",
    name: "reads its secrets in /var/config",
    probe: ["read", "/var/config"],
    permitted: true,
  },
  {
    artifact: "key-service",
    name: "cannot read /etc/shadow",
    probe: ["read", "/etc/shadow"],
    permitted: false,
  },
  {
    artifact: "key-service",
    name: "cannot write, not even /var/config",
    probe: ["write", "/var/config/permission-probe"],
    permitted: false,
  },
  {
    artifact: "key-service",
    name: "cannot write /tmp",
    probe: ["write", "/tmp/permission-probe"],
    permitted: false,
  },
  {
    artifact: "key-service",
    name: `opens no connection to another address (a listener on ${OTHER_LOOPBACK})`,
    probe: ["connect", OTHER_LOOPBACK, OTHER_LOOPBACK_PORT],
    permitted: false,
  },
  {
    artifact: "key-service",
    name: "opens no connection out of the machine (192.0.2.1:443)",
    probe: ["connect", "192.0.2.1", "443"],
    permitted: false,
  },
  {
    // Deno's net permission grants listening and connecting alike: the key service's listen addresses
    // (0.0.0.0, 127.0.0.1, localhost, [::], [::1]) let it connect to this host's loopback too.
    artifact: "key-service",
    name: "may connect to 127.0.0.1, one of its listen addresses",
    probe: ["connect", "127.0.0.1", LOOPBACK_PORT],
    permitted: true,
  },
  {
    artifact: "key-service",
    name: "cannot run /bin/sh",
    probe: ["run", "/bin/sh", "-c", "true"],
    permitted: false,
  },
  {
    artifact: "key-service",
    name: "cannot read the environment (HOME)",
    probe: ["env", "HOME"],
    permitted: false,
  },

  {
    artifact: "join-service",
    name: "reads the node's /etc/kubernetes",
    probe: ["read", "/etc/kubernetes"],
    permitted: true,
  },
  {
    artifact: "join-service",
    name: "cannot read /etc/shadow",
    probe: ["read", "/etc/shadow"],
    permitted: false,
  },
  {
    artifact: "join-service",
    name: "cannot write /etc/kubernetes (it only reads the PKI)",
    probe: ["write", "/etc/kubernetes/permission-probe"],
    permitted: false,
  },
  {
    artifact: "join-service",
    name: "cannot run kubeadm",
    probe: ["run", "kubeadm", "version"],
    permitted: false,
  },
  {
    artifact: "join-service",
    name: "cannot run /bin/sh",
    probe: ["run", "/bin/sh", "-c", "true"],
    permitted: false,
  },
  {
    // net: true, as the API server, key service and metadata API are named by flags.
    artifact: "join-service",
    name: `may connect to any address (a listener on ${OTHER_LOOPBACK})`,
    probe: ["connect", OTHER_LOOPBACK, OTHER_LOOPBACK_PORT],
    permitted: true,
  },
  {
    artifact: "join-service",
    name: "reads KUBERNETES_SERVICE_HOST",
    probe: ["env", "KUBERNETES_SERVICE_HOST"],
    permitted: true,
  },
  { artifact: "join-service", name: "cannot read HOME", probe: ["env", "HOME"], permitted: false },

  {
    artifact: "bootstrapper",
    name: "runs its tools (cryptsetup)",
    probe: ["run", "cryptsetup", "--version"],
    permitted: true,
  },
  {
    artifact: "bootstrapper",
    name: "cannot run /bin/sh",
    probe: ["run", "/bin/sh", "-c", "true"],
    permitted: false,
  },
  {
    artifact: "bootstrapper",
    name: "cannot run curl",
    probe: ["run", "curl", "--version"],
    permitted: false,
  },
  {
    artifact: "bootstrapper",
    name: "cannot run a kubeadm from PATH (only /run/state/bin/kubeadm)",
    probe: ["run", "kubeadm", "version"],
    permitted: false,
  },
  {
    artifact: "bootstrapper",
    name: "cannot read /etc/shadow",
    probe: ["read", "/etc/shadow"],
    permitted: false,
  },
  {
    artifact: "bootstrapper",
    name: "writes /tmp (kubeadm's configuration files)",
    probe: ["write", `/tmp/permission-probe-${crypto.randomUUID()}`],
    permitted: true,
  },
  {
    artifact: "bootstrapper",
    name: "cannot write /etc",
    probe: ["write", "/etc/permission-probe"],
    permitted: false,
  },
  {
    artifact: "bootstrapper",
    name: "reads CONSTEL_ATTESTATION_VARIANT",
    probe: ["env", "CONSTEL_ATTESTATION_VARIANT"],
    permitted: true,
  },
  { artifact: "bootstrapper", name: "cannot read HOME", probe: ["env", "HOME"], permitted: false },

  {
    artifact: "local-api",
    name: "cannot read /etc/shadow",
    probe: ["read", "/etc/shadow"],
    permitted: false,
  },
  {
    artifact: "local-api",
    name: "cannot run /bin/sh",
    probe: ["run", "/bin/sh", "-c", "true"],
    permitted: false,
  },

  {
    artifact: "cli",
    name: "cannot read /proc/self/environ",
    probe: ["read", "/proc/self/environ"],
    permitted: false,
  },
  {
    // The operator's CLI reads the files it is given (master secret, configs) wherever they are.
    artifact: "cli",
    name: "may read files outside /proc, /sys and /dev (/etc/shadow)",
    probe: ["read", "/etc/shadow"],
    permitted: true,
  },
  { artifact: "cli", name: "cannot run /bin/sh", probe: ["run", "/bin/sh", "-c", "true"], permitted: false },

  {
    // Its page lies beside it wherever dist/ is, and the local cluster's state where the operator says.
    artifact: "console",
    name: "may read files outside /proc, /sys and /dev (a local cluster's state in /tmp)",
    probe: ["read", "/tmp"],
    permitted: true,
  },
  {
    artifact: "console",
    name: "cannot read /proc/self/environ",
    probe: ["read", "/proc/self/environ"],
    permitted: false,
  },
  {
    artifact: "console",
    name: "cannot write, not even /tmp",
    probe: ["write", `/tmp/permission-probe-${crypto.randomUUID()}`],
    permitted: false,
  },
  {
    artifact: "console",
    name: "cannot run esbuild (its page is built beforehand)",
    probe: ["run", `${REPO_ROOT}node_modules/.bin/esbuild`, "--version"],
    permitted: false,
  },
  {
    artifact: "console",
    name: "cannot run /bin/sh",
    probe: ["run", "/bin/sh", "-c", "true"],
    permitted: false,
  },
  {
    artifact: "console",
    name: "may connect to 127.0.0.1, its listen address",
    probe: ["connect", "127.0.0.1", LOOPBACK_PORT],
    permitted: true,
  },
  {
    artifact: "console",
    name: `opens no connection to another address (a listener on ${OTHER_LOOPBACK})`,
    probe: ["connect", OTHER_LOOPBACK, OTHER_LOOPBACK_PORT],
    permitted: false,
  },
  { artifact: "console", name: "cannot read HOME", probe: ["env", "HOME"], permitted: false },
];

/**
 * Whether an artifact trusts a TLS server whose CA the machine's environment trusts (the system store,
 * `DENO_CERT`) but the artifact is not given: the services trust only the CAs they are given (the API
 * server's; src/os/service_runtime.ts), the bootstrapper the usual roots besides (its component downloads).
 */
const TRUST_ROWS: { artifact: string; trusted: boolean }[] = [
  { artifact: "join-service", trusted: false },
  { artifact: "key-service", trusted: false },
  { artifact: "bootstrapper", trusted: true },
];

/** A row where the real bootstrapper, told to use `cryptsetup` as its cryptsetup, logs `logLine`. */
interface BootstrapperRow {
  name: string;
  cryptsetup: string;
  logLine: RegExp;
}

const BOOTSTRAPPER_ROWS: BootstrapperRow[] = [
  {
    name: "the bootstrapper runs its cryptsetup (which finds no LUKS header on a blank disk)",
    cryptsetup: "cryptsetup",
    logLine: /"reason":"not-luks".*not a valid LUKS device/,
  },
  {
    name: "the bootstrapper cannot run /bin/sh, given as its cryptsetup",
    cryptsetup: "/bin/sh",
    logLine: /not allowed to run \/bin\/sh/,
  },
  {
    name: "the bootstrapper cannot run curl, given as its cryptsetup",
    cryptsetup: "curl",
    logLine: /not allowed to run curl/,
  },
];

/** A TCP listener on `hostname` that accepts and closes connections until disposed. */
function listen(hostname: string): { port: number } & Disposable {
  const listener = Deno.listen({ hostname, port: 0 });
  (async () => {
    for await (const connection of listener) connection.close();
  })().catch(() => {});
  return { port: (listener.addr as Deno.NetAddr).port, [Symbol.dispose]: () => listener.close() };
}

Deno.test("permission matrix: each built artifact does only what its permission set allows", async (t) => {
  await buildArtifacts();
  const config = JSON.parse(await Deno.readTextFile(`${REPO_ROOT}deno.json`));
  const denoVersion = JSON.parse(await Deno.readTextFile(`${REPO_ROOT}package.json`)).devDependencies.deno;

  await t.step(
    "every launcher passes exactly its deno.json permission set's flags (and its runtime flags)",
    async () => {
      for (const component of COMPONENTS) {
        assert.equal(
          await Deno.readTextFile(`${DIST}${component.name}`),
          launcherScript(component, artifactFlags(config, component), denoVersion),
          component.name,
        );
      }
    },
  );

  using loopback = listen("127.0.0.1");
  using otherLoopback = listen(OTHER_LOOPBACK);
  // The listener on 127.0.0.2 is reachable: a refusal below is the permission's, not the network's.
  (await Deno.connect({ hostname: OTHER_LOOPBACK, port: otherLoopback.port })).close();

  // A server whose CA the environment below makes trusted every way Deno knows, and a CA the probe is given.
  const environmentCa = await createTestCa("CN=environment-ca");
  const givenCa = await createTestCa("CN=given-ca");
  const leaf = await issueLoopbackServerCert(environmentCa);
  await using tlsServer = Deno.serve(
    { hostname: "127.0.0.1", port: 0, cert: leaf.certPem, key: leaf.keyPem, onListen: () => {} },
    () => new Response("trusted"),
  );

  await withTempDir("permission-matrix-", async (dir) => {
    await Deno.writeTextFile(`${dir}/environment-ca.pem`, environmentCa.certPem);
    // A kubeadm and a curl on PATH, so "cannot run" them is the permission's refusal, not a missing program.
    await Deno.mkdir(`${dir}/bin`);
    for (const program of ["kubeadm", "curl"]) {
      await Deno.copyFile("/bin/true", `${dir}/bin/${program}`);
      await Deno.chmod(`${dir}/bin/${program}`, 0o755);
    }
    const env = { DENO: PINNED_DENO, PATH: `${dir}/bin:${Deno.env.get("PATH")}` };
    const probeDir = `${dir}/probe`;
    await Deno.mkdir(probeDir);
    for (const artifact of ARTIFACTS) {
      // The artifact's launcher, unchanged, runs the probe as its bundle.
      await Deno.copyFile(`${DIST}${artifact}`, `${probeDir}/launcher`);
      await Deno.writeTextFile(
        `${probeDir}/${artifact}.js`,
        `import ${JSON.stringify(new URL("permission_probe.ts", import.meta.url).href)};\n`,
      );
      for (const row of PROBE_ROWS.filter((r) => r.artifact === artifact)) {
        await t.step(`${artifact}: ${row.name}`, async () => {
          const args = row.probe.map((arg) =>
            arg === LOOPBACK_PORT
              ? String(loopback.port)
              : arg === OTHER_LOOPBACK_PORT
              ? String(otherLoopback.port)
              : arg
          );
          const result = await runToExit("sh", [`${probeDir}/launcher`, ...args], { env, cwd: "/" });
          assert.equal(result.code, 0, result.stderrLines.join("\n"));
          const outcome = JSON.parse(result.stdoutLines.at(-1)!);
          assert.equal(outcome.permitted, row.permitted, JSON.stringify(outcome));
          if (!row.permitted) assert.equal(outcome.outcome, "NotCapable");
        });
      }
      for (const row of TRUST_ROWS.filter((r) => r.artifact === artifact)) {
        const what = row.trusted ? "trusts" : "does not trust";
        await t.step(`${artifact}: ${what} a CA of the machine's store and DENO_CERT`, async () => {
          const result = await runToExit(
            "sh",
            [`${probeDir}/launcher`, "tls", String(tlsServer.addr.port), btoa(givenCa.certPem)],
            {
              env: {
                ...env,
                DENO_TLS_CA_STORE: "system",
                SSL_CERT_FILE: `${dir}/environment-ca.pem`,
                DENO_CERT: `${dir}/environment-ca.pem`,
              },
              cwd: "/",
            },
          );
          assert.equal(result.code, 0, result.stderrLines.join("\n"));
          const outcome = JSON.parse(result.stdoutLines.at(-1)!);
          assert.equal(outcome.outcome === "ok", row.trusted, JSON.stringify(outcome));
        });
      }
    }

    // The real bootstrapper's rejoin reads the state disk's LUKS token with its cryptsetup first.
    const root = `${dir}/node`;
    await Deno.mkdir(`${root}/run/cryptsetup-keys.d`, { recursive: true });
    await Deno.writeTextFile(`${root}/run/cryptsetup-keys.d/state.key`, "first-boot passphrase");
    await Deno.writeFile(`${root}/disk.img`, new Uint8Array(4096));
    for (const row of BOOTSTRAPPER_ROWS) {
      await t.step(row.name, async () => {
        const bootstrapper = startProcess(`${DIST}bootstrapper`, [
          ...["rejoin", "--attestation-variant", "dummy", "--tpm", "none", "--root", root],
          ...["--state-disk", `${root}/disk.img`, "--cryptsetup", row.cryptsetup],
          ...["--systemctl", "none", "--journalctl", "none", "--join-retry-interval", "1"],
        ], { env, cwd: "/" });
        try {
          await bootstrapper.waitForLine(row.logLine, 15_000);
        } finally {
          await bootstrapper.stop();
        }
      });
    }
  });
});
