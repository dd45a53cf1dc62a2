/**
 * The real key service process: started with `deno run -P=key-service`,
 * called over gRPC, the Connect protocol and gRPC-Web (connect-node, HTTP/2)
 * and with `buf curl`, failing at startup, and stopping gracefully.
 */
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import {
  API,
  GetDataKeyRequestSchema,
  type GetDataKeyResponse,
  GetDataKeyResponseSchema,
} from "../../src/gen/kms/kms_pb.ts";
import { createKeyServiceClient } from "../../src/keyservice/client.ts";
import { connectRpc, type RpcProtocol } from "../../src/rpc/client.ts";
import { guardHttp2Teardown } from "../../src/rpc/http2_guard.ts";
import { deriveClusterId } from "../../src/kms/keys.ts";
import { runToExit } from "../../src/os/service_process.ts";
import {
  CHAINED_EXAMPLE,
  CONSTELLATION_VECTORS,
  fromHex,
  HKDF_ZERO,
  type HkdfVector,
} from "../kms/vectors.ts";
import {
  KEY_SERVICE_LISTENING,
  REPO_ROOT,
  runKeyServiceToExit,
  startKeyService,
  writeSecrets,
} from "./key_service_process.ts";
import { expectConnectError } from "../support/connect_error.ts";

const ZERO_UUID = "00000000-0000-0000-0000-000000000000";

/** Calls GetDataKey with `buf curl`; returns its exit code and output. */
function bufCurl(port: number, protocol: "grpc" | "connect", request: object) {
  return runToExit("buf", [
    "curl",
    "--schema",
    "proto",
    "--protocol",
    protocol,
    "--http2-prior-knowledge",
    "--data",
    JSON.stringify(request),
    `http://127.0.0.1:${port}/kms.API/GetDataKey`,
  ], { cwd: REPO_ROOT });
}

/** Calls GetDataKey over HTTP/2 with `protocol`, on its own connection. */
async function callWith(
  protocol: RpcProtocol,
  port: number,
  dataKeyId: string,
  length: number,
): Promise<Uint8Array> {
  using connection = connectRpc({ baseUrl: `http://127.0.0.1:${port}`, protocol });
  const client = createClient(API, connection.transport);
  return (await client.getDataKey({ dataKeyId, length })).dataKey;
}

async function assertInvalidArgument(call: Promise<unknown>, message: string) {
  await expectConnectError(call, Code.InvalidArgument, message);
}

const TOO_LONG = "can't derive key with length 8161: the maximum is 8160 bytes";

