import assert from "node:assert/strict";
import { SERVICE_DENO_FLAGS } from "../../src/os/service_runtime.ts";
import { COMPONENTS } from "../../scripts/build.ts";

Deno.test("the services' tasks and artifacts run with the services' runtime flags", async (t) => {
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
    });
  }
});
