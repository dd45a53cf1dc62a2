/**
 * The LUKS2 state disk against real cryptsetup on file-backed containers
 * (reference §7; platform notes §11: header operations need no device-mapper).
 */
import assert from "node:assert/strict";
import {
  isRecordedSaltOf,
  LuksStateDisk,
  type LuksStateDiskOptions,
  StateDiskError,
} from "../../src/bootstrapper/state_disk.ts";
import { formatStateDisk } from "../../src/localcluster/node.ts";
import { cryptsetup } from "../support/cryptsetup.ts";
import { measurementSaltTag } from "../../src/kms/keys.ts";
import { recordingTool } from "../support/recording_tool.ts";

interface Fixture {
  dir: string;
  device: string;
  initialKeyFile: string;
  initialKey: Uint8Array;
  disk(options?: Partial<LuksStateDiskOptions>): LuksStateDisk;
}

/** A fresh LUKS2 container as the disk-mapper leaves it: initial key in keyslot 0, token 0 not initialized. */
async function withDisk(
  test: (fixture: Fixture) => Promise<void>,
  options: { detachedHeader?: boolean } = {},
) {
  const dir = await Deno.makeTempDir({ prefix: "state-disk-" });
  try {
    const device = `${dir}/state.img`;
    const header = options.detachedHeader ? `${dir}/state.hdr` : undefined;
    // Key bytes that break line-based or text-based handling: a newline, a NUL, high bytes.
    const initialKey = new Uint8Array([...crypto.getRandomValues(new Uint8Array(30)), 0x0a, 0x00]);
    const initialKeyFile = `${dir}/state.key`;
    await Deno.writeFile(initialKeyFile, initialKey, { mode: 0o400 });
    await formatStateDisk(device, initialKeyFile, { header });
    await test({
      dir,
      device,
      initialKeyFile,
      initialKey,
      disk: (extra = {}) =>
        new LuksStateDisk({
          device,
          header,
          initialPassphraseFile: initialKeyFile,
          pbkdf: { type: "pbkdf2", forceIterations: 1000 },
          ...extra,
        }),
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** A cluster's measurement salt and secret, as the token records them (the secret only as the salt's tag). */
const SALT = Uint8Array.from({ length: 32 }, (_, i) => 0xa0 + i);
const RECORD = { measurementSalt: SALT, measurementSecret: new Uint8Array(32).fill(0x3e) };

function newKey(): Uint8Array {
  return new Uint8Array([0x0a, ...crypto.getRandomValues(new Uint8Array(30)), 0x00]);
}

async function digest(path: string): Promise<string> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", await Deno.readFile(path))).toHex();
}

for (const detachedHeader of [false, true]) {
  const kind = detachedHeader ? "detached header" : "container file";
  Deno.test(`state disk (${kind}): uuid, not initialized, change passphrase, initialized with the salt, old key dead, new key opens`, async () => {
    await withDisk(async ({ device, initialKey, disk }) => {
      const stateDisk = disk();
      const uuid = await stateDisk.uuid();
      assert.match(uuid, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      if (!detachedHeader) {
        const printed = new TextDecoder().decode((await cryptsetup(["luksUUID", device])).stdout).trim();
        assert.equal(uuid, printed.toLowerCase());
      }
      assert.equal(await stateDisk.isInitialized(), false);
      assert.equal(await stateDisk.measurementSalt(), undefined);
      assert.equal(await stateDisk.testPassphrase(initialKey), true);

      const key = newKey();
      await stateDisk.changePassphrase(key, RECORD);
      assert.equal(await stateDisk.isInitialized(), true);
      assert.deepEqual(await stateDisk.measurementSalt(), {
        salt: SALT,
        tag: await measurementSaltTag(RECORD.measurementSecret, SALT),
      });
      assert.equal(await stateDisk.testPassphrase(key), true);
      assert.equal(await stateDisk.testPassphrase(initialKey), false);
      // A prefix of the key (what a line-based reader would take) must not open it either.
      assert.equal(await stateDisk.testPassphrase(key.subarray(1)), false);
      assert.equal(await stateDisk.uuid(), uuid);
    }, { detachedHeader });
  });
}

Deno.test("state disk: a disk without token 0 is not initialized", async () => {
  await withDisk(async ({ device, disk }) => {
    await cryptsetup(["token", "remove", "--token-id", "0", device]);
    assert.equal(await disk().isInitialized(), false);
  });
});

Deno.test("state disk: a token without a salt, or with a malformed one, records none until recordSalt writes it", async (t) => {
  for (
    const [name, salt] of [["absent", undefined], ["not base64", "%%%"], ["a number", 32]] as const
  ) {
    await t.step(name, async () => {
      await withDisk(async ({ device, disk }) => {
        const token = {
          type: "constellation-state-disk",
          keyslots: [],
          diskIsInitialized: true,
          measurementSalt: salt,
        };
        await cryptsetup(
          ["token", "import", "--token-replace", "--token-id", "0", device],
          new TextEncoder().encode(JSON.stringify(token)),
        );
        assert.equal(await disk().isInitialized(), true);
        assert.equal(await disk().measurementSalt(), undefined);
        await disk().recordSalt(RECORD);
        assert.deepEqual(await disk().measurementSalt(), {
          salt: SALT,
          tag: await measurementSaltTag(RECORD.measurementSecret, SALT),
        });
        assert.equal(await disk().isInitialized(), true);
      });
    });
  }
});

Deno.test("state disk: token 0 of another tool is no state-disk token, whatever it says", async () => {
  await withDisk(async ({ device, disk }) => {
    const token = {
      type: "another-tool",
      keyslots: [],
      diskIsInitialized: true,
      measurementSalt: SALT.toBase64(),
      measurementSaltTag: (await measurementSaltTag(RECORD.measurementSecret, SALT)).toBase64(),
    };
    await cryptsetup(
      ["token", "import", "--token-replace", "--token-id", "0", device],
      new TextEncoder().encode(JSON.stringify(token)),
    );
    assert.equal(await disk().isInitialized(), false);
    assert.equal(await disk().measurementSalt(), undefined);
  });
});

Deno.test("isRecordedSaltOf: the tag must be the salt's under the secret, and the salt the one asked about", async (t) => {
  const secret = RECORD.measurementSecret;
  const otherSalt = new Uint8Array(32).fill(0x77);
  const recorded = { salt: SALT, tag: await measurementSaltTag(secret, SALT) };
  const rows: { name: string; args: Parameters<typeof isRecordedSaltOf>; want: boolean }[] = [
    { name: "its own salt and secret", args: [recorded, secret], want: true },
    { name: "the salt recorded, asked about", args: [recorded, secret, SALT], want: true },
    { name: "another salt asked about", args: [recorded, secret, otherSalt], want: false },
    { name: "another secret", args: [recorded, new Uint8Array(32).fill(0x3f)], want: false },
    { name: "the salt changed, the tag kept", args: [{ ...recorded, salt: otherSalt }, secret], want: false },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => assert.equal(await isRecordedSaltOf(...row.args), row.want));
  }
});

Deno.test("state disk: an empty new key is refused before cryptsetup runs; the initial passphrase still opens", async () => {
  await withDisk(async ({ device, initialKey, disk }) => {
    const before = await digest(device);
    const stateDisk = disk();
    await assert.rejects(stateDisk.changePassphrase(new Uint8Array(0), RECORD), (error) => {
      assert.ok(error instanceof RangeError, String(error));
      assert.match(error.message, /must not be empty/);
      return true;
    });
    assert.equal(await digest(device), before);
    assert.equal(await stateDisk.testPassphrase(initialKey), true);
    assert.equal(await stateDisk.isInitialized(), false);
  });
});

Deno.test("state disk: testPassphrase on a file that is not LUKS, or a missing one, rejects: it is no wrong key", async (t) => {
  await withDisk(async ({ dir, initialKey, initialKeyFile }) => {
    const plain = `${dir}/plain.img`;
    await Deno.writeFile(plain, new Uint8Array(1 << 20));
    const rows: { name: string; device: string; message: RegExp }[] = [
      {
        name: "not LUKS",
        device: plain,
        message: /plain\.img: testing a passphrase failed .*not a LUKS device/,
      },
      {
        name: "missing",
        device: `${dir}/absent.img`,
        message: /absent\.img: testing a passphrase failed .*does not exist/,
      },
    ];
    for (const row of rows) {
      await t.step(row.name, async () => {
        const stateDisk = new LuksStateDisk({ device: row.device, initialPassphraseFile: initialKeyFile });
        await assert.rejects(stateDisk.testPassphrase(initialKey), (error) => {
          assert.ok(error instanceof StateDiskError, String(error));
          assert.equal(error.reason, "not-luks");
          assert.match(error.message, row.message);
          return true;
        });
      });
    }
  });
});

Deno.test("state disk: a wrong initial passphrase is refused with its reason and leaves the disk unchanged", async () => {
  await withDisk(async ({ dir, device, initialKey, disk }) => {
    const wrongFile = `${dir}/wrong.key`;
    await Deno.writeFile(wrongFile, crypto.getRandomValues(new Uint8Array(32)));
    const before = await digest(device);
    const stateDisk = disk({ initialPassphraseFile: wrongFile });
    await assert.rejects(stateDisk.changePassphrase(newKey(), RECORD), (error) => {
      assert.ok(error instanceof StateDiskError);
      assert.equal(error.reason, "initial-passphrase-wrong");
      assert.equal(error.exitCode, 2);
      assert.match(error.message, /wrong\.key does not open keyslot 0/);
      return true;
    });
    assert.equal(await digest(device), before);
    assert.equal(await stateDisk.isInitialized(), false);
    assert.equal(await stateDisk.testPassphrase(initialKey), true);
  });
});

Deno.test("state disk: a missing initial passphrase file is refused before cryptsetup runs; disk unchanged", async () => {
  await withDisk(async ({ dir, device, disk }) => {
    const before = await digest(device);
    await assert.rejects(
      disk({ initialPassphraseFile: `${dir}/absent.key` }).changePassphrase(newKey(), RECORD),
      (error) => {
        assert.ok(error instanceof StateDiskError);
        assert.equal(error.reason, "initial-passphrase-missing");
        assert.match(error.message, /absent\.key does not exist/);
        return true;
      },
    );
    assert.equal(await digest(device), before);
  });
});

Deno.test("state disk: a file that is not LUKS gives reason not-luks; a missing cryptsetup is unavailable", async () => {
  await withDisk(async ({ dir, initialKeyFile }) => {
    const plain = `${dir}/plain.img`;
    await Deno.writeFile(plain, new Uint8Array(1 << 20));
    await assert.rejects(
      new LuksStateDisk({ device: plain, initialPassphraseFile: initialKeyFile }).uuid(),
      (error) => {
        assert.ok(error instanceof StateDiskError);
        assert.equal(error.reason, "not-luks");
        assert.match(error.message, /not a LUKS device/);
        return true;
      },
    );
    const missingTool = new LuksStateDisk({
      device: plain,
      initialPassphraseFile: initialKeyFile,
      cryptsetup: `${dir}/no-such-cryptsetup`,
    });
    await assert.rejects(missingTool.uuid(), (error) => {
      assert.ok(error instanceof StateDiskError);
      assert.equal(error.reason, "cryptsetup-unavailable");
      return true;
    });
  });
});

Deno.test("state disk: checkPresent() asks cryptsetup whether the device can be opened, LUKS or not", async (t) => {
  await withDisk(async ({ dir, device, initialKeyFile }) => {
    const plain = `${dir}/plain.img`;
    await Deno.writeFile(plain, new Uint8Array(4096));
    const rows: { name: string; options: Partial<LuksStateDiskOptions>; unavailable?: RegExp }[] = [
      { name: "a LUKS2 container", options: { device } },
      { name: "a blank disk (read only once the node serves)", options: { device: plain } },
      {
        name: "a missing device",
        options: { device: `${dir}/absent.img` },
        unavailable:
          /absent\.img: does not exist or cannot be opened \(exit code 4\): Device .*absent\.img does not exist/,
      },
      { name: "a directory", options: { device: dir }, unavailable: /is not compatible/ },
      {
        name: "a missing detached header",
        options: { device: plain, header: `${dir}/absent.hdr` },
        unavailable: /\(header .*absent\.hdr\): does not exist or cannot be opened/,
      },
    ];
    for (const row of rows) {
      await t.step(row.name, async () => {
        const disk = new LuksStateDisk({ initialPassphraseFile: initialKeyFile, device, ...row.options });
        if (!row.unavailable) return await disk.checkPresent();
        await assert.rejects(disk.checkPresent(), (error) => {
          assert.ok(error instanceof StateDiskError);
          assert.equal(error.reason, "device-unavailable");
          assert.equal(error.exitCode, 4);
          assert.match(error.message, row.unavailable!);
          return true;
        });
      });
    }
  });
});

Deno.test("state disk: an aborted call is reason aborted", async () => {
  await withDisk(async ({ disk }) => {
    const controller = new AbortController();
    controller.abort();
    await assert.rejects(disk().uuid({ signal: controller.signal }), (error) => {
      assert.ok(error instanceof StateDiskError);
      assert.equal(error.reason, "aborted");
      return true;
    });
  });
});

Deno.test("state disk: calls are serialized in call order (a test issued after a change sees the new key)", async () => {
  await withDisk(async ({ initialKey, disk }) => {
    const stateDisk = disk();
    const key = newKey();
    const [, newOpens, oldOpens, initialized] = await Promise.all([
      stateDisk.changePassphrase(key, RECORD),
      stateDisk.testPassphrase(key),
      stateDisk.testPassphrase(initialKey),
      stateDisk.isInitialized(),
    ]);
    assert.deepEqual([newOpens, oldOpens, initialized], [true, false, true]);
  });
});

Deno.test("state disk: no key ever reaches cryptsetup's argv, and no temporary file is left", async () => {
  const recorder = await recordingTool();
  try {
    await withDisk(async ({ dir, initialKey, disk }) => {
      const cryptsetupPath = await findOnPath("cryptsetup");
      const stateDisk = disk({
        cryptsetup: recorder.binary,
        env: recorder.env({ RECORDING_TOOL_EXEC: cryptsetupPath }),
      });
      const key = newKey();
      const before = (await Array.fromAsync(Deno.readDir(dir))).map((entry) => entry.name).sort();
      await stateDisk.changePassphrase(key, RECORD);
      assert.equal(await stateDisk.testPassphrase(key), true);
      assert.equal(await stateDisk.testPassphrase(initialKey), false);
      const calls = await recorder.calls();
      assert.deepEqual(calls.map((call) => call.argv.find((arg) => !arg.startsWith("-"))), [
        "luksChangeKey",
        "token",
        "open",
        "open",
      ]);
      const argv = calls.flatMap((call) => call.argv).join(" ");
      for (const secret of [key, initialKey]) {
        for (
          const form of [secret.toHex(), secret.toBase64(), new TextDecoder().decode(secret.subarray(1, 20))]
        ) {
          assert.ok(!argv.includes(form), `a key appears on argv: ${argv}`);
        }
      }
      // The keys went through stdin ("-"), the initial one stayed in its file.
      assert.ok(calls[0].argv.includes("--key-file") && calls[0].argv.at(-1) === "-");
      assert.ok(calls[2].argv.includes("--key-file=-"));
      assert.deepEqual((await Array.fromAsync(Deno.readDir(dir))).map((entry) => entry.name).sort(), before);
    });
  } finally {
    await recorder.remove();
  }
});

async function findOnPath(name: string): Promise<string> {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":").concat(["/usr/sbin", "/sbin"])) {
    const candidate = `${dir}/${name}`;
    if (await Deno.stat(candidate).then((info) => info.isFile, () => false)) return candidate;
  }
  throw new Error(`${name} is not installed: apt-get install cryptsetup-bin`);
}
