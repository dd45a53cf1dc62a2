import assert from "node:assert/strict";
import { parseBootstrapperFlags } from "../../src/bootstrapper/flags.ts";
import { UsageError } from "../../src/flags/flags.ts";

Deno.test("the bootstrapper's defaults are the original's: port 9000, metadata at 10.42.0.1:8080, root /", () => {
  const flags = parseBootstrapperFlags(["--attestation-variant", "qemu-vtpm"]);
  assert.ok(flags !== "help");
  assert.equal(flags.command, "run");
  assert.equal(flags.port, 9000);
  assert.equal(flags.listenAddress, "0.0.0.0");
  assert.equal(flags.metadataUrl, "http://10.42.0.1:8080");
  assert.deepEqual(flags.tpm, { tcti: "device:/dev/tpmrm0" });
  assert.equal(flags.kubeadm, "/run/state/bin/kubeadm");
  assert.equal(flags.stateDiskPassphraseFile, "/run/cryptsetup-keys.d/state.key");
  assert.equal(flags.joinServicePort, 30090);
  assert.equal(flags.recoveryPort, 9999);
  assert.equal(flags.joinRetryIntervalMs, 30_000);
  assert.equal(flags.joinCallTimeoutMs, 30_000);
  assert.equal(
    flags.initApiServer,
    "https://127.0.0.1:6443",
    "Init's objects go to the node's own API server",
  );
  const upper = parseBootstrapperFlags([
    "--attestation-variant",
    "dummy",
    "--init-api-server",
    "HTTPS://[::1]:6443/",
  ]);
  assert.ok(upper !== "help");
  assert.equal(upper.initApiServer, "https://[::1]:6443");
});

Deno.test("the root moves the node's default paths under it; rejoin is a command", () => {
  const flags = parseBootstrapperFlags(["rejoin", "--root", "/tmp/node-1/", "--tpm", "none"], {
    attestationVariant: "dummy",
  });
  assert.ok(flags !== "help");
  assert.equal(flags.command, "rejoin");
  assert.equal(flags.root, "/tmp/node-1");
  assert.equal(flags.attestationVariant, "dummy", "from CONSTEL_ATTESTATION_VARIANT");
  assert.equal(flags.tpm, "none");
  assert.equal(flags.kubeadm, "/tmp/node-1/run/state/bin/kubeadm");
  assert.equal(flags.stateDiskPassphraseFile, "/tmp/node-1/run/cryptsetup-keys.d/state.key");
});

Deno.test("a bad command line names the problem", async (t) => {
  const rows: { name: string; args: string[]; env?: { attestationVariant?: string }; want: RegExp }[] = [
    {
      name: "no variant",
      args: [],
      want: /--attestation-variant \(or CONSTEL_ATTESTATION_VARIANT\) is required/,
    },
    { name: "unknown command", args: ["init"], want: /unknown command "init"/ },
    {
      name: "no TPM without dummy",
      args: ["--attestation-variant", "qemu-vtpm", "--tpm", "none"],
      want: /only with the dummy variant/,
    },
    {
      name: "relative root",
      args: ["--attestation-variant", "dummy", "--root", "node"],
      want: /--root must be an absolute path/,
    },
    {
      name: "bad metadata URL",
      args: ["--attestation-variant", "dummy", "--metadata-url", "10.42.0.1:8080"],
      want: /invalid --metadata-url/,
    },
    { name: "bad port", args: ["--attestation-variant", "dummy", "--port", "70000"], want: /--port/ },
    {
      name: "plain HTTP for Init's API server",
      args: ["--attestation-variant", "dummy", "--init-api-server", "http://127.0.0.1:6443"],
      want: /^--init-api-server is not https: "http:\/\/127\.0\.0\.1:6443"$/,
    },
    {
      name: "credentials in Init's API server URL (not echoed)",
      args: ["--attestation-variant", "dummy", "--init-api-server", "https://admin:hunter2@127.0.0.1:6443"],
      want: /^--init-api-server carries user information, which is not supported$/,
    },
    {
      name: "a query in Init's API server URL (the API paths would go after it)",
      args: ["--attestation-variant", "dummy", "--init-api-server", "https://127.0.0.1:6443?x"],
      want: /^--init-api-server has a query or fragment/,
    },
    {
      name: "zero retry interval",
      args: ["--attestation-variant", "dummy", "--join-retry-interval", "0"],
      want: /--join-retry-interval/,
    },
    {
      name: "listen address not an IP",
      args: ["--attestation-variant", "dummy", "--listen-address", "node-1"],
      want: /--listen-address/,
    },
    {
      name: "bad key derivation",
      args: ["--attestation-variant", "dummy", "--state-disk-pbkdf", "md5"],
      want: /invalid --state-disk-pbkdf "md5"/,
    },
    { name: "unknown flag", args: ["--attestation-variant", "dummy", "--debug"], want: /debug/ },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.throws(() => parseBootstrapperFlags(row.args, row.env), (err) => {
        assert.ok(err instanceof UsageError);
        assert.match(err.message, row.want);
        return true;
      });
    });
  }
});
