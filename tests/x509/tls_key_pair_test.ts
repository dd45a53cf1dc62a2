/**
 * readTlsKeyPair() on real certificates and keys made by openssl: every
 * key format Deno's TLS reads is accepted with its certificate; anything a
 * TLS handshake would fail on is refused, naming the file and the problem.
 */
import assert from "node:assert/strict";
import * as tls from "node:tls";
import type { AddressInfo } from "node:net";
import { readTlsKeyPair, TlsKeyPairError } from "../../src/x509/tls_key_pair.ts";
import { SecretFileError } from "../../src/secrets/secret_file.ts";

async function openssl(args: string[], cwd: string): Promise<void> {
  const output = await new Deno.Command("openssl", { args, cwd, stdout: "null", stderr: "piped" }).output();
  if (!output.success) throw new Error(`openssl ${args[0]}: ${new TextDecoder().decode(output.stderr)}`);
}

/** Writes `<name>.crt` and `<name>.key` (PKCS#8) in `dir` for an openssl `-newkey` argument. */
async function selfSigned(dir: string, name: string, newkey: string[]): Promise<void> {
  await openssl([
    "req",
    "-x509",
    ...newkey,
    "-nodes",
    "-subj",
    `/CN=${name}`,
    "-days",
    "1",
    "-keyout",
    `${name}.key`,
    "-out",
    `${name}.crt`,
  ], dir);
}

/** Whether a TLS server with `cert` and `key` completes a handshake with a client (that trusts anything). */
async function handshakes(cert: string, key: string): Promise<boolean> {
  const server = tls.createServer({ cert, key }, (socket) => socket.end());
  server.on("tlsClientError", () => {});
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    return await new Promise<boolean>((resolve) => {
      const socket = tls.connect({
        port: (server.address() as AddressInfo).port,
        host: "127.0.0.1",
        rejectUnauthorized: false,
      });
      socket.once("secureConnect", () => (socket.destroy(), resolve(true)));
      socket.once("error", () => (socket.destroy(), resolve(false)));
    });
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
}

const EC_P256 = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];

