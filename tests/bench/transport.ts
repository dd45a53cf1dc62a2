/**
 * RPC transport benchmark (part of `deno task bench`): the hardened server
 * (`serveRpc`) against the server as it was before (`baseline`: node:http2
 * and connect-node, unguarded, unlimited), both serving the key service's
 * routes from their own process (`transport_server.ts`), in one run:
 *
 * 1. crash rate under the randomized hostile-HTTP/2 fuzzer;
 * 2. throughput, latency and the server's CPU time per call of gRPC calls
 *    from connect-node clients (the server's from /proc: with the client in
 *    this process, calls/s measures the client as much as the server);
 * 3. the key service client's per-call latency, one connection per call (as
 *    it was) against one reused connection (as it is);
 * 4. the HTTP stack over TLS: the server's CPU time per call of `serveRpc`
 *    (node:http2, gRPC) against `Deno.serve` (hyper) with Connect's fetch
 *    handler (Connect protocol) and against `Deno.serve` answering fixed
 *    bytes (the HTTP stack alone), from raw `node:http2` clients.
 *
 * @module
 */
import * as http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { concatBytes } from "../../src/bytes/concat.ts";
import { createClient } from "@connectrpc/connect";
import { API, GetDataKeyRequestSchema } from "../../src/gen/kms/kms_pb.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import { fuzz } from "../support/hostile_h2.ts";
import { type RunningService, startService } from "../../src/os/service_process.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";
import { percentile } from "./stats.ts";
import { processCpuSeconds } from "../support/process_stats.ts";
import { createTestCa, issueLoopbackServerCert, type TestCert } from "../support/pki.ts";
import { GrpcUnaryClient } from "./grpc_unary_client.ts";
import { grpcMessage } from "../support/h2_frames.ts";

type Mode = "baseline" | "hardened";
type StackMode = "hardened" | "deno-serve" | "deno-serve-bytes";
const MODES: Mode[] = ["baseline", "hardened"];

/** Starts `transport_server.ts` in `mode`, serving TLS with `tls` when given. */
function startServer(mode: Mode | StackMode, tls?: TestCert): Promise<RunningService> {
  return startService("deno", [
    "run",
    "--allow-net=127.0.0.1",
    "--allow-env=BENCH_TLS_CERT,BENCH_TLS_KEY",
    "--no-prompt",
    "tests/bench/transport_server.ts",
    mode,
  ], {
    readyMatch: /^\{"port":(\d+)\}$/,
    cwd: REPO_ROOT,
    env: tls ? { BENCH_TLS_CERT: tls.certPem, BENCH_TLS_KEY: tls.keyPem } : {},
  });
}

const message = toBinary(
  GetDataKeyRequestSchema,
  create(GetDataKeyRequestSchema, { dataKeyId: "fuzz", length: 32 }),
);
const hasExited = (server: RunningService) =>
  Promise.race([
    server.status.then(() => true),
    new Promise<boolean>((r) => setTimeout(() => r(false), 200)),
  ]);

console.log(
  `RPC transport: ${Deno.build.os}, ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}`,
);

// 1. Crash rate: fresh processes, each fuzzed with its own seed until it dies or the rounds run out.
const RUNS = 5;
const ROUNDS = 300;
console.log(`\n1. randomized hostile HTTP/2 (${RUNS} fresh processes × up to ${ROUNDS} connections each)`);
console.log("server     crashed  connections survived per process");
for (const mode of MODES) {
  let crashed = 0;
  const survived: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    const server = await startServer(mode);
    const target = {
      hostname: "127.0.0.1",
      port: server.port,
      tls: false as const,
      path: "/kms.API/GetDataKey",
      message,
    };
    let rounds = 0;
    for (; rounds < ROUNDS; rounds += 20) {
      if (await fuzz(target, { rounds: 20, seed: 1000 * run + rounds }) > 0 || await hasExited(server)) break;
    }
    if (await hasExited(server)) crashed++;
    survived.push(rounds);
    await server.stop("SIGKILL");
  }
  console.log(`${mode.padEnd(10)} ${`${crashed}/${RUNS}`.padStart(7)}  ${survived.join(", ")}`);
}

