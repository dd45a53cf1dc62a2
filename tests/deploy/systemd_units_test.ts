/**
 * The systemd units (deploy/systemd/): the bootstrapper's and the rejoin
 * step's. Their fields follow the original's constellation-bootstrapper
 * unit (after network-online.target and configure-constel-csp.service,
 * Restart=on-failure with systemd's default pacing) and the rejoin step is
 * ordered before the bootstrapper, which requires it; both run the built
 * bootstrapper artifact with a command line its parser accepts. The real
 * `systemd-analyze verify` accepts both units in a root holding the built
 * artifact at ExecStart's path, and (the control) refuses them without it.
 */
import assert from "node:assert/strict";
import { COMPONENTS } from "../../scripts/build.ts";
import { parseBootstrapperFlags } from "../../src/bootstrapper/flags.ts";
import { runToExit } from "../../src/os/service_process.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";
import { buildArtifacts, DIST } from "../build/artifacts.ts";
import { withTempDir } from "../support/temp_dir.ts";

const SYSTEMD_DIR = `${REPO_ROOT}deploy/systemd`;
const BOOTSTRAPPER_UNIT = "constellation-bootstrapper.service";
const REJOIN_UNIT = "constellation-rejoin.service";
/** systemd's cache directory (under /var/cache) where the bootstrapper unit keeps Deno's code cache. */
const DENO_CACHE = "constellation-deno";

/** A unit file: each section's keys with every value given (a key may repeat). */
type Unit = Record<string, Record<string, string[]>>;

/** Parses a unit file: `[Section]` lines, `Key=value` lines, `#` and `;` comments. */
function parseUnit(text: string): Unit {
  const unit: Unit = {};
  let section: Record<string, string[]> | undefined;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const header = /^\[(.+)\]$/.exec(line);
    if (header) {
      section = unit[header[1]] ??= {};
      continue;
    }
    const equals = line.indexOf("=");
    assert.ok(section && equals > 0, `not a unit file line: ${line}`);
    (section[line.slice(0, equals).trim()] ??= []).push(line.slice(equals + 1).trim());
  }
  return unit;
}

/** The space-separated words of every value of `section.key`. */
function words(unit: Unit, section: string, key: string): string[] {
  return (unit[section]?.[key] ?? []).flatMap((value) => value.split(/\s+/).filter(Boolean));
}

const bootstrapper = parseUnit(await Deno.readTextFile(`${SYSTEMD_DIR}/${BOOTSTRAPPER_UNIT}`));
const rejoin = parseUnit(await Deno.readTextFile(`${SYSTEMD_DIR}/${REJOIN_UNIT}`));

/** Whether systemd-analyze can run here. */
const systemdAnalyze = await runToExit("systemd-analyze", ["--version"]).then(
  (r) => r.code === 0,
  () => false,
);

Deno.test("the bootstrapper unit: the original's ordering and restart policy, after the rejoin step", () => {
  assert.deepEqual(words(bootstrapper, "Unit", "Wants"), ["network-online.target"]);
  assert.deepEqual(words(bootstrapper, "Unit", "After").sort(), [
    "configure-constel-csp.service",
    REJOIN_UNIT,
    "network-online.target",
  ]);
  assert.deepEqual(words(bootstrapper, "Unit", "Requires"), [REJOIN_UNIT]);
  // After a reboot the state disk is mapped only once the rejoin step wrote its key: wait for the mount.
  assert.deepEqual(words(bootstrapper, "Unit", "RequiresMountsFor"), ["/run/state"]);
  assert.deepEqual(bootstrapper.Service.Type, ["simple"]);
  assert.deepEqual(bootstrapper.Service.RemainAfterExit, ["yes"]);
  assert.deepEqual(bootstrapper.Service.Restart, ["on-failure"]);
  for (const key of ["RestartSec", "StartLimitBurst", "StartLimitIntervalSec"]) {
    assert.equal(bootstrapper.Service[key] ?? bootstrapper.Unit[key], undefined, `${key}: systemd's default`);
  }
  assert.deepEqual(bootstrapper.Service.EnvironmentFile, ["/run/constellation.env"]);
  // Deno's code cache in systemd's cache directory, on the state disk, mounted by the time it starts.
  assert.deepEqual(bootstrapper.Service.CacheDirectory, [DENO_CACHE]);
  assert.ok(bootstrapper.Service.Environment.includes(`DENO_DIR=/var/cache/${DENO_CACHE}`));
  assert.deepEqual(bootstrapper.Install.WantedBy, ["multi-user.target"]);
});

