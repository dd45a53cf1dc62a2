/**
 * The local cluster's netns network on real namespaces, veth pairs and a
 * Linux bridge (root with `ip netns`; skipped elsewhere).
 */
import assert from "node:assert/strict";
import { createNetwork, netnsAvailable, removeNetwork } from "../../src/localcluster/network.ts";
import { runTool } from "../../src/os/run_tool.ts";

/** Locally administered unicast MACs lower than any veth's random one. */
const LOW_MAC = "02:00:00:00:00:02";
const LOWEST_MAC = "02:00:00:00:00:01";

/** A link's MAC address (`ip`: Deno reads nothing under /sys without --allow-all). */
async function linkAddress(name: string): Promise<string> {
  const show = await runTool("ip", ["-j", "link", "show", "dev", name]);
  assert.ok(show.success, show.stderr);
  return JSON.parse(show.stdout)[0].address;
}

async function setLinkAddress(name: string, address: string): Promise<void> {
  const set = await runTool("ip", ["link", "set", name, "address", address]);
  assert.ok(set.success, set.stderr);
  assert.equal(await linkAddress(name), address);
}

Deno.test({
  name: "netns network: a node joining does not cut the others off from the host",
  ignore: !(await netnsAvailable()),
  async fn(t) {
    const network = await createNetwork({ kind: "netns", owner: "/tmp/network-test-a" });
    const { bridge } = network.names;
    // The host side of the network: what the metadata and Kubernetes APIs are to nodes.
    const server = Deno.serve(
      { hostname: network.hostAddress, port: 0, onListen: () => {} },
      () => new Response("host"),
    );
    try {
      // A node's host-side veth is named after the bridge. Node 0's gets a low MAC: a bridge that takes
      // its ports' lowest MAC takes it, and node 1 resolves the host to a MAC that is not its own port's.
      await network.addNode(0);
      await setLinkAddress(`${bridge}v0`, LOW_MAC);
      const node = await network.addNode(1);
      /** Whether node 1 reaches the host within 2 s (with a stale ARP entry it took 53 s). */
      const reachesHost = async () => {
        const url = `http://${network.hostAddress}:${server.addr.port}/`;
        const curl = await runTool("ip", [
          ...node.commandPrefix.slice(1),
          "curl",
          "-sS",
          "--max-time",
          "2",
          url,
        ]);
        return curl.success && curl.stdout === "host";
      };
      assert.ok(await reachesHost(), "node 1 reaches the host");
      const bridgeMac = await linkAddress(bridge);

      await t.step("the bridge keeps its MAC when a node with a lower one joins", async () => {
        await network.addNode(2);
        await setLinkAddress(`${bridge}v2`, LOWEST_MAC);
        assert.equal(await linkAddress(bridge), bridgeMac);
      });

      await t.step("the other nodes still reach the host at once", async () => {
        assert.ok(await reachesHost(), "the host answers node 1 within 2 s");
      });
    } finally {
      await server.shutdown();
      await removeNetwork(network.names);
    }
  },
});

Deno.test({
  name: "netns network: removing by names another cluster took since leaves that cluster's network alone",
  ignore: !(await netnsAvailable()),
  async fn() {
    // The last subnet: other tests' clusters, run in parallel, take the lowest free one, and one of them
    // taking this subnet between the two networks would fail the second for a reason not under test.
    const first = await createNetwork({
      kind: "netns",
      owner: "/tmp/network-test-first",
      hostAddress: "10.42.255.1",
    });
    await first.addNode(0);
    const stale = structuredClone(first.names);
    assert.equal(await removeNetwork(first.names), true);
    // The next cluster takes the same subnet, so the same bridge name (as `recover` asks for its own).
    const second = await createNetwork({
      kind: "netns",
      owner: "/tmp/network-test-second",
      hostAddress: first.hostAddress,
    });
    try {
      assert.equal(second.names.bridge, stale.bridge);
      await second.addNode(0);
      // `cluster down` again on the first cluster's state: its names, not its network.
      assert.equal(await removeNetwork(stale), false);
      const bridge = await runTool("ip", ["link", "show", "dev", second.names.bridge]);
      assert.ok(bridge.success, "the second cluster's bridge is still there");
      const namespace = await runTool("ip", ["netns", "pids", second.names.namespaces[0]]);
      assert.ok(namespace.success, "and its namespace");
    } finally {
      await removeNetwork(second.names);
    }
  },
});

Deno.test({
  name: "netns network: names recorded before owners existed still remove their own unmarked bridge",
  ignore: !(await netnsAvailable()),
  async fn() {
    const network = await createNetwork({ kind: "netns", owner: "/tmp/network-test-legacy" });
    await network.addNode(0);
    // A bridge of the code before owners, and the names its cluster.json held.
    const cleared = await runTool("ip", ["link", "set", "dev", network.names.bridge, "alias", ""]);
    assert.ok(cleared.success, cleared.stderr);
    const legacy = { bridge: network.names.bridge, namespaces: [...network.names.namespaces] };
    try {
      assert.equal(await removeNetwork(legacy), true);
      assert.equal((await runTool("ip", ["link", "show", "dev", legacy.bridge])).success, false);
    } finally {
      await removeNetwork(legacy);
    }
  },
});

Deno.test({
  name: "netns network: a bridge that cannot be marked as its owner's is not left behind",
  ignore: !(await netnsAvailable()),
  async fn() {
    // The kernel refuses an interface alias of 256 bytes or more.
    const error = await createNetwork({ kind: "netns", owner: `/tmp/${"x".repeat(300)}` }).then(
      () => assert.fail("created"),
      (e: Error) => e,
    );
    const bridge = /cannot mark the cluster bridge (\S+) as/.exec(error.message)?.[1];
    assert.ok(bridge, error.message);
    const show = await runTool("ip", ["-j", "-d", "link", "show", "dev", bridge]);
    // Gone, or already another cluster's (tests run in parallel): never an unmarked leftover.
    if (show.success) assert.ok(JSON.parse(show.stdout)[0].ifalias, `${bridge} left behind unmarked`);
  },
});
