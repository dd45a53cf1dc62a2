/**
 * The `openssl` command line, for checks against an independent X.509
 * implementation.
 *
 * @module
 */

/** What `openssl` printed and how it exited. */
export interface OpensslResult {
  code: number;
  stdout: Uint8Array<ArrayBuffer>;
  /** Standard error and standard output as text, for assertion messages. */
  output: string;
}

/** Runs `openssl <args>` with `stdin`; resolves whatever the exit code. */
export async function openssl(args: string[], stdin: string | Uint8Array = ""): Promise<OpensslResult> {
  const child = new Deno.Command("openssl", { args, stdin: "piped", stdout: "piped", stderr: "piped" })
    .spawn();
  const writer = child.stdin.getWriter();
  await writer.write(typeof stdin === "string" ? new TextEncoder().encode(stdin) : stdin);
  await writer.close();
  const { code, stdout, stderr } = await child.output();
  const decoder = new TextDecoder();
  return { code, stdout, output: decoder.decode(stderr) + decoder.decode(stdout) };
}

/** Runs `openssl <args>`, which must exit 0; resolves to its standard output. */
export async function opensslOk(
  args: string[],
  stdin: string | Uint8Array = "",
): Promise<Uint8Array<ArrayBuffer>> {
  const result = await openssl(args, stdin);
  if (result.code !== 0) throw new Error(`openssl ${args.join(" ")}: ${result.output}`);
  return result.stdout;
}

/**
 * `openssl verify` of `certPem` against `caPem` for a purpose ("sslclient",
 * "sslserver"): whether OpenSSL accepts the certificate for it, and its
 * output.
 */
export async function opensslVerify(
  caPem: string,
  certPem: string,
  purpose: "sslclient" | "sslserver",
): Promise<OpensslResult> {
  const dir = await Deno.makeTempDir({ prefix: "openssl-verify-" });
  try {
    await Deno.writeTextFile(`${dir}/ca.pem`, caPem);
    await Deno.writeTextFile(`${dir}/cert.pem`, certPem);
    return await openssl(["verify", "-CAfile", `${dir}/ca.pem`, "-purpose", purpose, `${dir}/cert.pem`]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
