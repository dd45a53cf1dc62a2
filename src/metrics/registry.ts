/**
 * Prometheus metrics in the text exposition format (version 0.0.4): counters
 * and histograms with labels, and a tiny HTTP endpoint serving them.
 *
 * @module
 */
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { checkListenPermission } from "../rpc/server.ts";

/** Label names to values. */
export type Labels = Record<string, string>;

/** A metric the registry renders. */
export interface Metric {
  /** The metric in the Prometheus text exposition format. */
  render(): string;
}

function labelKey(labels: Labels): string {
  return Object.keys(labels).sort().map((k) => `${k}="${escapeLabel(labels[k])}"`).join(",");
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

function withBraces(key: string): string {
  return key ? `{${key}}` : "";
}

/** A monotonically increasing counter. */
export class Counter implements Metric {
  readonly #values = new Map<string, number>();
  readonly #labels = new Map<string, Labels>();
  /** A counter named `name` with help text `help`. */
  constructor(readonly name: string, readonly help: string) {}

  /** Adds `by` (default 1) to the series with these labels. */
  inc(labels: Labels = {}, by = 1): void {
    const key = labelKey(labels);
    if (!this.#labels.has(key)) this.#labels.set(key, { ...labels });
    this.#values.set(key, (this.#values.get(key) ?? 0) + by);
  }

  /** The current value of one series. */
  get(labels: Labels = {}): number {
    return this.#values.get(labelKey(labels)) ?? 0;
  }

  /** Every series as `labels → value` in exposition label syntax. */
  entries(): [string, number][] {
    return [...this.#values.entries()];
  }

  /** Every series with its labels as given to {@linkcode Counter.inc}. */
  series(): { labels: Labels; value: number }[] {
    return [...this.#values].map(([key, value]) => ({ labels: { ...this.#labels.get(key) }, value }));
  }

  /** The counter in the exposition format. */
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    for (const [key, value] of this.#values) lines.push(`${this.name}${withBraces(key)} ${value}`);
    return lines.join("\n");
  }
}

/** A histogram of observations (seconds by default buckets). */
export class Histogram implements Metric {
  readonly #series = new Map<string, { counts: number[]; sum: number; count: number }>();
  /** A histogram named `name` with help text `help` and upper bucket bounds `buckets` (seconds by default). */
  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[] = [
      0.001,
      0.0025,
      0.005,
      0.01,
      0.025,
      0.05,
      0.1,
      0.25,
      0.5,
      1,
      2.5,
      5,
      10,
    ],
  ) {}

  /** Records one observation. */
  observe(value: number, labels: Labels = {}): void {
    const key = labelKey(labels);
    let series = this.#series.get(key);
    if (!series) {
      series = { counts: this.buckets.map(() => 0), sum: 0, count: 0 };
      this.#series.set(key, series);
    }
    this.buckets.forEach((bound, i) => {
      if (value <= bound) series.counts[i]++;
    });
    series.sum += value;
    series.count++;
  }

  /** Times `fn` and records its duration in seconds, whether it succeeds or throws. */
  async time<T>(labels: Labels, fn: () => Promise<T>): Promise<T> {
    const start = performance.now();
    try {
      return await fn();
    } finally {
      this.observe((performance.now() - start) / 1000, labels);
    }
  }

  /** The histogram in the exposition format. */
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const [key, series] of this.#series) {
      const sep = key ? "," : "";
      this.buckets.forEach((bound, i) => {
        lines.push(`${this.name}_bucket{${key}${sep}le="${bound}"} ${series.counts[i]}`);
      });
      lines.push(`${this.name}_bucket{${key}${sep}le="+Inf"} ${series.count}`);
      lines.push(`${this.name}_sum${withBraces(key)} ${series.sum}`);
      lines.push(`${this.name}_count${withBraces(key)} ${series.count}`);
    }
    return lines.join("\n");
  }
}

/** A set of metrics rendered together. */
export class MetricsRegistry {
  readonly #metrics: Metric[] = [];

  /** Registers and returns a counter. */
  counter(name: string, help: string): Counter {
    const metric = new Counter(name, help);
    this.#metrics.push(metric);
    return metric;
  }

  /** Registers and returns a histogram. */
  histogram(name: string, help: string, buckets?: readonly number[]): Histogram {
    const metric = new Histogram(name, help, buckets);
    this.#metrics.push(metric);
    return metric;
  }

  /** All metrics in the Prometheus text format. */
  render(): string {
    return this.#metrics.map((m) => m.render()).join("\n") + "\n";
  }
}

/** A running metrics endpoint. */
export interface MetricsServer {
  /** The bound port. */
  readonly port: number;
  /** Stops serving. */
  close(): Promise<void>;
}

/** Serves `GET /metrics` (and `/healthz`) over plain HTTP on its own port. */
export async function serveMetrics(
  registry: MetricsRegistry,
  options: { hostname: string; port: number },
): Promise<MetricsServer> {
  await checkListenPermission(options.hostname, options.port);
  const server = http.createServer((req, res) => {
    if (req.method === "GET" && req.url === "/metrics") {
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
      res.end(registry.render());
      return;
    }
    if (req.method === "GET" && req.url === "/healthz") {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("ok\n");
      return;
    }
    res.writeHead(404, { "content-type": "text/plain" });
    res.end("not found\n");
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.hostname, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