// 2. Throughput and latency, both servers measured back to back.
const CALLS = 4000;
console.log(`\n2. gRPC GetDataKey, ${CALLS} calls per row (connect-node clients in this process)`);
console.log(
  "connections  in flight  server     calls/s  p50 ms  p99 ms  vs baseline  server CPU ms/call  vs baseline",
);
for (
  const { connections, concurrency } of [{ connections: 1, concurrency: 1 }, {
    connections: 1,
    concurrency: 16,
  }, {
    connections: 8,
    concurrency: 64,
  }]
) {
  const rates: Record<string, number> = {};
  const cpuPerCall: Record<string, number> = {};
  for (const mode of MODES) {
    const server = await startServer(mode);
    const pool = Array.from(
      { length: connections },
      () => connectRpc({ baseUrl: `http://127.0.0.1:${server.port}` }),
    );
    const clients = pool.map((connection) => createClient(API, connection.transport));
    const latencies: number[] = [];
    const call = async (i: number) => {
      const start = performance.now();
      await clients[i % clients.length].getDataKey({ dataKeyId: "bench", length: 32 });
      latencies.push(performance.now() - start);
    };
    for (let i = 0; i < 200; i++) await call(i); // warm-up
    latencies.length = 0;
    let next = 0;
    const cpuBefore = await processCpuSeconds(server.pid);
    const start = performance.now();
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (next < CALLS) await call(next++);
    }));
    const perSecond = CALLS / ((performance.now() - start) / 1000);
    rates[mode] = perSecond;
    cpuPerCall[mode] = (await processCpuSeconds(server.pid) - cpuBefore) * 1000 / CALLS;
    latencies.sort((a, b) => a - b);
    console.log(
      `${String(connections).padStart(11)}  ${String(concurrency).padStart(9)}  ${mode.padEnd(9)} ${
        perSecond.toFixed(0).padStart(8)
      }  ${percentile(latencies, 0.5).toFixed(2).padStart(6)}  ${
        percentile(latencies, 0.99).toFixed(2).padStart(6)
      }  ${(perSecond / rates.baseline).toFixed(2).padStart(10)}  ${
        cpuPerCall[mode].toFixed(3).padStart(18)
      }  ${(cpuPerCall[mode] / cpuPerCall.baseline).toFixed(2).padStart(11)}`,
    );
    for (const connection of pool) connection.close();
    await server.stop();
  }
}

// 3. The key service client: a connection per call (as before) against one reused connection.
const SEQUENTIAL = 500;
console.log(`\n3. key service client, ${SEQUENTIAL} sequential calls against the hardened server`);
console.log("client                      p50 ms  p99 ms  mean ms  vs per-call connection");
{
  const server = await startServer("hardened");
  const baseUrl = `http://127.0.0.1:${server.port}`;
  const measure = async (call: () => Promise<unknown>) => {
    for (let i = 0; i < 50; i++) await call();
    const latencies: number[] = [];
    for (let i = 0; i < SEQUENTIAL; i++) {
      const start = performance.now();
      await call();
      latencies.push(performance.now() - start);
    }
    latencies.sort((a, b) => a - b);
    return {
      p50: percentile(latencies, 0.5),
      p99: percentile(latencies, 0.99),
      mean: latencies.reduce((a, b) => a + b) / latencies.length,
    };
  };
  const perCall = await measure(async () => {
    using connection = connectRpc({ baseUrl });
    await createClient(API, connection.transport).getDataKey({ dataKeyId: "bench", length: 32 });
  });
  using reused = connectRpc({ baseUrl });
  const reusedClient = createClient(API, reused.transport);
  const kept = await measure(() => reusedClient.getDataKey({ dataKeyId: "bench", length: 32 }));
  for (
    const [name, figures] of [["connection per call (before)", perCall], [
      "reused connection (now)",
      kept,
    ]] as const
  ) {
    console.log(
      `${name.padEnd(27)} ${figures.p50.toFixed(2).padStart(6)}  ${figures.p99.toFixed(2).padStart(6)}  ${
        figures.mean.toFixed(2).padStart(7)
      }  ${(figures.mean / perCall.mean).toFixed(2).padStart(22)}`,
    );
  }
  await server.stop();
}

