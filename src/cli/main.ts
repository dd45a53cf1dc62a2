/**
 * The operator's CLI (`deno task cli …`, or `dist/cli`): `init` initializes
 * a cluster on its first node, `verify` checks a node's attestation,
 * `recover` brings back a control plane no join service can rejoin, or
 * derives a node's disk key from the master secret (see
 * flags.ts for the command line).
 *
 * Exit status: 0 on success, 1 on a failure (one line `cli: <what to fix>`
 * on stderr, no stack trace), 2 on a bad command line. Ctrl-C cancels.
 *
 * Permissions: the `cli` permission set of deno.json: reading and writing
 * files the operator names (not `/proc`, `/sys`, `/dev`), the network to
 * nodes, and only the `NO_COLOR` environment variable; no
 * subprocesses.
 *
 * @module
 */
import { commandLine } from "../flags/flags.ts";
import { CliError, errorLine } from "./errors.ts";
import { CLI_USAGE, type CliCommand, parseCliArgs } from "./flags.ts";
import { createWarningLogger } from "./warning_logger.ts";

/** Exit status of a failure. */
export const EXIT_FAILURE = 1;

const encoder = new TextEncoder();

function printStdout(line: string): void {
  Deno.stdout.writeSync(encoder.encode(`${line}\n`));
}

/** Runs the CLI with `args`; resolves to the exit status. */
export async function main(args: string[]): Promise<number> {
  const parsed = commandLine(args, { component: "cli", usage: CLI_USAGE, parse: parseCliArgs });
  if (typeof parsed === "number") return parsed;
  const interrupt = new AbortController();
  const onSigint = () => interrupt.abort(new Error("interrupted"));
  Deno.addSignalListener("SIGINT", onSigint);
  try {
    return await run(parsed, interrupt.signal);
  } catch (error) {
    const message = error instanceof CliError ? error.message : `unexpected error: ${errorLine(error)}`;
    Deno.stderr.writeSync(encoder.encode(`cli: ${message}\n`));
    return EXIT_FAILURE;
  } finally {
    Deno.removeSignalListener("SIGINT", onSigint);
  }
}

async function run(parsed: CliCommand, signal: AbortSignal): Promise<number> {
  const logger = createWarningLogger();
  switch (parsed.command) {
    case "init": {
      const [{ runInit }, { createProgress }] = await Promise.all([
        import("./init.ts"),
        import("./progress.ts"),
      ]);
      await runInit(parsed.init, { progress: createProgress(), logger, print: printStdout, signal });
      return 0;
    }
    case "verify": {
      const [{ readAttestationConfigFile }, { renderVerifyJson }, { verifyEvidenceFile, verifyNode }, {
        renderVerifyTable,
        useColor,
      }] = await Promise.all([
        import("./attestation_config_file.ts"),
        import("../verification/report.ts"),
        import("./verify.ts"),
        import("./verify_report.ts"),
      ]);
      const loaded = await readAttestationConfigFile(parsed.attestationConfig);
      const options = { logger, signal: AbortSignal.any([signal, AbortSignal.timeout(parsed.timeoutMs)]) };
      const result = "evidenceFile" in parsed.source
        ? await verifyEvidenceFile(parsed.source.evidenceFile, loaded, options)
        : await verifyNode(parsed.source.node, loaded, options);
      const text = parsed.output === "json"
        ? renderVerifyJson(result)
        : renderVerifyTable(result, useColor(Deno.stdout, Deno.env.get("NO_COLOR")));
      Deno.stdout.writeSync(encoder.encode(text));
      return result.passed ? 0 : EXIT_FAILURE;
    }
    case "recover": {
      const { runRecover } = await import("./recover.ts");
      await runRecover(parsed.recover, printStdout);
      return 0;
    }
    case "recover-node": {
      const { runRecoverNode } = await import("./recover.ts");
      await runRecoverNode(parsed.recover, { logger, print: printStdout, signal });
      return 0;
    }
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
