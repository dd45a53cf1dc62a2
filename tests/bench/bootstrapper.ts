/**
 * Bootstrapper benchmark (part of `deno task bench`), on the real processes
 * of tests/support/bootstrap_cluster.ts (swtpm, LUKS2 on a file, the
 * recording kubeadm, the fake API server, the real key and join services):
 *
 * 1. init overhead excluding kubeadm: the CLI side's time from its first
 *    call (GetAttestation) to the first kubeadm invocation, plus the
 *    bootstrapper's time between kubeadm invocations, plus the time from
 *    kubeadm's last exit to the opened kubeconfig; as a ratio against the
 *    kubeadm time of the same init (the recording kubeadm, a fast stand-in);
 * 2. the join client's time from ticket received to kubeadm invoked (lock,
 *    PCR 15, disk passphrase, files), as a ratio against the time it took
 *    to get the ticket (challenge, quote, attested request) in the same join.
 *
 * Every round is a fresh cluster (a node can be initialized once).
 *
 * @module
 */
import { initCluster } from "../../src/init/client.ts";
import { connectRpc } from "../../src/rpc/client.ts";
import { startBootstrapCluster } from "../support/bootstrap_cluster.ts";
import { percentile } from "./stats.ts";

const ROUNDS = 3;

interface Round {
  beforeKubeadmMs: number;
  betweenKubeadmMs: number;
  afterKubeadmMs: number;
  kubeadmInitMs: number;
  ticketMs: number;
  ticketToKubeadmMs: number;
}

/** The time field (Unix ms) of the first JSON log line whose msg is `msg`. */
function loggedAt(lines: readonly string[], msg: string): number {
  const line = lines.find((l) => l.includes(`"msg":"${msg}"`));
  if (!line) throw new Error(`no "${msg}" line`);
  return Date.parse(JSON.parse(line).time);
}

async function round(): Promise<Round> {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "bootstrap-bench-" }));
  const stack = new AsyncDisposableStack();
  try {
    const cluster = await startBootstrapCluster(dir, stack);
    const process = await cluster.controlPlane.start(["--init-api-server", cluster.apiServer.url]);
    using connection = connectRpc({
      baseUrl: `https://127.0.0.1:${process.port}`,
      skipServerVerification: true,
    });
    const first = Date.now();
    await initCluster(cluster.initRequest(), {
      transport: connection.transport,
      validator: cluster.validator,
      controlPlanes: cluster.controlPlanes,
    });
    const opened = Date.now();
    const init = await cluster.controlPlane.kubeadmTimes();
    const kubeadmInitMs = init.reduce((sum, call) => sum + call.end - call.start, 0);

    const joinFlags = await cluster.prepareServices();
    await cluster.startJoinService();
    const worker = await cluster.addNode("worker-1", "Worker");
    const joining = await worker.start(joinFlags);
    if ((await joining.status).code !== 0) throw new Error(joining.stderrLines.slice(-5).join("\n"));
    const ticketAt = loggedAt(joining.stderrLines, "received a join ticket");
    const [kubeadmJoin] = await worker.kubeadmTimes();
    return {
      beforeKubeadmMs: init[0].start - first,
      betweenKubeadmMs: init.at(-1)!.end - init[0].start - kubeadmInitMs,
      afterKubeadmMs: opened - init.at(-1)!.end,
      kubeadmInitMs,
      ticketMs: ticketAt - loggedAt(joining.stderrLines, "joining as"),
      ticketToKubeadmMs: kubeadmJoin.start - ticketAt,
    };
  } finally {
    await stack.disposeAsync();
    await Deno.remove(dir, { recursive: true });
  }
}

const rounds: Round[] = [];
for (let i = 0; i < ROUNDS; i++) rounds.push(await round());
const median = (pick: (r: Round) => number) => percentile(rounds.map(pick).sort((a, b) => a - b), 0.5);
const overhead = (r: Round) => r.beforeKubeadmMs + r.betweenKubeadmMs + r.afterKubeadmMs;
const ms = (value: number) => `${value.toFixed(0)} ms`;

console.log(`bootstrapper, ${ROUNDS} fresh clusters, medians:`);
console.log(
  `  init overhead excluding kubeadm: ${ms(median(overhead))} ` +
    `(before kubeadm ${ms(median((r) => r.beforeKubeadmMs))}, between calls ${
      ms(median((r) => r.betweenKubeadmMs))
    }, after ${ms(median((r) => r.afterKubeadmMs))}); ` +
    `the recording kubeadm's own time ${ms(median((r) => r.kubeadmInitMs))}: ratio ${
      median((r) => overhead(r) / r.kubeadmInitMs).toFixed(2)
    }×`,
);
console.log(
  `  join: ticket received → kubeadm invoked ${ms(median((r) => r.ticketToKubeadmMs))}; ` +
    `getting the ticket ${ms(median((r) => r.ticketMs))}: ratio ${
      median((r) => r.ticketToKubeadmMs / r.ticketMs).toFixed(2)
    }×`,
);
