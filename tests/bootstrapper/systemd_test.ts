/** Starting units through a configurable systemctl (a recording stand-in here). */
import assert from "node:assert/strict";
import { Systemctl, SystemctlError } from "../../src/bootstrapper/systemd.ts";
import { recordingTool } from "../support/recording_tool.ts";

Deno.test("systemctl: start runs `<binary> start <unit>` with exactly the given environment", async () => {
  const tool = await recordingTool();
  try {
    await new Systemctl({ binary: tool.binary, env: tool.env() }).start("kubelet.service");
    const [call] = await tool.calls();
    assert.deepEqual(call.argv, ["start", "kubelet.service"]);
    // Nothing inherited from the test process: only what was passed (and what bash exports itself: PWD, SHLVL, _).
    assert.deepEqual(Object.keys(call.env).filter((name) => !["PWD", "SHLVL", "_"].includes(name)), [
      "RECORDING_TOOL_DIR",
    ]);
  } finally {
    await tool.remove();
  }
});

Deno.test("systemctl: a failed start is a SystemctlError with the exit code and stderr", async () => {
  const tool = await recordingTool();
  try {
    await tool.printStderr(
      "Job for kubelet.service failed because the control process exited with error code.\n",
    );
    await tool.exitWith(1);
    await assert.rejects(
      new Systemctl({ binary: tool.binary, env: tool.env() }).start("kubelet.service"),
      (error) => {
        assert.ok(error instanceof SystemctlError);
        assert.equal(error.reason, "failed");
        assert.equal(error.exitCode, 1);
        assert.match(
          error.message,
          /starting kubelet\.service: .* start failed \(exit code 1\): Job for kubelet/,
        );
        return true;
      },
    );
  } finally {
    await tool.remove();
  }
});

Deno.test("systemctl: a binary outside --allow-run is reason not-permitted; an abort kills it", async () => {
  // The test permission set allows only listed binaries, so an unlisted path fails the permission check
  // before the file system is asked (a listed but absent binary would be "not-found").
  await assert.rejects(
    new Systemctl({ binary: "/nonexistent/systemctl" }).start("kubelet.service"),
    (error) => {
      assert.ok(error instanceof SystemctlError);
      assert.equal(error.reason, "not-permitted");
      assert.match(error.message, /--allow-run=\/nonexistent\/systemctl/);
      return true;
    },
  );
  const tool = await recordingTool();
  try {
    await tool.sleep(30);
    const controller = new AbortController();
    const started = Date.now();
    setTimeout(() => controller.abort(), 100);
    await assert.rejects(
      new Systemctl({ binary: tool.binary, env: tool.env() }).start("kubelet.service", {
        signal: controller.signal,
      }),
      (error) => {
        assert.ok(error instanceof SystemctlError);
        assert.equal(error.reason, "aborted");
        return true;
      },
    );
    assert.ok(Date.now() - started < 10_000);
  } finally {
    await tool.remove();
  }
});

Deno.test("systemctl: a unit name that would read as a flag is refused", async () => {
  await assert.rejects(new Systemctl().start("--force"), RangeError);
  await assert.rejects(new Systemctl().start(""), RangeError);
});
