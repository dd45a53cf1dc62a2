/**
 * A short join soak (`tests/support/join_soak.ts`, the code of
 * `deno task soak`): nodes join a local cluster at 5 per second for 15 s,
 * most on a new connection, some over long-lived ones, with bootstrap
 * tokens living 10 s (the join service's shortest). No node fails; the join service's, key service's and
 * local API's memory and open files stay within the soak's bounds; the
 * local API's token cleaner deletes expired tokens (by the soak's end, or
 * its next round), and JoiningNodes stay within the pool of node names.
 */
import assert from "node:assert/strict";
import { withFreshCluster } from "../support/fresh_local_cluster.ts";
import { ONE_ADDRESS_JOIN_SERVICE_FLAGS } from "../support/join_burst.ts";
import { boundViolations, runJoinSoak, soakBounds } from "../support/join_soak.ts";
import { kubectlNames } from "../support/kubectl.ts";

const RATE = 5;
const TOKEN_TTL_SECONDS = 10;
const NAME_POOL = 30;

Deno.test("join soak: steady joins with connection churn stay within memory, file and object bounds", async () => {
  await withFreshCluster([
    ...ONE_ADDRESS_JOIN_SERVICE_FLAGS,
    "--bootstrap-token-ttl",
    String(TOKEN_TTL_SECONDS),
  ], async (cluster) => {
    const soak = await runJoinSoak({
      cluster,
      durationMs: 15_000,
      ratePerSecond: RATE,
      namePool: NAME_POOL,
      sampleIntervalMs: 3_000,
    });
    const last = soak.samples.at(-1)!;
    console.log(
      `${soak.started} nodes, ${soak.joined} joined (${soak.overReusedConnections} over reused connections); ` +
        `at the end ${last.tokens} tokens, ${last.joiningNodes} JoiningNodes; ` +
        Object.entries(last.processes).map(([name, p]) =>
          `${name} ${p.rssMiB.toFixed(0)} MiB ${p.openFiles} files`
        )
          .join(", "),
    );
    assert.equal(soak.failed, 0, `failures: ${JSON.stringify(soak.failureReasons)} ${soak.failureMessages}`);
    assert.equal(soak.joined, soak.started);
    assert.ok(soak.started >= RATE * 10, `only ${soak.started} nodes started`);
    assert.ok(soak.overReusedConnections > 0 && soak.overReusedConnections < soak.started);
    const bounds = soakBounds({
      ratePerSecond: RATE,
      tokenTtlSeconds: TOKEN_TTL_SECONDS,
      namePool: NAME_POOL,
    });
    assert.deepEqual(boundViolations(soak.samples, bounds), []);
    // The cleaner runs every 10 s on the API's own schedule: give it one more round if none fell in the soak.
    const deadline = Date.now() + 15_000;
    let tokens = last.tokens;
    while (tokens >= soak.joined && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      tokens = (await kubectlNames(cluster.paths.adminConf, ["secrets", "-n", "kube-system"]))
        .filter((name) => name.startsWith("secret/bootstrap-token-")).length;
    }
    assert.ok(tokens < soak.joined, `the token cleaner deleted none of ${soak.joined} tokens`);
    assert.ok(last.joiningNodes <= NAME_POOL);
  });
});