Deno.test("readTlsKeyPair() accepts each key format and type that TLS serves with", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "tls-key-pair-test-" });
  try {
    await selfSigned(dir, "p256", EC_P256);
    await selfSigned(dir, "p384", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"]);
    await selfSigned(dir, "rsa", ["-newkey", "rsa:2048"]);
    await selfSigned(dir, "ed25519", ["-newkey", "ed25519"]);
    // The traditional formats: SEC1 "EC PRIVATE KEY" (after its "EC PARAMETERS" block, as
    // `openssl ecparam -genkey` writes it) and PKCS#1 "RSA PRIVATE KEY".
    await openssl(["ecparam", "-name", "prime256v1", "-out", "p256-sec1.key"], dir);
    await openssl(["ec", "-in", "p256.key", "-out", "p256-sec1-only.key"], dir);
    await Deno.writeTextFile(
      `${dir}/p256-sec1.key`,
      await Deno.readTextFile(`${dir}/p256-sec1-only.key`),
      { append: true },
    );
    await openssl(["rsa", "-in", "rsa.key", "-traditional", "-out", "rsa-pkcs1.key"], dir);
    // A chain: the serving certificate first, then its issuer.
    await Deno.writeTextFile(
      `${dir}/p256-chain.crt`,
      (await Deno.readTextFile(`${dir}/p256.crt`)) + (await Deno.readTextFile(`${dir}/rsa.crt`)),
    );

    for (
      const [cert, key] of [
        ["p256.crt", "p256.key"],
        ["p384.crt", "p384.key"],
        ["rsa.crt", "rsa.key"],
        ["ed25519.crt", "ed25519.key"],
        ["p256.crt", "p256-sec1.key"],
        ["rsa.crt", "rsa-pkcs1.key"],
        ["p256-chain.crt", "p256.key"],
      ]
    ) {
      await t.step(`${cert} with ${key}`, async () => {
        const pair = await readTlsKeyPair({ certFile: `${dir}/${cert}`, keyFile: `${dir}/${key}` });
        assert.equal(pair.cert, await Deno.readTextFile(`${dir}/${cert}`));
        assert.equal(pair.key, await Deno.readTextFile(`${dir}/${key}`));
        assert.ok(await handshakes(pair.cert, pair.key), "a TLS server serves with them");
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("readTlsKeyPair() refuses what TLS cannot serve with, naming the flag, file and problem", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "tls-key-pair-test-" });
  try {
    await selfSigned(dir, "p256", EC_P256);
    await selfSigned(dir, "other", EC_P256);
    await selfSigned(dir, "k1", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:secp256k1"]);
    await selfSigned(dir, "ed448", ["-newkey", "ed448"]);
    await selfSigned(dir, "pss", ["-newkey", "rsa-pss"]);
    await openssl([
      "pkcs8",
      "-topk8",
      "-in",
      "p256.key",
      "-out",
      "encrypted.key",
      "-passout",
      "pass:secret",
    ], dir);
    await Deno.writeTextFile(`${dir}/garbage`, "this is not PEM\n");
    await Deno.writeTextFile(
      `${dir}/bad-cert.crt`,
      `-----BEGIN CERTIFICATE-----\n${btoa("not a certificate")}\n-----END CERTIFICATE-----\n`,
    );
    await Deno.writeTextFile(
      `${dir}/bad-key.key`,
      `-----BEGIN EC PRIVATE KEY-----\n${btoa("not a key")}\n-----END EC PRIVATE KEY-----\n`,
    );

    const cases: [string, string, string, string][] = [
      [
        "a missing certificate",
        "absent.crt",
        "p256.key",
        `--tls-cert file ${dir}/absent.crt: does not exist`,
      ],
      ["a missing key", "p256.crt", "absent.key", `--tls-key file ${dir}/absent.key: does not exist`],
      [
        "no PEM in the certificate file",
        "garbage",
        "p256.key",
        `--tls-cert file ${dir}/garbage: no PEM CERTIFICATE block`,
      ],
      [
        "a key file given as the certificate",
        "p256.key",
        "p256.key",
        `--tls-cert file ${dir}/p256.key: no PEM CERTIFICATE block`,
      ],
      [
        "a CERTIFICATE block that is not a certificate",
        "bad-cert.crt",
        "p256.key",
        `--tls-cert file ${dir}/bad-cert.crt: the CERTIFICATE block is not a valid X.509 certificate`,
      ],
      [
        "no PEM in the key file",
        "p256.crt",
        "garbage",
        `--tls-key file ${dir}/garbage: no PEM private key block (want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)`,
      ],
      [
        "the certificate given as the key",
        "p256.crt",
        "p256.crt",
        `--tls-key file ${dir}/p256.crt: no PEM private key block (want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)`,
      ],
      [
        "a key block that is not a key",
        "p256.crt",
        "bad-key.key",
        `--tls-key file ${dir}/bad-key.key: the EC PRIVATE KEY block is not a valid private key`,
      ],
      [
        "an encrypted key",
        "p256.crt",
        "encrypted.key",
        `--tls-key file ${dir}/encrypted.key: the key is encrypted; give it unencrypted`,
      ],
      [
        "another certificate's key",
        "p256.crt",
        "other.key",
        `--tls-key file ${dir}/other.key is not the key of the certificate in --tls-cert file ${dir}/p256.crt`,
      ],
      [
        "a curve TLS cannot sign with",
        "k1.crt",
        "k1.key",
        `--tls-key file ${dir}/k1.key: unsupported key type EC secp256k1 (TLS here takes ECDSA P-256, P-384 or P-521, RSA, or Ed25519)`,
      ],
      [
        "an Ed448 key",
        "ed448.crt",
        "ed448.key",
        `--tls-key file ${dir}/ed448.key: unsupported key type ed448 (TLS here takes ECDSA P-256, P-384 or P-521, RSA, or Ed25519)`,
      ],
      [
        "an RSA-PSS key",
        "pss.crt",
        "pss.key",
        `--tls-key file ${dir}/pss.key: unsupported key type rsa-pss (TLS here takes ECDSA P-256, P-384 or P-521, RSA, or Ed25519)`,
      ],
    ];
    await t.step(
      "the refused key types do fail every handshake (so refusing them at start is right)",
      async () => {
        for (const name of ["k1", "ed448", "pss"]) {
          const [cert, key] = [
            await Deno.readTextFile(`${dir}/${name}.crt`),
            await Deno.readTextFile(`${dir}/${name}.key`),
          ];
          assert.equal(await handshakes(cert, key), false, name);
        }
      },
    );
    const keyText = await Deno.readTextFile(`${dir}/other.key`);
    for (const [name, cert, key, message] of cases) {
      await t.step(name, async () => {
        await assert.rejects(
          readTlsKeyPair({
            certFile: `${dir}/${cert}`,
            keyFile: `${dir}/${key}`,
            certName: "--tls-cert",
            keyName: "--tls-key",
          }),
          (err) => {
            assert.ok(err instanceof TlsKeyPairError || err instanceof SecretFileError, String(err));
            assert.equal((err as Error).message, message);
            assert.ok(!(err as Error).message.includes(keyText.split("\n")[1]), "no key bytes");
            return true;
          },
        );
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