// 4. The HTTP stack over TLS, each server's CPU time per call; raw node:http2 clients in this process.
const STACK_CALLS = 4000;
console.log(
  `\n4. the HTTP stack over TLS, GetDataKey, ${STACK_CALLS} calls per row (raw node:http2 clients)`,
);
console.log("connections  in flight  server             protocol  calls/s  server CPU ms/call  vs serveRpc");
{
  const ca = await createTestCa();
  const tls = await issueLoopbackServerCert(ca);
  const path = "/kms.API/GetDataKey";
  const stacks: [StackMode, string][] = [
    ["hardened", "gRPC"],
    ["deno-serve", "Connect"],
    ["deno-serve-bytes", "bytes"],
  ];
  for (const [connections, concurrency] of [[1, 16], [8, 64]]) {
    let serveRpcCpu = NaN;
    for (const [mode, protocol] of stacks) {
      const server = await startServer(mode, tls);
      const url = `https://127.0.0.1:${server.port}`;
      const sessions = Array.from({ length: connections }, () => {
        if (mode === "hardened") {
          const client = new GrpcUnaryClient(url, ca.certPem, 30_000);
          return { call: () => client.call(path, grpcMessage(message)), close: () => client.close() };
        }
        const session = http2.connect(url, { ca: ca.certPem });
        session.on("error", () => {});
        return { call: () => connectUnaryCall(session, path, message), close: () => session.close() };
      });
      let next = 0;
      const run = (calls: number) => {
        next = 0;
        return Promise.all(Array.from({ length: concurrency }, async (_, i) => {
          while (next++ < calls) await sessions[i % connections].call();
        }));
      };
      await run(500); // warm-up
      const cpuBefore = await processCpuSeconds(server.pid);
      const start = performance.now();
      await run(STACK_CALLS);
      const perSecond = STACK_CALLS / ((performance.now() - start) / 1000);
      const cpuPerCall = (await processCpuSeconds(server.pid) - cpuBefore) * 1000 / STACK_CALLS;
      if (mode === "hardened") serveRpcCpu = cpuPerCall;
      console.log(
        `${String(connections).padStart(11)}  ${String(concurrency).padStart(9)}  ${mode.padEnd(17)}  ${
          protocol.padEnd(8)
        }  ${perSecond.toFixed(0).padStart(7)}  ${cpuPerCall.toFixed(3).padStart(18)}  ${
          (cpuPerCall / serveRpcCpu).toFixed(2).padStart(11)
        }`,
      );
      for (const session of sessions) session.close();
      await server.stop();
    }
  }
}

/** One Connect-protocol unary call of `message` to `path` on `session`; resolves to the answer's bytes. */
function connectUnaryCall(
  session: http2.ClientHttp2Session,
  path: string,
  body: Uint8Array,
): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/proto",
      "connect-protocol-version": "1",
      "connect-timeout-ms": "30000",
    });
    let status = 0;
    const chunks: Uint8Array[] = [];
    stream.on("response", (headers) => status = Number(headers[":status"]));
    stream.on("data", (chunk: Uint8Array) => chunks.push(chunk));
    stream.on("error", reject);
    stream.on("close", () => {
      const answer = concatBytes(...chunks);
      if (status !== 200 || answer.byteLength === 0) {
        reject(new Error(`HTTP ${status}, ${answer.byteLength} bytes`));
      } else resolve(answer);
    });
    stream.end(body);
  });
}