Deno.test("the key service process serves the HKDFZero disk key to every client", async (t) => {
  const keyService = await startKeyService({ masterSecret: new Uint8Array(32), salt: new Uint8Array(32) });
  const { port, stderrLines } = keyService.service;
  try {
    await t.step("its listening line names the bound address and port", () => {
      const listening = JSON.parse(stderrLines.find((line) => KEY_SERVICE_LISTENING.test(line))!);
      assert.equal(listening.component, "key-service");
      assert.equal(listening.level, "info");
      assert.equal(listening.address, "127.0.0.1");
      assert.equal(listening.port, port);
    });

    await t.step("gRPC (the typed client)", async () => {
      using client = createKeyServiceClient({ endpoint: `127.0.0.1:${port}`, timeoutMs: 5000 });
      assert.equal((await client.getDataKey(ZERO_UUID, 32)).toHex(), HKDF_ZERO.output);
      await assertInvalidArgument(client.getDataKey(ZERO_UUID, 0), "can't derive key with length zero");
      await assertInvalidArgument(client.getDataKey("", 32), "no data key ID specified");
      await assertInvalidArgument(client.getDataKey(ZERO_UUID, 8161), TOO_LONG);
    });

    await t.step("the Connect protocol and gRPC-Web over HTTP/2", async () => {
      for (const protocol of ["connect", "grpc-web"] as const) {
        assert.equal((await callWith(protocol, port, ZERO_UUID, 32)).toHex(), HKDF_ZERO.output);
        await assertInvalidArgument(
          callWith(protocol, port, ZERO_UUID, 0),
          "can't derive key with length zero",
        );
        await assertInvalidArgument(callWith(protocol, port, "", 32), "no data key ID specified");
        await assertInvalidArgument(callWith(protocol, port, ZERO_UUID, 8161), TOO_LONG);
      }
    });

    await t.step("buf curl, gRPC and Connect with HTTP/2 prior knowledge", async () => {
      for (const protocol of ["grpc", "connect"] as const) {
        const ok = await bufCurl(port, protocol, { dataKeyId: ZERO_UUID, length: 32 });
        assert.equal(ok.code, 0, ok.stderrLines.join("\n"));
        const { dataKey } = JSON.parse(ok.stdoutLines.join("\n"));
        assert.equal(Uint8Array.fromBase64(dataKey).toHex(), HKDF_ZERO.output);

        for (
          const [request, message] of [
            [{ dataKeyId: ZERO_UUID, length: 0 }, "can't derive key with length zero"],
            [{ dataKeyId: "", length: 32 }, "no data key ID specified"],
            [{ dataKeyId: ZERO_UUID, length: 8161 }, TOO_LONG],
          ] as const
        ) {
          const failed = await bufCurl(port, protocol, request);
          assert.notEqual(failed.code, 0);
          const error = JSON.parse(failed.stderrLines.join("\n"));
          assert.deepEqual(
            error,
            { code: "invalid_argument", message },
            `${protocol} ${JSON.stringify(request)}`,
          );
        }
      }
    });

    await t.step("it logs each call's key ID and length at debug, never a key", () => {
      const calls = stderrLines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === "GetDataKey");
      assert.ok(calls.length >= 20, `${calls.length} call lines`);
      assert.ok(
        calls.some((entry) => entry.keyId === ZERO_UUID && entry.length === 32 && entry.level === "debug"),
      );
      const key = fromHex(HKDF_ZERO.output);
      for (const line of stderrLines) {
        assert.ok(!line.includes(HKDF_ZERO.output) && !line.includes(key.toBase64()), line);
      }
    });
  } finally {
    assert.equal((await keyService.close()).code, 0);
  }
});

Deno.test("the key service process derives every test vector", async (t) => {
  const idOf = (vector: HkdfVector) => new TextDecoder().decode(vector.info).slice("key-".length);
  for (const vector of CONSTELLATION_VECTORS) {
    await t.step(vector.name, async () => {
      const keyService = await startKeyService({ masterSecret: vector.secret, salt: vector.salt });
      try {
        using client = createKeyServiceClient({ endpoint: `127.0.0.1:${keyService.service.port}` });
        assert.equal((await client.getDataKey(idOf(vector), vector.length)).toHex(), vector.output);
      } finally {
        assert.equal((await keyService.close()).code, 0);
      }
    });
  }

  await t.step("the chained example: measurement secret, cluster ID, disk key", async () => {
    const { masterSecret, masterSalt } = CHAINED_EXAMPLE;
    const keyService = await startKeyService({ masterSecret, salt: masterSalt });
    try {
      using client = createKeyServiceClient({ endpoint: `127.0.0.1:${keyService.service.port}` });
      const measurementSecret = await client.getDataKey("measurementSecret", 32);
      assert.equal(measurementSecret.toHex(), CHAINED_EXAMPLE.measurementSecret);
      const clusterId = await deriveClusterId(measurementSecret, CHAINED_EXAMPLE.measurementSalt);
      assert.equal(clusterId.toHex(), CHAINED_EXAMPLE.clusterId);
      assert.equal((await client.getDataKey(CHAINED_EXAMPLE.diskUuid, 32)).toHex(), CHAINED_EXAMPLE.diskKey);
    } finally {
      assert.equal((await keyService.close()).code, 0);
    }
  });

  await t.step("the shortest accepted secrets: 16-byte master secret, 32-byte salt", async () => {
    const keyService = await startKeyService({
      masterSecret: new Uint8Array(16).fill(1),
      salt: new Uint8Array(32),
    });
    try {
      using client = createKeyServiceClient({ endpoint: `127.0.0.1:${keyService.service.port}` });
      assert.equal((await client.getDataKey("some-disk", 32)).length, 32);
    } finally {
      assert.equal((await keyService.close("SIGINT")).code, 0, "SIGINT stops it gracefully too");
    }
  });
});

