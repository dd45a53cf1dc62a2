/**
 * The recording kubeadm: a stand-in for `kubeadm` in tests and the local
 * cluster (a real node image runs the real kubeadm). Run it as
 *
 * ```sh
 * deno run -P=kubeadm-sim --allow-write=<root> src/kubeadmsim/main.ts --root <root> init --config F
 * ```
 *
 * or through `scripts/kubeadm-sim` with `KUBEADM_SIM_ROOT=<root>` in the
 * environment. See `run.ts` for what it does.
 *
 * @module
 */
import { ROOT_ENV, runKubeadmSim } from "./run.ts";

if (import.meta.main) {
  const result = await runKubeadmSim(Deno.args, {
    env: (name) => (name === ROOT_ENV ? Deno.env.get(name) : undefined),
  });
  const encoder = new TextEncoder();
  await Deno.stdout.write(encoder.encode(result.stdout));
  await Deno.stderr.write(encoder.encode(result.stderr));
  Deno.exit(result.exitCode);
}
