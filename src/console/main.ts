/**
 * The browser console, `dist/console` (`deno task build`; `deno task
 * console` builds it and runs it): serves the page built beside it
 * (`console-web/`, see `page.ts`) on 127.0.0.1 (`server.ts`):
 *
 * - the node attestation inspector: a node's evidence, fetched and verified
 *   in the browser with the validators and the verification report the CLI
 *   and the join service use;
 * - the join service dashboard: its status, counters and recent decisions,
 *   live;
 * - with `--local-cluster <state-dir>`, the local cluster's nodes and their
 *   phases (and the cluster's attestation config, loaded into the inspector).
 *
 * The page calls the nodes' and join services' browser ports itself; they
 * must allow its origin (`--cors-allow-origin http://127.0.0.1:<port>`, which
 * the local cluster sets for the default port).
 *
 * Permissions: the `console` permission set of deno.json: read any file but
 * those under /proc, /sys and /dev (its page, wherever the artifact lies, and
 * the local cluster's state directory it is given); listen on loopback;
 * nothing else (it writes no file and runs no program).
 *
 * @module
 */
import { isIP } from "node:net";
import { resolve } from "node:path";
import { commandLine, parseFlags, parsePort, UsageError } from "../flags/flags.ts";
import { DEFAULT_CONSOLE_PORT } from "./address.ts";
import { pageDirBeside } from "./page.ts";
import { serveConsole } from "./server.ts";

/** The console's settings. */
export interface ConsoleFlags {
  /** Port to listen on. */
  port: number;
  /** Loopback address to listen on. */
  listenAddress: string;
  /** A local cluster's state directory, when pointed at one. */
  localCluster?: string;
}

/** The console's "listening" line (tests and scripts wait for it); its first group is the port. */
export const CONSOLE_LISTENING = /"msg":"listening".*"port":(\d+)/;

/** Usage text for `--help`. */
export const CONSOLE_USAGE = `Usage: console [flags]

Serves the browser console on this machine: the node attestation inspector
(evidence verified in the browser), the join service dashboard and, pointed
at a local cluster, its nodes' phases.

Flags:
  --port <port>              port (default ${DEFAULT_CONSOLE_PORT}); the nodes and join services must
                             allow the page's origin, http://127.0.0.1:<port>
                             (--cors-allow-origin; the local cluster allows the default)
  --listen-address <addr>    a loopback address (default 127.0.0.1): the page verifies
                             evidence with WebCrypto, which browsers give only to secure
                             contexts such as http://127.0.0.1
  --local-cluster <dir>      a local cluster's state directory (e.g. .dev/cluster): show its
                             nodes and load its attestation config
  --help                     show this help
`;

/** Parses the command line; "help" for `--help`. Throws {@linkcode UsageError}. */
export function parseConsoleFlags(args: string[]): ConsoleFlags | "help" {
  const values = parseFlags(args, {
    port: { type: "string", default: String(DEFAULT_CONSOLE_PORT) },
    "listen-address": { type: "string", default: "127.0.0.1" },
    "local-cluster": { type: "string" },
    help: { type: "boolean", default: false },
  }, "console");
  if (values.help) return "help";
  const listenAddress = values["listen-address"];
  if (!isLoopback(listenAddress)) {
    throw new UsageError(
      `invalid --listen-address "${listenAddress}": want a loopback address such as 127.0.0.1 (browsers give WebCrypto only to secure contexts)`,
    );
  }
  const localCluster = values["local-cluster"];
  if (localCluster === "") throw new UsageError("--local-cluster must not be empty");
  return {
    port: parsePort(values.port),
    listenAddress,
    ...(localCluster === undefined ? {} : { localCluster: resolve(localCluster) }),
  };
}

function isLoopback(address: string): boolean {
  return (isIP(address) === 4 && address.startsWith("127.")) || address === "::1";
}

/** Runs the console with command-line `args`; resolves to the exit status. */
export async function main(args: string[]): Promise<number> {
  const flags = commandLine(args, { component: "console", usage: CONSOLE_USAGE, parse: parseConsoleFlags });
  if (typeof flags === "number") return flags;
  const print = (line: string) => console.error(line);
  const dir = pageDirBeside(import.meta.url);
  // Said at start, not as a 404 in the browser: run from source, nothing is built beside this module.
  if (!await isFile(`${dir}/index.html`)) {
    print(
      `console: no page in ${dir}/: run the built console (deno task build, then dist/console; deno task console does both)`,
    );
    return 1;
  }
  const server = await serveConsole({
    dir,
    hostname: flags.listenAddress,
    port: flags.port,
    localCluster: flags.localCluster,
  });
  // One JSON line, like the services' "listening" line (tests and scripts wait for it).
  print(
    JSON.stringify({
      msg: "listening",
      url: server.url,
      port: server.port,
      localCluster: flags.localCluster,
    }),
  );
  print(`Console: ${server.url}  (Ctrl-C stops it)`);
  const stop = Promise.withResolvers<void>();
  const onSignal = () => stop.resolve();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  await stop.promise;
  Deno.removeSignalListener("SIGINT", onSignal);
  Deno.removeSignalListener("SIGTERM", onSignal);
  await server.close();
  return 0;
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(path)).isFile;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
