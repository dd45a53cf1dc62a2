/**
 * The command lines the simulator understands: exactly the kubeadm
 * invocations of the original bootstrapper (reference §6.3, §6.9), with
 * kubeadm's (pflag's) flag syntax, plus the simulator's own `--root`.
 *
 * @module
 */
import { KubeadmSimError } from "./errors.ts";

/** The kubeadm commands the simulator runs. */
export type Command =
  | "init phase preflight"
  | "init phase certs all"
  | "init"
  | "kubeconfig user"
  | "join";

/** Every command, in the order the bootstrapper runs them. */
export const COMMANDS: readonly Command[] = [
  "init phase preflight",
  "init phase certs all",
  "init",
  "kubeconfig user",
  "join",
];

/** A parsed command line. */
export interface Invocation {
  /** The kubeadm command. */
  command: Command;
  /** The node's filesystem root (`--root`); undefined when not given. */
  root?: string;
  /** `--config`. */
  configPath?: string;
  /** `--skip-phases` (init and join). */
  skipPhases: string[];
  /** `--client-name` (kubeconfig user). */
  clientName?: string;
  /** `--org`, repeatable and comma-separated (kubeconfig user). */
  orgs: string[];
  /** `-v`/`--v`: klog verbosity. */
  verbosity: number;
}

type FlagName = "config" | "root" | "v" | "skip-phases" | "client-name" | "org";

/** The flags of each command (`root` is the simulator's and allowed everywhere). */
const commandFlags: Record<Command, FlagName[]> = {
  "init phase preflight": ["config", "v"],
  "init phase certs all": ["config", "v"],
  "init": ["config", "v", "skip-phases"],
  "kubeconfig user": ["config", "v", "client-name", "org"],
  "join": ["config", "v", "skip-phases"],
};

/** Splits `--root` (which may come anywhere) from the kubeadm arguments. */
export function takeRoot(argv: readonly string[]): { root?: string; rest: string[] } {
  const rest: string[] = [];
  let root: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--root") {
      if (i + 1 >= argv.length) throw new KubeadmSimError("usage", "flag needs an argument: --root");
      root = argv[++i];
    } else if (arg.startsWith("--root=")) {
      root = arg.slice("--root=".length);
    } else {
      rest.push(arg);
    }
  }
  return { root, rest };
}

/** Parses a command line; throws {@linkcode KubeadmSimError} with kubeadm's wording for what it would refuse. */
export function parseArgs(argv: readonly string[]): Invocation {
  const { root, rest } = takeRoot(argv);
  const words = rest.filter((arg) => !arg.startsWith("-"));
  const command = COMMANDS.find((c) => {
    const parts = c.split(" ");
    return parts.every((part, i) => words[i] === part);
  });
  if (!command) throw unknownCommand(words);

  const invocation: Invocation = { command, root, skipPhases: [], orgs: [], verbosity: 0 };
  const allowed = new Set(commandFlags[command]);
  const positional: string[] = [];
  let commandWords = command.split(" ").length;
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i];
    if (!arg.startsWith("-") || arg === "-") {
      if (commandWords > 0) commandWords--;
      else positional.push(arg);
      continue;
    }
    const match = /^(--?)([^=]+)(?:=(.*))?$/.exec(arg)!;
    const [, dashes, rawName, inline] = match;
    const name = rawName as FlagName;
    if (dashes === "-" && name !== "v") {
      throw new KubeadmSimError("usage", `unknown shorthand flag: '${rawName[0]}' in ${arg}`);
    }
    if (!allowed.has(name)) {
      throw new KubeadmSimError("usage", `unknown flag: ${dashes === "-" ? arg : `--${rawName}`}`);
    }
    let value = inline;
    if (value === undefined) {
      if (i + 1 >= rest.length) {
        throw new KubeadmSimError("usage", `flag needs an argument: ${dashes}${rawName}`);
      }
      value = rest[++i];
    }
    switch (name) {
      case "config":
        invocation.configPath = value;
        break;
      case "v": {
        const verbosity = Number(value);
        if (!Number.isInteger(verbosity)) {
          throw new KubeadmSimError(
            "usage",
            `invalid argument "${value}" for "-v, --v" flag: strconv.ParseInt: parsing "${value}": invalid syntax`,
          );
        }
        invocation.verbosity = verbosity;
        break;
      }
      case "skip-phases":
        invocation.skipPhases.push(...value.split(",").filter((p) => p !== ""));
        break;
      case "client-name":
        invocation.clientName = value;
        break;
      case "org":
        invocation.orgs.push(...value.split(",").filter((o) => o !== ""));
        break;
    }
  }
  if (positional.length > 0) {
    throw new KubeadmSimError("usage", `can not mix '--config' with arguments [${positional.join(" ")}]`);
  }
  if (command === "kubeconfig user" && !invocation.clientName) {
    throw new KubeadmSimError("usage", `required flag(s) "client-name" not set`);
  }
  if (invocation.configPath === undefined) {
    throw new KubeadmSimError(
      "usage",
      `kubeadm-sim: ${command} needs --config: the simulator takes every setting from the configuration file`,
    );
  }
  return invocation;
}

function unknownCommand(words: string[]): KubeadmSimError {
  if (words.length === 0) {
    return new KubeadmSimError("usage", "kubeadm-sim: no command given (want init, join or kubeconfig user)");
  }
  const known = new Set(COMMANDS.map((c) => c.split(" ")[0]));
  if (!known.has(words[0])) {
    return new KubeadmSimError("usage", `unknown command "${words[0]}" for "kubeadm"`);
  }
  return new KubeadmSimError(
    "usage",
    `kubeadm-sim does not implement "kubeadm ${words.join(" ")}" (it runs: ${COMMANDS.join(", ")})`,
  );
}
