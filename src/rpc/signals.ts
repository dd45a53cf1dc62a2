/**
 * Process signal handling shared by the services' entry points.
 *
 * @module
 */

/**
 * Resolves on the first SIGTERM or SIGINT. (SIGUSR1 is never used: it starts
 * the V8 inspector in Deno.)
 */
export function terminationSignal(): Promise<Deno.Signal> {
  return new Promise((resolve) => {
    const signals: Deno.Signal[] = ["SIGTERM", "SIGINT"];
    const handlers = signals.map((signal) => {
      const handler = () => {
        signals.forEach((s, i) => Deno.removeSignalListener(s, handlers[i]));
        resolve(signal);
      };
      Deno.addSignalListener(signal, handler);
      return handler;
    });
  });
}
