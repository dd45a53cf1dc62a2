import assert from "node:assert/strict";
import { MetricsRegistry, serveMetrics } from "../../src/metrics/registry.ts";

Deno.test("metrics render counters and histograms in the Prometheus text format", () => {
  const registry = new MetricsRegistry();
  const tickets = registry.counter("join_tickets_total", "Tickets by outcome.");
  const latency = registry.histogram("verify_seconds", "Verification latency.", [0.01, 0.1]);
  tickets.inc({ outcome: "issued" });
  tickets.inc({ outcome: "rejected", reason: 'a"b' }, 2);
  latency.observe(0.05, { variant: "dummy" });
  const text = registry.render();
  assert.match(text, /# TYPE join_tickets_total counter/);
  assert.match(text, /join_tickets_total\{outcome="issued"\} 1/);
  assert.match(text, /join_tickets_total\{outcome="rejected",reason="a\\"b"\} 2/);
  assert.match(text, /verify_seconds_bucket\{variant="dummy",le="0.01"\} 0/);
  assert.match(text, /verify_seconds_bucket\{variant="dummy",le="0.1"\} 1/);
  assert.match(text, /verify_seconds_bucket\{variant="dummy",le="\+Inf"\} 1/);
  assert.match(text, /verify_seconds_count\{variant="dummy"\} 1/);
});

Deno.test("metrics endpoint serves /metrics over HTTP", async () => {
  const registry = new MetricsRegistry();
  registry.counter("up_total", "Up.").inc();
  const server = await serveMetrics(registry, { hostname: "127.0.0.1", port: 0 });
  try {
    const res = await fetch(`http://127.0.0.1:${server.port}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /text\/plain; version=0.0.4/);
    assert.match(await res.text(), /up_total 1/);
    const missing = await fetch(`http://127.0.0.1:${server.port}/other`);
    assert.equal(missing.status, 404);
    await missing.body?.cancel();
  } finally {
    await server.close();
  }
});
