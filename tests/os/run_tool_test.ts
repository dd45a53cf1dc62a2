import assert from "node:assert/strict";
import { runTool } from "../../src/os/run_tool.ts";
import { recordingTool } from "../support/recording_tool.ts";

Deno.test("runTool: the captured output is bounded to its last maxOutputBytes", async (t) => {
  const rows: {
    name: string;
    maxOutputBytes: number;
    stdout: string;
    stderr?: string;
    redact?: string[];
    expect: { stdout: string; stdoutBytes: string; stderr: string; truncated: boolean };
  }[] = [
    {
      name: "output within the bound is whole",
      maxOutputBytes: 8,
      stdout: "one\ntwo\n",
      expect: { stdout: "one\ntwo\n", stdoutBytes: "one\ntwo\n", stderr: "", truncated: false },
    },
    {
      name: "longer stdout keeps its end; the text starts at a whole line",
      maxOutputBytes: 19,
      stdout: `${"old line\n".repeat(10_000)}newest\n`,
      expect: {
        stdout: "old line\nnewest\n",
        stdoutBytes: "ne\nold line\nnewest\n",
        stderr: "",
        truncated: true,
      },
    },
    {
      name: "longer stderr keeps its end too",
      maxOutputBytes: 25,
      stdout: "",
      stderr: `${"warning\n".repeat(10_000)}fatal: failed\n`,
      expect: { stdout: "", stdoutBytes: "", stderr: "warning\nfatal: failed\n", truncated: true },
    },
    {
      name: "a secret split by the cut does not show",
      maxOutputBytes: 38,
      stdout: `token abcdef.0123456789abcdef\n${"x".repeat(20)}\n`,
      redact: ["abcdef.0123456789abcdef"],
      expect: {
        stdout: `${"x".repeat(20)}\n`,
        stdoutBytes: `0123456789abcdef\n${"x".repeat(20)}\n`,
        stderr: "",
        truncated: true,
      },
    },
  ];
  for (const row of rows) {
    await t.step(row.name, async () => {
      const tool = await recordingTool();
      try {
        await tool.printStdout(row.stdout);
        if (row.stderr !== undefined) await tool.printStderr(row.stderr);
        const output = await runTool(tool.binary, [], {
          env: tool.env(),
          maxOutputBytes: row.maxOutputBytes,
          redact: row.redact,
        });
        assert.deepEqual(
          {
            stdout: output.stdout,
            stdoutBytes: new TextDecoder().decode(output.stdoutBytes),
            stderr: output.stderr,
            truncated: output.truncated,
          },
          row.expect,
        );
      } finally {
        await tool.remove();
      }
    });
  }
});
