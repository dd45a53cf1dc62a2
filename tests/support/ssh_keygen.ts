/** The real `ssh-keygen`, for tests that check SSH keys and certificates with OpenSSH itself. */

/** Runs ssh-keygen in UTC; returns stdout, or throws with stderr. */
export async function sshKeygen(args: string[]): Promise<string> {
  const { code, stdout, stderr } = await new Deno.Command("ssh-keygen", {
    args,
    env: { TZ: "UTC" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  if (code !== 0) throw new Error(`ssh-keygen ${args.join(" ")}: ${decoder.decode(stderr).trim()}`);
  return decoder.decode(stdout);
}
