import assert from "node:assert/strict";
import {
  AttestationConfigWatcher,
  type AttestationConfigWatcherOptions,
} from "../../src/attestation/watcher.ts";
import { AttestationConfigError } from "../../src/attestation/config.ts";
import { measurementsDigest, parseMeasurements } from "../../src/attestation/measurements.ts";
import { DummyIssuer } from "../../src/attestation/dummy.ts";
import type { Validator } from "../../src/attestation/attestation.ts";
import { createLogger, silentLogger } from "../../src/log/logger.ts";

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
      assert.equal(error.code, "unreadable");
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
      assert.equal(state.digest, measurementsDigest(parseMeasurements({ "4": "aa".repeat(32) })));
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
      assert.equal(after.digest, measurementsDigest(parseMeasurements({ "4": "bb".repeat(32) })));
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
      assert.equal(logged.code, "invalid-config");

      failed = errors.next();
      await Deno.remove(path);
      error = await failed;
      assert.ok(error instanceof AttestationConfigError);
      assert.equal(error.code, "unreadable");
      assert.equal(watcher.current(), good);

      failed = errors.next();
      await Deno.writeTextFile(path, '{"variant":"qemu-vtpm"}');
      assert.equal((await failed as AttestationConfigError).code, "variant-mismatch");
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
      assert.equal((await failed as AttestationConfigError).code, "invalid-json");
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

Deno.test("validations run concurrently across a reload and all complete", async () => {
  await withConfigDir(async (_dir, path) => {
    await Deno.writeTextFile(path, dummyConfig("aa"));
    const watcher = await start({ path });
    try {
      const issuer = new DummyIssuer(silentLogger);
      const reportData = crypto.getRandomValues(new Uint8Array(32));
      const evidence = await issuer.issue(reportData);
      const inFlight: Promise<{ generation: number; validator: Validator; variant: string }>[] = [];
      const validate = () => {
        // Each call takes the validator in force when it starts, as the join service does.
        const { validator, generation } = watcher.current();
        inFlight.push(
          validator.validate(evidence, reportData).then((v) => ({
            generation,
            validator,
            variant: v.variant,
          })),
        );
      };

      const first = watcher.current().validator;
      for (let i = 0; i < 200; i++) validate();
      let reloaded = false;
      const reload = watcher.reloaded(1, { signal: timeout() }).then(() => (reloaded = true));
      await Deno.writeTextFile(path, dummyConfig("bb"));
      while (!reloaded) {
        validate();
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
      await reload;
      for (let i = 0; i < 200; i++) validate();

      const results = await Promise.all(inFlight);
      assert.ok(results.length >= 400);
      assert.ok(results.every((r) => r.variant === "dummy"));
      const generations = new Set(results.map((r) => r.generation));
      assert.deepEqual([...generations].sort(), [1, 2]);
      // Validations of both generations used their own validator, and the old one still works after the swap.
      assert.equal(new Set(results.map((r) => r.validator)).size, 2);
      assert.equal((await first.validate(evidence, reportData)).variant, "dummy");
    } finally {
      await watcher.close();
    }
  });
});
