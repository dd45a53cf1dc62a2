/** Log collection: journalctl, else the bootstrapper's own log file; bounded; chunked. */
import assert from "node:assert/strict";
import { chunks, JournalLogs } from "../../src/bootstrapper/logs.ts";
import { recordingTool } from "../support/recording_tool.ts";

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

Deno.test("logs: journalctl's output for the bootstrapper and kubelet units, in short-iso", async () => {
  const tool = await recordingTool();
  try {
    await tool.printStdout("2024-01-01T00:00:00+0000 node bootstrapper[1]: started\n");
    const logs = new JournalLogs({ binary: tool.binary, env: tool.env(), fallbackFile: "/nonexistent" });
    assert.equal(text(await logs.collect()), "2024-01-01T00:00:00+0000 node bootstrapper[1]: started\n");
    const [call] = await tool.calls();
    assert.deepEqual(call.argv, [
      "--no-pager",
      "-o",
      "short-iso",
      "-n",
      "32768", // the default 1 MiB at 32 bytes a line: a long journal is not read whole
      "-u",
      "constellation-bootstrapper.service",
      "-u",
      "kubelet.service",
    ]);
    // Every call collects afresh (the original's collector worked once per process).
    await logs.collect();
    assert.equal((await tool.calls()).length, 2);
  } finally {
    await tool.remove();
  }
});

Deno.test("logs: falls back to the log file when journalctl fails, is missing, or has no entries", async () => {
  const tool = await recordingTool();
  const dir = await Deno.makeTempDir({ prefix: "logs-" });
  try {
    const file = `${dir}/bootstrapper.log`;
    await Deno.writeTextFile(file, '{"msg":"init failed"}\n');

    await tool.printStderr("Failed to open journal\n");
    await tool.exitWith(1);
    const failing = new JournalLogs({ binary: tool.binary, env: tool.env(), fallbackFile: file });
    const fromFile = text(await failing.collect());
    assert.match(
      fromFile,
      /^-- journalctl failed \(exit code 1\): Failed to open journal; showing .*bootstrapper\.log --\n/,
    );
    assert.ok(fromFile.endsWith('{"msg":"init failed"}\n'));

    const missing = new JournalLogs({ binary: `${dir}/no-journalctl`, fallbackFile: file });
    assert.match(
      text(await missing.collect()),
      /not allowed to run .*; showing .*\n\{"msg":"init failed"\}\n$/,
    );

    await Deno.remove(`${tool.dir}/exit`);
    await Deno.remove(`${tool.dir}/stderr`);
    await tool.printStdout("-- No entries --\n");
    const empty = new JournalLogs({ binary: tool.binary, env: tool.env(), fallbackFile: file });
    assert.match(text(await empty.collect()), /^-- the journal has no entries; showing /);
  } finally {
    await tool.remove();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("logs: with neither source, one line says why (never a rejection)", async () => {
  const logs = new JournalLogs({
    binary: "/nonexistent/journalctl",
    fallbackFile: "/nonexistent/bootstrapper.log",
  });
  assert.match(
    text(await logs.collect()),
    /^-- no logs: not allowed to run .*journalctl.*; .*bootstrapper\.log does not exist --\n$/,
  );
  assert.match(text(await new JournalLogs({ binary: "/nonexistent/journalctl" }).collect()), /^-- no logs: /);
});

Deno.test("logs: bounded to the newest maxBytes, from the journal and from the file", async () => {
  const tool = await recordingTool();
  const dir = await Deno.makeTempDir({ prefix: "logs-" });
  try {
    await tool.printStdout(`${"old line\n".repeat(1000)}newest\n`);
    const journal = new JournalLogs({ binary: tool.binary, env: tool.env(), maxBytes: 16 });
    const bounded = await journal.collect();
    assert.equal(bounded.length, 16);
    assert.ok(text(bounded).endsWith("newest\n"));

    const file = `${dir}/bootstrapper.log`;
    await Deno.writeTextFile(file, `${"x".repeat(100_000)}tail-of-file`);
    const fallback = new JournalLogs({ binary: `${dir}/none`, fallbackFile: file, maxBytes: 12 });
    assert.ok(text(await fallback.collect()).endsWith("--\ntail-of-file"));
  } finally {
    await tool.remove();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("logs: an aborted collection rejects with the signal's reason", async () => {
  const tool = await recordingTool();
  try {
    await tool.sleep(30);
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("client went away")), 100);
    const logs = new JournalLogs({ binary: tool.binary, env: tool.env(), fallbackFile: "/nonexistent" });
    await assert.rejects(logs.collect({ signal: controller.signal }), /client went away/);
  } finally {
    await tool.remove();
  }
});

Deno.test("chunks: consecutive pieces of the given size, the last shorter; none for empty input", () => {
  const bytes = Uint8Array.from({ length: 10 }, (_, i) => i);
  assert.deepEqual(chunks(bytes, 4).map((piece) => [...piece]), [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]);
  assert.deepEqual(chunks(new Uint8Array(), 4), []);
  assert.equal(chunks(new Uint8Array(64 * 1024 + 1)).length, 2);
  assert.throws(() => chunks(bytes, 0), RangeError);
});
