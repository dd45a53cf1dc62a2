import assert from "node:assert/strict";
import { SERVICE_DENO_FLAGS, SERVICE_ENV, SERVICE_ENV_REMOVED } from "../../src/os/service_runtime.ts";
import { COMPONENTS } from "../../scripts/build.ts";

Deno.test("the services' tasks and artifacts run with the services' runtime flags and environment", async (t) => {
  const config = JSON.parse(await Deno.readTextFile(new URL("../../deno.json", import.meta.url)));
  for (
    const [name, entry] of [["join-service", "src/joinservice/main.ts"], [
      "key-service",
      "src/keyservice/main.ts",
    ]]
  ) {
    await t.step(name, () => {
      const task: string = config.tasks[name];
      for (const flag of SERVICE_DENO_FLAGS) {
        assert.ok(task.split(" ").includes(flag), `deno.json's ${name} task lacks ${flag}`);
      }
      assert.ok(task.indexOf(SERVICE_DENO_FLAGS[0]) < task.indexOf(entry), "a flag of deno run");
      const component = COMPONENTS.find((c) => c.name === name);
      assert.deepEqual(component?.runtimeFlags, SERVICE_DENO_FLAGS);
      // The task's environment, before deno: `unset <removed> && <NAME>=<value> … ./node_modules/deno/deno`.
      const prefix = task.slice(0, task.indexOf("./node_modules/deno/deno"));
      assert.equal(
        prefix,
        `unset ${SERVICE_ENV_REMOVED.join(" ")} && ${
          Object.entries(SERVICE_ENV).map(([variable, value]) => `${variable}=${value} `).join("")
        }`,
      );
      assert.deepEqual(component?.runtimeEnv, { set: SERVICE_ENV, removed: SERVICE_ENV_REMOVED });
    });
  }
});
