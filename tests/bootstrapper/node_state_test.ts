/** The node state file: the reference §8.4 format byte for byte, mode 0600, atomic, read back. */
import assert from "node:assert/strict";
import {
  formatNodeState,
  NodeStateError,
  parseNodeState,
  parseRole,
  readNodeState,
  writeNodeState,
} from "../../src/bootstrapper/node_state.ts";
import { withTempDir } from "../support/temp_dir.ts";

const SALT = new TextEncoder().encode("Salt"); // "U2FsdA==", the reference's unit-test value

function withDir(test: (dir: string) => Promise<void>): Promise<void> {
  return withTempDir("node-state-", test);
}

Deno.test("node state: the exact bytes of the reference (tab indent, standard base64, no trailing newline)", () => {
  assert.equal(
    formatNodeState({ role: "ControlPlane", measurementSalt: SALT }),
    '{\n\t"Role": "ControlPlane",\n\t"MeasurementSalt": "U2FsdA=="\n}',
  );
  // Standard alphabet with padding, not base64url: 0xfb 0xff encodes with '+' and '/'.
  assert.equal(
    formatNodeState({ role: "Worker", measurementSalt: new Uint8Array([0xfb, 0xff]) }),
    '{\n\t"Role": "Worker",\n\t"MeasurementSalt": "+/8="\n}',
  );
});

Deno.test("node state: written 0600 under missing directories, read back, replaced atomically", async () => {
  await withDir(async (dir) => {
    const path = `${dir}/run/state/constellation/node_state.json`;
    const salt = crypto.getRandomValues(new Uint8Array(32));
    await writeNodeState(path, { role: "Worker", measurementSalt: salt });
    assert.equal((await Deno.stat(path)).mode! & 0o777, 0o600);
    assert.equal(await Deno.readTextFile(path), formatNodeState({ role: "Worker", measurementSalt: salt }));
    assert.deepEqual(await readNodeState(path), { role: "Worker", measurementSalt: salt });

    // A second write (a retry after a failure) replaces the file instead of failing on O_EXCL.
    await writeNodeState(path, { role: "ControlPlane", measurementSalt: SALT });
    assert.deepEqual(await readNodeState(path), { role: "ControlPlane", measurementSalt: SALT });
    assert.deepEqual(
      (await Array.fromAsync(Deno.readDir(`${dir}/run/state/constellation`))).map((e) => e.name),
      [
        "node_state.json",
      ],
    );
  });
});

Deno.test("node state: roles parse as the original's (case-insensitive, control-plane), others refused", () => {
  assert.equal(parseRole("ControlPlane"), "ControlPlane");
  assert.equal(parseRole("controlPlane"), "ControlPlane");
  assert.equal(parseRole("Control-Plane"), "ControlPlane");
  assert.equal(parseRole("worker"), "Worker");
  assert.equal(parseRole("Unknown"), undefined);
  assert.deepEqual(parseNodeState('{"Role":"control-plane","MeasurementSalt":"U2FsdA=="}'), {
    role: "ControlPlane",
    measurementSalt: SALT,
  });
});

Deno.test("node state: a missing or malformed file is a NodeStateError with its reason", async () => {
  await withDir(async (dir) => {
    await assert.rejects(readNodeState(`${dir}/absent.json`), (error) => {
      assert.ok(error instanceof NodeStateError);
      assert.equal(error.reason, "missing");
      return true;
    });
  });
  const rows: [string, string, RegExp][] = [
    ["not JSON", "{", /not valid JSON/],
    ["array", "[]", /not a JSON object/],
    ["no role", '{"MeasurementSalt":"U2FsdA=="}', /"Role" is missing/],
    ["unknown role", '{"Role":"Unknown","MeasurementSalt":"U2FsdA=="}', /unknown role "Unknown"/],
    ["no salt", '{"Role":"Worker"}', /"MeasurementSalt" is missing/],
    ["bad base64", '{"Role":"Worker","MeasurementSalt":"%%%"}', /not standard base64/],
    ["empty salt", '{"Role":"Worker","MeasurementSalt":""}', /is empty/],
  ];
  for (const [name, text, message] of rows) {
    assert.throws(() => parseNodeState(text), (error) => {
      assert.ok(error instanceof NodeStateError, name);
      assert.equal(error.reason, "malformed", name);
      assert.match(error.message, message, name);
      return true;
    });
  }
});

Deno.test("node state: an empty salt is refused before anything is written", async () => {
  await withDir(async (dir) => {
    await assert.rejects(
      writeNodeState(`${dir}/s.json`, { role: "Worker", measurementSalt: new Uint8Array() }),
      RangeError,
    );
    assert.deepEqual(await Array.fromAsync(Deno.readDir(dir)), []);
  });
});