Deno.test("the key service process refuses to start without usable secrets, in one line, before listening", async () => {
  const ok = await writeSecrets({ masterSecret: new Uint8Array(32), salt: new Uint8Array(32) });
  const short = await writeSecrets({ masterSecret: new Uint8Array(15), salt: new Uint8Array(31) });
  const missing = `${ok.dir}/absent`;
  const cliFile = `${ok.dir}/master-secret.json`;
  const cliKey = new Uint8Array(32).fill(9).toBase64();
  await Deno.writeTextFile(
    cliFile,
    JSON.stringify({ key: cliKey, salt: new Uint8Array(32).toBase64() }) + "\n",
  );
  // The Secret's value as `kubectl get -o yaml` shows it, saved with a line break.
  const base64File = `${ok.dir}/mastersecret.b64`;
  await Deno.writeTextFile(base64File, `${cliKey}\n`);
  try {
    const cases: { name: string; allowRead: string[]; flags: string[]; file: string; problem: RegExp }[] = [
      {
        name: "a master secret shorter than 16 bytes",
        allowRead: [short.masterSecretPath, ok.saltPath],
        flags: ["--master-secret", short.masterSecretPath, "--salt", ok.saltPath],
        file: short.masterSecretPath,
        problem: /too short: 15 bytes, want at least 16/,
      },
      {
        name: "a salt shorter than 32 bytes",
        allowRead: [ok.masterSecretPath, short.saltPath],
        flags: ["--master-secret", ok.masterSecretPath, "--salt", short.saltPath],
        file: short.saltPath,
        problem: /too short: 31 bytes, want at least 32/,
      },
      {
        name: "a missing master secret file",
        allowRead: [ok.dir],
        flags: ["--master-secret", missing, "--salt", ok.saltPath],
        file: missing,
        problem: /does not exist/,
      },
      {
        name: "the CLI's JSON master secret file where the raw secret goes",
        allowRead: [cliFile, ok.saltPath],
        flags: ["--master-secret", cliFile, "--salt", ok.saltPath],
        file: cliFile,
        problem: /is the CLI's master secret file .* reads raw bytes/,
      },
      {
        name: "a line of base64 text where the raw secret goes",
        allowRead: [base64File, ok.saltPath],
        flags: ["--master-secret", base64File, "--salt", ok.saltPath],
        file: base64File,
        problem: /holds a line of base64 text, not raw bytes: decode it first/,
      },
      {
        name: "the same file as master secret and salt",
        allowRead: [ok.saltPath],
        flags: ["--master-secret", ok.saltPath, "--salt", ok.saltPath],
        file: ok.saltPath,
        problem: /--master-secret .* and --salt .* are the same file/,
      },
      {
        name: "a master secret outside the permission set",
        allowRead: [ok.saltPath],
        flags: ["--master-secret", ok.masterSecretPath, "--salt", ok.saltPath],
        file: ok.masterSecretPath,
        problem: /outside this process's read permissions/,
      },
    ];
    await Promise.all(cases.map(async ({ name, allowRead, flags, file, problem }) => {
      const result = await runKeyServiceToExit(allowRead, flags);
      const output = `${name}: ${result.stderrLines.join("\n")}`;
      assert.equal(result.code, 1, output);
      assert.equal(result.stderrLines.length, 1, output);
      const entry = JSON.parse(result.stderrLines[0]);
      assert.equal(entry.level, "error", output);
      assert.ok(entry.msg.includes(file), output);
      assert.match(entry.msg, problem, output);
      assert.ok(!output.includes(cliKey), "the secret is not echoed");
    }));
  } finally {
    await Deno.remove(ok.dir, { recursive: true });
    await Deno.remove(short.dir, { recursive: true });
  }
});

