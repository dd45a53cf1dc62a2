import assert from "node:assert/strict";
import {
  AttestationConfigWatcher,
  type AttestationConfigWatcherOptions,
  CONTROL_PLANE_ANY_KEY_WARNING,
} from "../../src/attestation/watcher.ts";
import { AttestationConfigError } from "../../src/attestation/config.ts";
import { measurementsDigest, parseMeasurements } from "../../src/attestation/measurements.ts";
import { AttestationError, type Validator, type Verification } from "../../src/attestation/attestation.ts";
import { createLogger, silentLogger } from "../../src/log/logger.ts";
import eccFixture from "../fixtures/tpm/ecc.json" with { type: "json" };

const DEBOUNCE_MS = 20;
const KEY1 = "11".repeat(32);
const KEY2 = "22".repeat(32);

/** A dummy config whose PCR 4 is `byte` repeated. */
function dummyConfig(byte: string, warnOnly = false): string {
  return JSON.stringify({ variant: "dummy", measurements: { "4": { expected: byte.repeat(32), warnOnly } } });
}

/** A temp dir holding `attestationConfig`; removed after `fn`. */
async function withConfigDir(fn: (dir: string, path: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "attestation-watcher-" });
  try {
    await fn(dir, `${dir}/attestationConfig`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const WAIT_MS = 10_000;

/** Waits for `promise`, failing the test instead of hanging when it does not settle in time. */
async function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), WAIT_MS);
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** A logger that records lines, and lets a test wait for a line without sleeping. */
function recordingLogger() {
  const lines: Record<string, unknown>[] = [];
  const waiting: { msg: string; resolve: (line: Record<string, unknown>) => void }[] = [];
  const logger = createLogger({
    level: "debug",
    write: (text) => {
      const line = JSON.parse(text);
      lines.push(line);
      for (const w of waiting.filter((w) => w.msg === line.msg)) {
        waiting.splice(waiting.indexOf(w), 1);
        w.resolve(line);
      }
    },
  });
  const next = (msg: string) =>
    within(new Promise<Record<string, unknown>>((resolve) => waiting.push({ msg, resolve })), `log "${msg}"`);
  return { logger, lines, next };
}

/** Resolves with the next reload error reported by a watcher started with `onReloadError: errors.report`. */
function reloadErrors() {
  let pending: ((error: Error) => void) | undefined;
  return {
    report: (error: Error) => pending?.(error),
    next: () => within(new Promise<Error>((resolve) => (pending = resolve)), "a reload error"),
  };
}

function start(options: Partial<AttestationConfigWatcherOptions> & { path: string }) {
  return AttestationConfigWatcher.start({
    variant: "dummy",
    logger: silentLogger,
    debounceMs: DEBOUNCE_MS,
    ...options,
  });
}

/**
 * Creates a symlink with `ln -s`: Deno.symlink needs unscoped read and write
 * permissions, which the test permission set deliberately does not grant.
 */
