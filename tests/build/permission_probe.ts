/**
 * A probe the permission matrix runs through a built launcher in place of
 * its bundle, so it runs under exactly that artifact's permission flags
 * (tests/build/permission_matrix_test.ts). It tries one operation and prints
 * one JSON line: `{"permitted":true,"outcome":"ok"}`, or with `outcome` the
 * name of the error that ended it. Only `NotCapable` (Deno's permission
 * check, made before the operation touches anything) counts as not
 * permitted: a missing file (`NotFound`) was permitted to be looked at.
 *
 * ```sh
 * <launcher> read <path>           # stat, then read the file or list the directory
 * <launcher> write <path>          # create a new file and remove it again
 * <launcher> run <program> [args]  # run it to its end
 * <launcher> connect <host> <port> # open a TCP connection and close it
 * <launcher> env <name>            # read an environment variable
 * <launcher> tls <port> <ca>       # fetch https://localhost:<port>/ trusting the CA whose PEM is <ca>, base64
 * ```
 *
 * It imports nothing, so it runs with `--no-config` from anywhere.
 *
 * @module
 */

/** Performs the operation `args` names. */
async function attempt(args: string[]): Promise<void> {
  const [operation, target, ...rest] = args;
  switch (operation) {
    case "read": {
      if ((await Deno.stat(target)).isDirectory) {
        for await (const _ of Deno.readDir(target)) break;
      } else {
        await Deno.readFile(target);
      }
      return;
    }
    case "write": {
      await Deno.writeTextFile(target, "permission probe\n", { createNew: true });
      await Deno.remove(target);
      return;
    }
    case "run": {
      await new Deno.Command(target, { args: rest, stdin: "null", stdout: "null", stderr: "null" }).output();
      return;
    }
    case "connect": {
      const connection = await Deno.connect({ hostname: target, port: Number(rest[0]) });
      connection.close();
      return;
    }
    case "env": {
      Deno.env.get(target);
      return;
    }
    case "tls": {
      // Deno adds caCerts to its root store: what else is trusted is the store the launcher left.
      const client = Deno.createHttpClient({ caCerts: [atob(rest[0])] });
      try {
        await (await fetch(`https://localhost:${target}/`, { client })).body?.cancel();
      } finally {
        client.close();
      }
      return;
    }
    default:
      throw new TypeError(`unknown probe operation ${JSON.stringify(operation)}`);
  }
}

try {
  await attempt(Deno.args);
  console.log(JSON.stringify({ permitted: true, outcome: "ok" }));
} catch (error) {
  const name = error instanceof Error ? error.name : "Error";
  const message = error instanceof Error ? error.message : String(error);
  console.log(JSON.stringify({ permitted: name !== "NotCapable", outcome: name, message }));
}