Deno.test("the key service process rejects a bad command line with status 2 and explains --help", async () => {
  const [unknown, negativePort, badAddress, help] = await Promise.all([
    runKeyServiceToExit([], ["--verbose"]),
    runKeyServiceToExit([], ["--port", "-1"]),
    runKeyServiceToExit([], ["--listen-address", "nonsense"]),
    runKeyServiceToExit([], ["--help"]),
  ]);
  assert.equal(unknown.code, 2);
  assert.deepEqual(unknown.stderrLines, ["key-service: unknown flag --verbose (see --help)"]);
  assert.equal(negativePort.code, 2);
  assert.deepEqual(negativePort.stderrLines, [
    'key-service: invalid --port "-1": want a number from 0 to 65535 (see --help)',
  ]);
  // Not a permission problem: the address is refused before anything asks for permission to bind it.
  assert.equal(badAddress.code, 2);
  assert.deepEqual(badAddress.stderrLines, [
    'key-service: invalid --listen-address "nonsense": want an IP address, e.g. 0.0.0.0, 127.0.0.1 or :: (see --help)',
  ]);
  assert.equal(help.code, 0);
  assert.match(help.stdoutLines.join("\n"), /^Usage: key-service \[flags\]/);
  assert.deepEqual(help.stderrLines, []);
});

Deno.test("the key service process finishes a call in flight on SIGTERM, then exits 0", async () => {
  const keyService = await startKeyService({ masterSecret: new Uint8Array(32), salt: new Uint8Array(32) });
  const { service } = keyService;
  // A raw client session that gets the server's GOAWAY with streams open: guarded like every session.
  guardHttp2Teardown();
  const session = http2.connect(`http://127.0.0.1:${service.port}`);
  const calls: GrpcCall[] = [];
  try {
    // A call whose request is only half sent stays in flight on the server.
    const inFlight = startGrpcCall(session, "in-flight");
    calls.push(inFlight);
    inFlight.stream.write(inFlight.frame.subarray(0, 3));
    // A complete call after it on the same connection: once it is answered, the server has
    // read every frame before it, so it has opened the in-flight call.
    const probe = startGrpcCall(session, ZERO_UUID);
    calls.push(probe);
    probe.stream.end(probe.frame);
    assert.equal((await probe.response).dataKey.toHex(), HKDF_ZERO.output);

    const exited = service.stop("SIGTERM");
    await service.waitForLine(/"msg":"shutting down"/, 5000);
    inFlight.stream.end(inFlight.frame.subarray(3));
    assert.equal((await inFlight.response).dataKey.length, 32);
    assert.equal((await exited).code, 0);

    const log = service.stderrLines.map((line) => JSON.parse(line));
    // The probe ran before the signal; the in-flight call completed after it, before the stop.
    assert.deepEqual(log.slice(-4).map((entry) => [entry.msg, entry.keyId ?? null]), [
      ["GetDataKey", ZERO_UUID],
      ["shutting down", null],
      ["GetDataKey", "in-flight"],
      ["stopped", null],
    ]);
  } finally {
    session.destroy();
    await Promise.allSettled(calls.map((call) => call.response));
    await keyService.close();
  }
});

/** A raw gRPC GetDataKey call on an HTTP/2 session; the test sends `frame` (the length-prefixed request). */
interface GrpcCall {
  stream: http2.ClientHttp2Stream;
  frame: Uint8Array;
  /** The response message; rejects unless grpc-status is 0. */
  response: Promise<GetDataKeyResponse>;
}

function startGrpcCall(session: http2.ClientHttp2Session, dataKeyId: string): GrpcCall {
  const message = toBinary(
    GetDataKeyRequestSchema,
    create(GetDataKeyRequestSchema, { dataKeyId, length: 32 }),
  );
  const frame = new Uint8Array(5 + message.length);
  new DataView(frame.buffer).setUint32(1, message.length);
  frame.set(message, 5);
  const stream = session.request({
    ":method": "POST",
    ":path": "/kms.API/GetDataKey",
    "content-type": "application/grpc+proto",
    te: "trailers",
  });
  const response = new Promise<GetDataKeyResponse>((resolve, reject) => {
    const chunks: Uint8Array[] = [];
    let status = "";
    stream.on("data", (chunk: Uint8Array) => chunks.push(chunk));
    stream.on("trailers", (trailers) => status = String(trailers["grpc-status"]));
    stream.on("error", reject);
    stream.on("close", () => {
      if (status !== "0") return reject(new Error(`grpc-status ${status || "missing"}`));
      const body = new Uint8Array(chunks.reduce((n, chunk) => n + chunk.length, 0));
      chunks.reduce((offset, chunk) => (body.set(chunk, offset), offset + chunk.length), 0);
      resolve(fromBinary(GetDataKeyResponseSchema, body.subarray(5)));
    });
  });
  return { stream, frame, response };
}