async function symlink(target: string, path: string): Promise<void> {
  const { success, stderr } = await new Deno.Command("ln", {
    args: ["-s", "--", target, path],
    clearEnv: true,
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!success) throw new Error(`ln -s ${target} ${path} failed: ${new TextDecoder().decode(stderr)}`);
}

const timeout = () => AbortSignal.timeout(WAIT_MS);

Deno.test("start rejects a missing, invalid or wrong-variant config", async () => {
  await withConfigDir(async (dir, path) => {
    await assert.rejects(start({ path }), (error: unknown) => {
      assert.ok(error instanceof AttestationConfigError);
      assert.equal(error.reason, "unreadable");
      assert.match(error.message, new RegExp(`^cannot read attestation config ${path}: No such file`));
      return true;
    });
    await assert.rejects(start({ path: `${dir}/missing-dir/attestationConfig` }), {
      name: "AttestationConfigError",
      message: new RegExp(`^cannot watch the attestation config directory ${dir}/missing-dir: `),
    });
    await Deno.writeTextFile(path, '{"variant":"dummy","extra":1}');
    await assert.rejects(start({ path }), {
      name: "AttestationConfigError",
      message: `attestation config ${path}: unknown field "extra" (known: variant, measurements, akTrust)`,
    });
    await Deno.writeTextFile(path, dummyConfig("aa"));
    await assert.rejects(start({ path, variant: "qemu-vtpm" }), {
      name: "AttestationConfigError",
      message: /variant/,
    });
    await assert.rejects(start({ path, signal: AbortSignal.abort() }), { name: "AbortError" });
  });
});

Deno.test("start loads the config, builds its validator and logs a summary", async () => {
  await withConfigDir(async (_dir, path) => {
    await Deno.writeTextFile(path, dummyConfig("aa"));
    const { logger, lines } = recordingLogger();
    const watcher = await start({ path, logger });
    try {
      const state = watcher.current();
      assert.equal(state.generation, 1);
      assert.equal(state.config.variant, "dummy");
      assert.equal(state.validator.variant, "dummy");
      assert.equal(state.digest, await measurementsDigest(parseMeasurements({ "4": "aa".repeat(32) })));
      const loaded = lines.find((line) => line.msg === "attestation config loaded");
      assert.ok(loaded);
      assert.equal(loaded.generation, 1);
      assert.equal(loaded.digest, state.digest);
      assert.deepEqual(loaded.measurementIndices, [4]);
      // A generation already in force resolves at once.
      assert.equal(await watcher.reloaded(0), state);
    } finally {
      await watcher.close();
    }
  });
});

Deno.test("a plain write is reloaded, and the change is logged", async () => {
  await withConfigDir(async (_dir, path) => {
    await Deno.writeTextFile(path, dummyConfig("aa"));
    const { logger, next } = recordingLogger();
    const changes: number[] = [];
    const watcher = await start({ path, logger, onChange: (state) => changes.push(state.generation) });
    try {
      const before = watcher.current();
      const logged = next("attestation config reloaded");
      await Deno.writeTextFile(path, dummyConfig("bb"));
      const after = await watcher.reloaded(1, { signal: timeout() });
      assert.equal(after.generation, 2);
      assert.equal(watcher.current(), after);
      assert.notEqual(after.validator, before.validator);
      assert.notEqual(after.digest, before.digest);
      assert.equal(after.digest, await measurementsDigest(parseMeasurements({ "4": "bb".repeat(32) })));
      assert.deepEqual(changes, [2]);
      const line = await logged;
      assert.equal(line.level, "info");
      assert.equal(line.generation, 2);
      assert.equal(line.previousDigest, before.digest);
      assert.deepEqual(line.measurementsChanged, [4]);
      assert.deepEqual(line.measurementsAdded, []);
      assert.deepEqual(line.measurementsRemoved, []);
    } finally {
      await watcher.close();
    }
  });
});

Deno.test("a rename over the file is reloaded", async () => {
  await withConfigDir(async (dir, path) => {
    await Deno.writeTextFile(path, dummyConfig("aa"));
    const watcher = await start({ path });
    try {
      await Deno.writeTextFile(`${dir}/.attestationConfig.tmp`, dummyConfig("cc"));
      await Deno.rename(`${dir}/.attestationConfig.tmp`, path);
      const state = await watcher.reloaded(1, { signal: timeout() });
      assert.equal(state.generation, 2);
      assert.equal(state.config.measurements.get(4)!.expected[0], 0xcc);
      // The watch survives the replaced inode: a further write is seen too.
      await Deno.writeTextFile(path, dummyConfig("dd"));
      assert.equal(
        (await watcher.reloaded(2, { signal: timeout() })).config.measurements.get(4)!.expected[0],
        0xdd,
      );
    } finally {
      await watcher.close();
    }
  });
});

Deno.test("a ConfigMap-style ..data symlink swap is reloaded, repeatedly", async () => {
  await withConfigDir(async (dir, path) => {
    await Deno.mkdir(`${dir}/..2026_01_01`);
    await Deno.writeTextFile(`${dir}/..2026_01_01/attestationConfig`, dummyConfig("aa"));
    await symlink("..2026_01_01", `${dir}/..data`);
    await symlink("..data/attestationConfig", path);
    const watcher = await start({ path });
    /** What kubelet does: new timestamped dir, temp symlink, atomic rename over ..data, old dir removed. */
    const swap = async (from: string, to: string, content: string) => {
      await Deno.mkdir(`${dir}/${to}`);
      await Deno.writeTextFile(`${dir}/${to}/attestationConfig`, content);
      await symlink(to, `${dir}/..data_tmp`);
      await Deno.rename(`${dir}/..data_tmp`, `${dir}/..data`);
      await Deno.remove(`${dir}/${from}`, { recursive: true });
    };
    try {
      assert.equal(watcher.current().config.measurements.get(4)!.expected[0], 0xaa);
      await swap("..2026_01_01", "..2026_01_02", dummyConfig("bb"));
      const second = await watcher.reloaded(1, { signal: timeout() });
      assert.equal(second.generation, 2);
      assert.equal(second.config.measurements.get(4)!.expected[0], 0xbb);
      await swap("..2026_01_02", "..2026_01_03", dummyConfig("bb", true));
      const third = await watcher.reloaded(2, { signal: timeout() });
      assert.equal(third.generation, 3);
      assert.equal(third.config.measurements.get(4)!.warnOnly, true);
    } finally {
      await watcher.close();
    }
  });
});

Deno.test("invalid content keeps the last good config; a later valid change applies", async () => {
  await withConfigDir(async (_dir, path) => {
    await Deno.writeTextFile(path, dummyConfig("aa"));
    const errors = reloadErrors();
    const { logger, lines } = recordingLogger();
    const watcher = await start({ path, logger, onReloadError: errors.report });
    try {
      const good = watcher.current();

      let failed = errors.next();
      await Deno.writeTextFile(path, '{"variant":"dummy","measurements":{"4":"abc"}}');
      let error = await failed;
      assert.ok(error instanceof AttestationConfigError);
      assert.equal(
        error.message,
        `attestation config ${path}: measurement "4": expected must be hex of 32 or 48 bytes, got an odd number of hex digits (3)`,
      );
      assert.equal(watcher.current(), good);
      const logged = lines.find((line) =>
        line.msg === "attestation config reload failed; keeping the last good config"
      );
      assert.ok(logged);
      assert.equal(logged.level, "error");
      assert.equal(logged.generation, 1);
      assert.equal(logged.reason, "invalid-config");

      failed = errors.next();
      await Deno.remove(path);
      error = await failed;
      assert.ok(error instanceof AttestationConfigError);
      assert.equal(error.reason, "unreadable");
      assert.equal(watcher.current(), good);

      failed = errors.next();
      await Deno.writeTextFile(path, '{"variant":"qemu-vtpm"}');
      assert.equal((await failed as AttestationConfigError).reason, "variant-mismatch");
      assert.equal(watcher.current(), good);

      await Deno.writeTextFile(path, dummyConfig("ee"));
      const applied = await watcher.reloaded(1, { signal: timeout() });
      assert.equal(applied.generation, 2);
      assert.equal(applied.config.measurements.get(4)!.expected[0], 0xee);
    } finally {
      await watcher.close();
    }
  });
});

Deno.test("a rewrite without effective change keeps the generation", async () => {
  await withConfigDir(async (_dir, path) => {
    await Deno.writeTextFile(path, dummyConfig("aa"));
    const errors = reloadErrors();
    const { logger, next } = recordingLogger();
    const watcher = await start({ path, logger, onReloadError: errors.report });
    try {
      const good = watcher.current();
      const failed = errors.next();
      await Deno.writeTextFile(path, "not json");
      assert.equal((await failed as AttestationConfigError).reason, "invalid-json");
      // The same config, spelled differently (legacy form, upper-case hex, whitespace).
      const recovered = next("attestation config is valid again and unchanged");
      await Deno.writeTextFile(path, `{ "measurements": {"4": "${"AA".repeat(32)}"}, "variant": "dummy" }\n`);
      assert.equal((await recovered).generation, 1);
      assert.equal(watcher.current(), good);
      // Once valid, another spelling of the same config is only noted at debug level.
      const unchanged = next("attestation config rewritten without effective change");
      await Deno.writeTextFile(path, dummyConfig("AA"));
      assert.equal((await unchanged).level, "debug");
      assert.equal(watcher.current(), good);
    } finally {
      await watcher.close();
    }
  });
});

Deno.test("AK trust changes of a qemu-vtpm config are applied and logged", async () => {
  await withConfigDir(async (_dir, path) => {
    const config = (akTrust: unknown) =>
      JSON.stringify({ variant: "qemu-vtpm", measurements: { "4": "aa".repeat(32) }, akTrust });
    await Deno.writeTextFile(path, config({ allowedKeyDigests: [KEY1] }));
    const { logger, next } = recordingLogger();
    const watcher = await start({ path, logger, variant: "qemu-vtpm" });
    try {
      const logged = next("attestation config reloaded");
      await Deno.writeTextFile(path, config({ allowedKeyDigests: [KEY2] }));
      const state = await watcher.reloaded(1, { signal: timeout() });
      assert.equal(state.validator.variant, "qemu-vtpm");
      assert.ok(state.config.akTrust.kind === "allow-list" && state.config.akTrust.keyDigests.has(KEY2));
      const line = await logged;
      assert.deepEqual(line.akTrustChange, {
        from: "allow-list",
        to: "allow-list",
        addedKeys: [KEY2],
        removedKeys: [KEY1],
      });
      assert.deepEqual(line.measurementsChanged, []);
      assert.equal(line.digest, watcher.current().digest);
    } finally {
      await watcher.close();
    }
  });
});

Deno.test("a change of the control-plane keys alone is applied, logged, and warned about when it opens the role to any key", async () => {
  await withConfigDir(async (_dir, path) => {
    const config = (akTrust: unknown) =>
      JSON.stringify({ variant: "qemu-vtpm", measurements: { "4": "aa".repeat(32) }, akTrust });
    await Deno.writeTextFile(path, config({ allowedKeyDigests: [KEY1, KEY2] }));
    const { logger, lines, next } = recordingLogger();
    const watcher = await start({ path, logger, variant: "qemu-vtpm" });
    try {
      assert.deepEqual(watcher.current().config.controlPlanes, { kind: "allow-list", keyDigests: new Set() });
      let logged = next("attestation config reloaded");
      await Deno.writeTextFile(
        path,
        config({ allowedKeyDigests: [KEY1, KEY2], controlPlaneKeyDigests: [KEY2] }),
      );
      const state = await watcher.reloaded(1, { signal: timeout() });
      assert.deepEqual(state.config.controlPlanes, { kind: "allow-list", keyDigests: new Set([KEY2]) });
      assert.equal(state.generation, 2);
      const line = await logged;
      assert.equal(line.akTrustChange, undefined);
      assert.deepEqual(line.controlPlanesChange, {
        from: "allow-list",
        to: "allow-list",
        addedKeys: [KEY2],
        removedKeys: [],
      });
      assert.equal(line.controlPlaneKeys, 1);

      logged = next("attestation config reloaded");
      const warned = next(CONTROL_PLANE_ANY_KEY_WARNING);
      await Deno.writeTextFile(path, config({ trustAnyKey: true, controlPlaneAnyKey: true }));
      assert.deepEqual((await watcher.reloaded(2, { signal: timeout() })).config.controlPlanes, {
        kind: "any",
      });
      assert.equal((await logged).controlPlanes, "any");
      assert.equal((await warned).level, "warn");
      assert.equal(lines.filter((l) => l.msg === CONTROL_PLANE_ANY_KEY_WARNING).length, 1);
    } finally {
      await watcher.close();
    }
  });
});

Deno.test("close() stops watching and rejects waiting callers", async () => {
  await withConfigDir(async (_dir, path) => {
    await Deno.writeTextFile(path, dummyConfig("aa"));
    const watcher = await start({ path });
    const waiting = assert.rejects(watcher.reloaded(1), { message: "attestation config watcher is closed" });
    await watcher.close();
    await waiting;
    await assert.rejects(watcher.reloaded(1), { message: "attestation config watcher is closed" });
    await watcher.close(); // idempotent

    // A second watcher on the same file proves the change was delivered; the closed one ignores it.
    const witness = await start({ path });
    try {
      await Deno.writeTextFile(path, dummyConfig("bb"));
      await witness.reloaded(1, { signal: timeout() });
      await new Promise((resolve) => setTimeout(resolve, DEBOUNCE_MS * 5));
      assert.equal(watcher.current().generation, 1);
      assert.equal(watcher.current().config.measurements.get(4)!.expected[0], 0xaa);
    } finally {
      await witness.close();
    }
  });
});

Deno.test("aborting the start signal closes the watcher; aborting a wait rejects only that wait", async () => {
  await withConfigDir(async (_dir, path) => {
    await Deno.writeTextFile(path, dummyConfig("aa"));
    const lifetime = new AbortController();
    const watcher = await start({ path, signal: lifetime.signal });
    const wait = new AbortController();
    const waiting = watcher.reloaded(1, { signal: wait.signal });
    wait.abort(new Error("gave up"));
    await assert.rejects(waiting, { message: "gave up" });
    const pending = assert.rejects(watcher.reloaded(1), { message: "attestation config watcher is closed" });
    lifetime.abort();
    await pending;
    await watcher.close(); // already closing: waits for the same shutdown
  });
});

/**
 * A validator that holds every validation until `open` is called: the
 * validations are still in flight when the config is swapped.
 */
class SlowValidator implements Validator {
  readonly #inner: Validator;
  readonly #gate: Promise<void>;

  constructor(inner: Validator, gate: Promise<void>) {
    this.#inner = inner;
    this.#gate = gate;
  }

  get variant(): string {
    return this.#inner.variant;
  }

  async validate(document: Uint8Array, reportData: Uint8Array): Promise<Verification> {
    await this.#gate;
    return await this.#inner.validate(document, reportData);
  }
}

Deno.test("validations in flight across a reload finish with the validator they started with", async () => {
  await withConfigDir(async (_dir, path) => {
    // The swapped config rejects the fixture's PCR 4, so a verdict shows which config judged it.
    const config = (pcr4: string) =>
      JSON.stringify({
        variant: "qemu-vtpm",
        measurements: { "4": pcr4 },
        akTrust: { allowedKeyDigests: [eccFixture.akDigest] },
      });
    await Deno.writeTextFile(path, config(eccFixture.pcrs["4"]));
    const watcher = await start({ path, variant: "qemu-vtpm" });
    try {
      const document = new TextEncoder().encode(JSON.stringify(eccFixture.document));
      const reportData = Uint8Array.fromHex(eccFixture.reportData);
      const gate = Promise.withResolvers<void>();
      let settled = 0;
      /** Takes the validator in force when the call starts, as the join service does for each request. */
      const validate = async () => {
        const { validator, generation } = watcher.current();
        const slow = new SlowValidator(validator, gate.promise);
        try {
          await slow.validate(document, reportData);
          return { generation, outcome: "accepted" };
        } catch (error) {
          return { generation, outcome: error instanceof AttestationError ? error.reason : String(error) };
        } finally {
          settled++;
        }
      };

      const before = Array.from({ length: 50 }, validate);
      await Deno.writeTextFile(path, config("ab".repeat(32)));
      assert.equal((await watcher.reloaded(1, { signal: timeout() })).generation, 2);
      const after = Array.from({ length: 50 }, validate);
      assert.equal(settled, 0, "every validation is still in flight after the swap");

      gate.resolve();
      const [old, fresh] = await Promise.all([Promise.all(before), Promise.all(after)]);
      assert.deepEqual(new Set(old.map((r) => `${r.generation} ${r.outcome}`)), new Set(["1 accepted"]));
      assert.deepEqual(
        new Set(fresh.map((r) => `${r.generation} ${r.outcome}`)),
        new Set(["2 measurement-mismatch"]),
      );
    } finally {
      await watcher.close();
    }
  });
});

const POLL_MS = 30;
const NO_POLL_MS = 3_600_000;

Deno.test("the periodic re-read applies a change no watch sees, and is a no-op while nothing changed", async () => {
  await withConfigDir(async (dir, _path) => {
    // The config directory is a symlink; swapping it changes the file without an event in the
    // directory the watch follows (the old target), like a file system mounted over it.
    await Deno.mkdir(`${dir}/v1`);
    await Deno.writeTextFile(`${dir}/v1/attestationConfig`, dummyConfig("aa"));
    await symlink("v1", `${dir}/config`);
    const path = `${dir}/config/attestationConfig`;
    const { logger, lines } = recordingLogger();
    const changes: number[] = [];
    const polled = await start({
      path,
      logger,
      pollIntervalMs: POLL_MS,
      onChange: (state) => changes.push(state.generation),
    });
    const unpolled = await start({ path, pollIntervalMs: NO_POLL_MS });
    try {
      // Ten re-reads of unchanged content change nothing and log nothing.
      const logged = lines.length;
      await new Promise((resolve) => setTimeout(resolve, 10 * POLL_MS));
      assert.equal(polled.current().generation, 1);
      assert.deepEqual(changes, []);
      assert.deepEqual(lines.slice(logged), []);

      await Deno.mkdir(`${dir}/v2`);
      await Deno.writeTextFile(`${dir}/v2/attestationConfig`, dummyConfig("bb"));
      await symlink("v2", `${dir}/config.tmp`);
      await Deno.rename(`${dir}/config.tmp`, `${dir}/config`);
      const state = await polled.reloaded(1, { signal: timeout() });
      assert.equal(state.generation, 2);
      assert.equal(state.config.measurements.get(4)!.expected[0], 0xbb);
      assert.deepEqual(changes, [2]);
      // Without the re-read the change stays unseen: the watch reports nothing.
      await new Promise((resolve) => setTimeout(resolve, 10 * DEBOUNCE_MS));
      assert.equal(unpolled.current().generation, 1);
    } finally {
      await polled.close();
      await unpolled.close();
    }
  });
});

Deno.test("a file that stays unreadable is reported once, not at every re-read", async () => {
  await withConfigDir(async (_dir, path) => {
    await Deno.writeTextFile(path, dummyConfig("aa"));
    const failures: Error[] = [];
    const watcher = await start({ path, pollIntervalMs: POLL_MS, onReloadError: (e) => failures.push(e) });
    try {
      await Deno.remove(path);
      // The first report may come late on a busy machine; the later re-reads must not add to it.
      const deadline = Date.now() + 10_000;
      while (failures.length === 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
      await new Promise((resolve) => setTimeout(resolve, 10 * POLL_MS));
      assert.equal(failures.length, 1);
      assert.equal((failures[0] as AttestationConfigError).reason, "unreadable");
      await Deno.writeTextFile(path, dummyConfig("bb"));
      assert.equal((await watcher.reloaded(1, { signal: timeout() })).generation, 2);
    } finally {
      await watcher.close();
    }
  });
});

Deno.test("a watch stopped by removing its directory is re-armed with backoff and delivers changes again", async () => {
  await withConfigDir(async (dir, _path) => {
    const configDir = `${dir}/config`;
    const path = `${configDir}/attestationConfig`;
    await Deno.mkdir(configDir);
    await Deno.writeTextFile(path, dummyConfig("aa"));
    const { logger, next } = recordingLogger();
    // No periodic re-read: only a watch can deliver the last change.
    const watcher = await start({ path, logger, pollIntervalMs: NO_POLL_MS });
    try {
      const stopped = next("attestation config watch stopped; re-arming it");
      const retrying = next("cannot re-arm the attestation config watch; retrying");
      await Deno.remove(configDir, { recursive: true });
      assert.equal((await stopped).reason, "the directory was removed or renamed");
      // The directory is still missing at the first attempt, so it retries after a longer wait.
      const retry = await retrying;
      assert.equal(retry.level, "warn");
      assert.equal(retry.retryInMs, 200);

      const rearmed = next("attestation config watch re-armed");
      const recovered = next("attestation config is valid again and unchanged");
      await Deno.mkdir(`${dir}/staging`);
      await Deno.writeTextFile(`${dir}/staging/attestationConfig`, dummyConfig("aa"));
      await Deno.rename(`${dir}/staging`, configDir);
      assert.equal((await rearmed).afterMs, 200);
      // The re-arm re-reads the file (changes while unwatched would be lost otherwise).
      await recovered;
      assert.equal(watcher.current().generation, 1);

      await Deno.writeTextFile(path, dummyConfig("bb"));
      const state = await watcher.reloaded(1, { signal: timeout() });
      assert.equal(state.generation, 2);
      assert.equal(state.config.measurements.get(4)!.expected[0], 0xbb);
    } finally {
      await watcher.close();
    }
  });
});
