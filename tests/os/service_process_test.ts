/**
 * Stopping a service process (a real `sh`): a process that ignores the
 * signal it is sent is killed after the grace given.
 */
import assert from "node:assert/strict";
import { startService } from "../../src/os/service_process.ts";

Deno.test("stop with killAfterMs: a process that ignores SIGTERM is killed once the grace is over", async () => {
  // An ignored signal stays ignored across exec: `sleep` ignores SIGTERM.
  const service = await startService("sh", ["-c", 'trap "" TERM; echo "ready port=1"; exec sleep 30'], {
    readyMatch: /ready port=(\d+)/,
  });
  const started = Date.now();
  const status = await service.stop("SIGTERM", { killAfterMs: 300 });
  assert.equal(status.signal, "SIGKILL");
  assert.ok(Date.now() - started >= 250, "it waited for the grace first");
});
