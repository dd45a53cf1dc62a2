import assert from "node:assert/strict";
import { JOIN_SERVICE_DENO_FLAGS } from "../../src/joinservice/runtime.ts";
import { COMPONENTS } from "../../scripts/build.ts";

Deno.test("deno task join-service and the join-service artifact run with the service's runtime flags", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("../../deno.json", import.meta.url)));
  const task: string = config.tasks["join-service"];
  for (const flag of JOIN_SERVICE_DENO_FLAGS) {
    assert.ok(task.split(" ").includes(flag), `deno.json's join-service task lacks ${flag}`);
  }
  assert.ok(
    task.indexOf(JOIN_SERVICE_DENO_FLAGS[0]) < task.indexOf("src/joinservice/main.ts"),
    "a flag of deno run",
  );
  const component = COMPONENTS.find((c) => c.name === "join-service");
  assert.deepEqual(component?.runtimeFlags, JOIN_SERVICE_DENO_FLAGS);
});
