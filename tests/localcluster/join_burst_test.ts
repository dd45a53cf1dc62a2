/**
 * A CI-sized join burst (`tests/support/join_burst.ts`, the code of
 * `tests/bench/join_burst.ts`): 100 nodes start at once against a local
 * cluster's join service, each with the bootstrapper's join client and
 * forged, trusted evidence on a connection of its own; every node ends with
 * a ticket, and the cluster's API (read with kubectl) holds a token Secret
 * for each ticket's token and a JoiningNode for each node, with every token
 * and kubelet certificate distinct and every certificate signed by the
 * cluster CA for its node.
 */
import assert from "node:assert/strict";
import { withFreshCluster } from "../support/fresh_local_cluster.ts";
import { checkBurstObjects, ONE_ADDRESS_JOIN_SERVICE_FLAGS, runJoinBurst } from "../support/join_burst.ts";

const NODES = 100;

Deno.test(`join burst: ${NODES} nodes at once all get distinct tickets, tokens and certificates`, async () => {
  await withFreshCluster(ONE_ADDRESS_JOIN_SERVICE_FLAGS, async (cluster) => {
    const burst = await runJoinBurst({ cluster, nodes: NODES, timeoutMs: 90_000 });
    console.log(
      `${NODES} nodes in ${
        burst.seconds.toFixed(1)
      } s, ${burst.firstAttemptFailures} first requests failed ` +
        `${JSON.stringify(burst.failureReasons)}`,
    );
    assert.equal(burst.finalFailures, 0, `nodes without a ticket: ${JSON.stringify(burst.failureReasons)}`);
    assert.equal(burst.joined, NODES);
    const objects = await checkBurstObjects(cluster, burst.results);
    assert.deepEqual(objects, {
      tokenSecrets: NODES,
      tokensWithSecret: NODES,
      distinctTokens: NODES,
      joiningNodes: NODES,
      distinctCerts: NODES,
      certsVerified: NODES,
      tickets: NODES,
    });
    const clusterIds = new Set(burst.results.map((r) => r.ticket!.clusterId.toHex()));
    assert.deepEqual([...clusterIds], [cluster.status.clusterId], "every ticket binds to the cluster's ID");
  });
});