Deno.test("the rejoin unit: a one-shot before the bootstrapper, rebooting on failure as the original's", () => {
  assert.deepEqual(words(rejoin, "Unit", "Before"), [BOOTSTRAPPER_UNIT]);
  assert.deepEqual(words(rejoin, "Unit", "Wants"), ["network-online.target"]);
  assert.deepEqual(words(rejoin, "Unit", "After").sort(), [
    "configure-constel-csp.service",
    "network-online.target",
  ]);
  assert.deepEqual(rejoin.Unit.FailureAction, ["reboot-immediate"]);
  assert.deepEqual(rejoin.Service.Type, ["oneshot"]);
  assert.deepEqual(rejoin.Service.RemainAfterExit, ["yes"]);
  assert.equal(rejoin.Service.Restart, undefined, "it retries by itself");
  assert.deepEqual(rejoin.Service.EnvironmentFile, ["/run/constellation.env"]);
  // Not under /var: it is on the state disk this step unlocks (see the image's stand-ins below).
  assert.equal(rejoin.Service.CacheDirectory, undefined);
  assert.deepEqual(rejoin.Service.RuntimeDirectory, ["constellation-rejoin"]);
  assert.ok(rejoin.Service.Environment.includes("DENO_DIR=/run/constellation-rejoin"));
  assert.deepEqual(rejoin.Install.WantedBy, ["multi-user.target"]);
});

Deno.test("both units run the built bootstrapper with a command line its parser accepts", () => {
  for (const [unit, command] of [[bootstrapper, "run"], [rejoin, "rejoin"]] as const) {
    const [program, ...args] = words(unit, "Service", "ExecStart");
    assert.equal(program, "/usr/bin/bootstrapper");
    assert.ok(COMPONENTS.some((c) => c.name === program.slice(program.lastIndexOf("/") + 1)), program);
    // The variant comes from /run/constellation.env, as CONSTEL_ATTESTATION_VARIANT.
    const flags = parseBootstrapperFlags(args, { attestationVariant: "qemu-vtpm" });
    assert.notEqual(flags, "help");
    assert.equal(flags !== "help" && flags.command, command);
  }
});

Deno.test({
  name: "systemd-analyze verify accepts both units with the built bootstrapper at ExecStart's path",
  ignore: !systemdAnalyze,
  fn: async (t) => {
    await buildArtifacts();
    await withTempDir("systemd-root-", async (root) => {
      // A root with the host's system units (the targets ours name) and ours.
      await Deno.mkdir(`${root}/usr/lib/systemd/system`, { recursive: true });
      for await (const entry of Deno.readDir("/usr/lib/systemd/system")) {
        if (!entry.isFile) continue;
        await Deno.copyFile(
          `/usr/lib/systemd/system/${entry.name}`,
          `${root}/usr/lib/systemd/system/${entry.name}`,
        );
      }
      await Deno.mkdir(`${root}/etc/systemd/system`, { recursive: true });
      for (const unit of [BOOTSTRAPPER_UNIT, REJOIN_UNIT]) {
        await Deno.copyFile(`${SYSTEMD_DIR}/${unit}`, `${root}/etc/systemd/system/${unit}`);
      }
      const verify = () =>
        runToExit("systemd-analyze", ["verify", `--root=${root}`, BOOTSTRAPPER_UNIT, REJOIN_UNIT]);

      await t.step("without the bootstrapper at /usr/bin/bootstrapper: refused", async () => {
        const result = await verify();
        assert.notEqual(result.code, 0);
        assert.match(result.stderrLines.join("\n"), /Command \/usr\/bin\/bootstrapper is not executable/);
      });

      await t.step("with the built bootstrapper installed there: accepted, without a warning", async () => {
        await Deno.mkdir(`${root}/usr/bin`, { recursive: true });
        for (const file of ["bootstrapper", "bootstrapper.js"]) {
          await Deno.copyFile(`${DIST}${file}`, `${root}/usr/bin/${file}`);
        }
        await Deno.chmod(`${root}/usr/bin/bootstrapper`, 0o755);
        const result = await verify();
        assert.equal(result.code, 0, result.stderrLines.join("\n"));
        assert.deepEqual([...result.stdoutLines, ...result.stderrLines], []);
      });

      await t.step(
        "with the image's state disk (mapped after the rejoin step, /var on it): no cycle",
        async () => {
          for (const [name, text] of Object.entries(IMAGE_STATE_DISK_UNITS)) {
            await Deno.writeTextFile(`${root}/etc/systemd/system/${name}`, text);
          }
          const result = await verify();
          assert.equal(result.code, 0, result.stderrLines.join("\n"));
          assert.deepEqual([...result.stdoutLines, ...result.stderrLines], []);
        },
      );
    });
  },
});

/**
 * Stand-ins for the image's state disk, as the original's fstab lays it out and README "Deploying" asks:
 * systemd-cryptsetup maps it with the key the rejoin step wrote (so after that step), it is mounted on
 * /run/state, and /var is a bind mount from it. Outside local-fs.target and cryptsetup.target
 * (DefaultDependencies=no), as the image must keep them: the rejoin step needs the network, which comes
 * after those targets.
 */
const IMAGE_STATE_DISK_UNITS: Record<string, string> = {
  "systemd-cryptsetup@state.service": `[Unit]
DefaultDependencies=no
After=${REJOIN_UNIT}
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/true
`,
  "run-state.mount": `[Unit]
DefaultDependencies=no
Requires=systemd-cryptsetup@state.service
After=systemd-cryptsetup@state.service
[Mount]
What=/dev/mapper/state
Where=/run/state
Type=ext4
`,
  "var.mount": `[Unit]
DefaultDependencies=no
RequiresMountsFor=/run/state
[Mount]
What=/run/state/var
Where=/var
Options=bind
`,
};
