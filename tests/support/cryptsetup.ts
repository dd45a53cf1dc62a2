/**
 * cryptsetup for tests: preparing LUKS2 containers on files as the
 * disk-mapper would, and checking which key opens them.
 *
 * @module
 */

/** Runs cryptsetup with `args`; throws with its stderr on failure. */
export async function cryptsetup(args: string[], stdin?: Uint8Array): Promise<Deno.CommandOutput> {
  const child = new Deno.Command("cryptsetup", {
    args,
    clearEnv: true,
    stdin: stdin ? "piped" : "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (stdin) {
    const writer = child.stdin.getWriter();
    await writer.write(stdin);
    await writer.close();
  }
  const output = await child.output();
  if (!output.success) throw new Error(`cryptsetup ${args[0]}: ${new TextDecoder().decode(output.stderr)}`);
  return output;
}

/** Whether `key` opens the LUKS2 container `disk` (`cryptsetup open --test-passphrase`). */
export async function diskOpensWith(disk: string, key: Uint8Array): Promise<boolean> {
  return await cryptsetup(["open", "--test-passphrase", "--key-file=-", disk], key).then(
    () => true,
    () => false,
  );
}
