/**
 * cryptsetup for tests: preparing LUKS2 containers on files as the
 * disk-mapper would, and checking which key opens them.
 *
 * @module
 */

/** Cheap key derivation for throwaway disks (production keeps cryptsetup's argon2id). */
export const FAST_PBKDF: readonly string[] = ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"];

/**
 * Formats `device` (a regular file; with `header`, a detached header file) as
 * the disk-mapper leaves a fresh state disk: LUKS2, the first-boot passphrase
 * from `initialKeyFile` in keyslot 0, token 0 saying not initialized.
 */
export async function formatStateDisk(
  device: string,
  initialKeyFile: string,
  options: { header?: string } = {},
): Promise<void> {
  const target = options.header ? ["--header", options.header, device] : [device];
  await cryptsetup([
    "luksFormat",
    "--type",
    "luks2",
    "--batch-mode",
    ...FAST_PBKDF,
    "--key-file",
    initialKeyFile,
    ...target,
  ]);
  await cryptsetup(
    ["token", "import", "--token-id", "0", ...target],
    new TextEncoder().encode('{"type":"constellation-state-disk","keyslots":[],"diskIsInitialized":false}'),
  );
}

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
