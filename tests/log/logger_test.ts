/**
 * The JSON-lines logger (`src/log/logger.ts`): a line's `time`, `level` and
 * `msg` are the logger's own. Fields are the caller's extra data; one named
 * like them (from the call, `with`, or the logger's base fields) must not
 * make a line say another level, message or time than the one it was logged
 * with, or a warning could pass for an error, an error for debug output.
 */
import assert from "node:assert/strict";
import { createLogger, type LogFields, type Logger, parseLogLevel } from "../../src/log/logger.ts";

const NOW = Date.parse("2024-05-06T07:08:09.010Z");
const FORGED = { time: "1999-01-01T00:00:00.000Z", level: "error", msg: "forged message" };

/** A debug-level logger writing into `lines`, its base fields `fields`, on a fixed clock. */
function recording(fields?: LogFields) {
  const lines: string[] = [];
  const logger = createLogger({ level: "debug", write: (line) => lines.push(line), fields, now: () => NOW });
  return { logger, lines };
}

Deno.test("a field named time, level or msg does not override the logger's own", async (t) => {
  const rows: {
    name: string;
    log: (logger: Logger, fields: LogFields) => void;
    level: string;
    base?: LogFields;
  }[] = [
    { name: "in the call's fields (debug)", log: (l, f) => l.debug("real message", f), level: "debug" },
    { name: "in the call's fields (info)", log: (l, f) => l.info("real message", f), level: "info" },
    {
      name: "in the call's fields (warn)",
      log: (l, f) => l.warn("real message", { ...f, level: "debug" }),
      level: "warn",
    },
    {
      name: "in the call's fields (error)",
      log: (l, f) => l.error("real message", { ...f, level: "info" }),
      level: "error",
    },
    { name: "in with()'s fields", log: (l, f) => l.with(f).info("real message"), level: "info" },
    {
      name: "in with()'s fields, twice nested",
      log: (l, f) => l.with({ component: "x" }).with(f).warn("real message"),
      level: "warn",
    },
    {
      name: "in the logger's base fields",
      log: (l) => l.debug("real message"),
      level: "debug",
      base: FORGED,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      const { logger, lines } = recording(row.base);
      row.log(logger, { ...FORGED, other: "kept" });
      assert.equal(lines.length, 1);
      const line = JSON.parse(lines[0]);
      assert.equal(line.level, row.level, lines[0]);
      assert.equal(line.msg, "real message", lines[0]);
      assert.equal(line.time, new Date(NOW).toISOString(), lines[0]);
      if (row.base === undefined) assert.equal(line.other, "kept", lines[0]);
    });
  }
});

Deno.test("a line is one JSON object with the logger's time, level and msg, and the caller's fields", () => {
  const { logger, lines } = recording({ component: "test" });
  logger.with({ request: 7 }).info("hello", { error: new Error("boom"), big: 12n });
  assert.equal(lines.length, 1);
  assert.deepEqual(JSON.parse(lines[0]), {
    time: "2024-05-06T07:08:09.010Z",
    level: "info",
    msg: "hello",
    component: "test",
    request: 7,
    error: "boom",
    big: "12",
  });
});

Deno.test("lines below the logger's level are not written", () => {
  const lines: string[] = [];
  const logger = createLogger({ level: parseLogLevel("warn"), write: (line) => lines.push(line) });
  logger.debug("d");
  logger.info("i");
  logger.warn("w");
  logger.error("e");
  assert.deepEqual(lines.map((line) => JSON.parse(line).msg), ["w", "e"]);
});
