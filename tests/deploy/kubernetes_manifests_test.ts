/**
 * The Kubernetes manifests (`deploy/kubernetes/`):
 *
 * - the real `kubectl` accepts them (`apply --dry-run=client`), against a
 *   discovery-only API this test serves: kubectl maps every kind through the
 *   server's discovery, and no API here serves DaemonSets, Services, RBAC
 *   objects or ServiceAccounts (the local API serves Secrets, ConfigMaps,
 *   NodeVersions and JoiningNodes). kubectl's schema validation needs the
 *   server's OpenAPI document, which no API here has, so it runs with
 *   `--validate=false`; instead,
 * - every object type-checks against `kubernetes-types` (the Kubernetes API's
 *   types, generated from its OpenAPI document): a misspelled or misplaced
 *   field fails, as a control shows;
 * - the containers' arguments are flags the services' own parsers accept,
 *   naming files inside the mounted volumes, which lie inside the artifacts'
 *   permission sets; ports, Service names and Secret/ConfigMap names are the
 *   ones the code uses;
 * - the join service's Role and ClusterRole grant exactly
 *   `JOIN_SERVICE_API_ACCESS` (join_service_rbac_test.ts shows the process
 *   needs all of it and nothing more).
 */
import assert from "node:assert/strict";
import { parseAllDocuments } from "yaml";
import { COMPONENTS } from "../../scripts/build.ts";
import { knownVariants } from "../../src/attestation/registry.ts";
import { SERVICE_ENV } from "../../src/os/service_runtime.ts";
import {
  INTERNAL_CONFIG_NAME,
  JOIN_CONFIG_NAME,
  MASTER_SECRET_NAME,
} from "../../src/bootstrapper/cluster_init.ts";
import { JOIN_SERVICE_NODE_PORT } from "../../src/bootstrapper/joinclient.ts";
import { JOIN_SERVICE_API_ACCESS } from "../../src/joinservice/api_access.ts";
import { parseJoinServiceFlags } from "../../src/joinservice/flags.ts";
import { parseKeyServiceFlags } from "../../src/keyservice/flags.ts";
import { KUBE_SYSTEM_NAMESPACE } from "../../src/kubernetes/names.ts";
import { apiGroup, apiGroupList, apiResourceList, apiVersions } from "../../src/localapi/discovery.ts";
import type { DiscoveredResource } from "../../src/localapi/discovery.ts";
import { runToExit } from "../../src/os/service_process.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";
import { withTempDir } from "../support/temp_dir.ts";
import {
  findObject,
  grantsOf,
  KUBERNETES_DIR,
  loadManifests,
  type ManifestObject,
  onlyContainer,
  podSpec,
} from "./manifests.ts";

/** The resource types the manifests use, as a Kubernetes API server's discovery lists them. */
const DISCOVERY: DiscoveredResource[] = [
  ["", "serviceaccounts", "ServiceAccount", true],
  ["", "services", "Service", true],
  ["apps", "daemonsets", "DaemonSet", true],
  ["apps", "deployments", "Deployment", true],
  ["rbac.authorization.k8s.io", "roles", "Role", true],
  ["rbac.authorization.k8s.io", "rolebindings", "RoleBinding", true],
  ["rbac.authorization.k8s.io", "clusterroles", "ClusterRole", false],
  ["rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding", false],
].map(([group, plural, kind, namespaced]) => ({
  group: group as string,
  version: "v1",
  plural: plural as string,
  kind: kind as string,
  namespaced: namespaced as boolean,
  verbs: ["get", "list", "create", "update", "patch", "delete"],
}));

/** Where each kind's type is in kubernetes-types. */
const KIND_TYPES: Record<string, string> = {
  ServiceAccount: "core/v1.d.ts",
  Service: "core/v1.d.ts",
  DaemonSet: "apps/v1.d.ts",
  Deployment: "apps/v1.d.ts",
  Role: "rbac/v1.d.ts",
  RoleBinding: "rbac/v1.d.ts",
  ClusterRole: "rbac/v1.d.ts",
  ClusterRoleBinding: "rbac/v1.d.ts",
};

/**
 * Serves discovery for {@linkcode DISCOVERY} over plain HTTP on 127.0.0.1,
 * and 404 NotFound for everything else (every object: kubectl's apply sees
 * none exists yet). Records each request as "METHOD path".
 */
function serveDiscovery(): { url: string; requests: string[] } & AsyncDisposable {
  const requests: string[] = [];
  const server: Deno.HttpServer<Deno.NetAddr> = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request): Response => {
      const path = new URL(request.url).pathname;
      requests.push(`${request.method} ${path}`);
      const parts = path.split("/").filter(Boolean);
      const found: Record<string, unknown> | undefined = request.method !== "GET"
        ? undefined
        : path === "/api"
        ? apiVersions(`127.0.0.1:${server.addr.port}`)
        : path === "/apis"
        ? apiGroupList(DISCOVERY)
        : parts[0] === "api" && parts.length === 2
        ? apiResourceList(DISCOVERY, "", parts[1])
        : parts[0] === "apis" && parts.length === 2
        ? apiGroup(DISCOVERY, parts[1])
        : parts[0] === "apis" && parts.length === 3
        ? apiResourceList(DISCOVERY, parts[1], parts[2])
        : undefined;
      return found ? Response.json(found) : Response.json(
        { kind: "Status", apiVersion: "v1", status: "Failure", reason: "NotFound", code: 404, message: path },
        { status: 404 },
      );
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    requests,
    [Symbol.asyncDispose]: () => server.shutdown(),
  };
}

/** Runs kubectl with a kubeconfig for `server` and HOME in `dir`. */
async function kubectl(dir: string, server: string, ...args: string[]) {
  const kubeconfig = `${dir}/kubeconfig`;
  await Deno.writeTextFile(
    kubeconfig,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "discovery", cluster: { server } }],
      contexts: [{ name: "discovery", context: { cluster: "discovery", user: "nobody" } }],
      users: [{ name: "nobody", user: {} }],
      "current-context": "discovery",
    }),
  );
  return await runToExit("kubectl", ["--kubeconfig", kubeconfig, ...args], {
    env: { HOME: `${dir}/home`, PATH: "/usr/local/bin:/usr/bin:/bin" },
  });
}

/** "Kind namespace/name" of each object, sorted. */
function identities(objects: readonly ManifestObject[]): string[] {
  return objects.map((o) => `${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}`).sort();
}

/**
 * Type-checks `objects` against kubernetes-types with the project's Deno
 * configuration (a file per run under `dir`); returns deno check's result.
 */
async function typeCheck(dir: string, objects: readonly ManifestObject[]) {
  const lines = objects.map((object, index) => {
    const module = KIND_TYPES[object.kind];
    assert.ok(module, `no kubernetes-types type for kind ${object.kind}`);
    const type = `import("${REPO_ROOT}node_modules/kubernetes-types/${module}").${object.kind}`;
    return `export const object${index}: ${type} = ${JSON.stringify(object, null, 2)};`;
  });
  const file = `${dir}/manifests_${crypto.randomUUID().slice(0, 8)}.ts`;
  await Deno.writeTextFile(file, lines.join("\n") + "\n");
  return await runToExit("deno", ["check", "--quiet", "--config", `${REPO_ROOT}deno.json`, file], {
    cwd: dir,
    timeoutMs: 60_000,
  });
}

/** The volume of `workload` mounted at `path`, with the mount. */
function volumeAt(workload: ManifestObject, path: string) {
  const mount = onlyContainer(workload).volumeMounts?.find((m) => m.mountPath === path);
  assert.ok(mount, `${workload.metadata.name}: nothing is mounted at ${path}`);
  const volume = podSpec(workload).volumes?.find((v) => v.name === mount.name);
  assert.ok(volume, `${workload.metadata.name}: no volume ${mount.name}`);
  return { mount, volume };
}

/** Whether `path` lies inside one of `dirs`. */
function inside(path: string, dirs: readonly string[]): boolean {
  return dirs.some((dir) => path === dir || path.startsWith(`${dir}/`));
}

const objects = (await loadManifests()).map((m) => m.object);
const config = JSON.parse(await Deno.readTextFile(`${REPO_ROOT}deno.json`));

Deno.test("kubectl accepts the manifests (apply --dry-run=client, against discovery only)", async () => {
  await withTempDir("manifests-kubectl-", async (dir) => {
    await using api = serveDiscovery();
    const result = await kubectl(
      dir,
      api.url,
      ...["apply", "--dry-run=client", "--validate=false", "-f", KUBERNETES_DIR, "-o", "yaml"],
    );
    assert.equal(result.code, 0, result.stderrLines.join("\n"));
    const printed = parseAllDocuments(result.stdoutLines.join("\n"))
      .map((document) => document.toJS())
      .flatMap((o) => o.kind === "List" ? o.items : [o]) as ManifestObject[];
    assert.deepEqual(identities(printed), identities(objects));
    assert.deepEqual(api.requests.filter((r) => !r.startsWith("GET ")), [], "a dry run changes nothing");

    // The control: a kind the API does not have is refused.
    await Deno.writeTextFile(
      `${dir}/unknown.yaml`,
      "apiVersion: apps/v1\nkind: DaemonSett\nmetadata: {name: x, namespace: kube-system}\n",
    );
    const unknown = await kubectl(
      dir,
      api.url,
      "apply",
      "--dry-run=client",
      "--validate=false",
      "-f",
      `${dir}/unknown.yaml`,
    );
    assert.notEqual(unknown.code, 0);
    assert.match(unknown.stderrLines.join("\n"), /no matches for kind "DaemonSett"/);
  });
});

Deno.test("the manifests type-check against the Kubernetes API types (kubernetes-types)", async () => {
  await withTempDir("manifests-types-", async (dir) => {
    const result = await typeCheck(dir, objects);
    assert.equal(result.code, 0, result.stderrLines.join("\n"));

    // The control: a misspelled field fails.
    const misspelled = structuredClone(objects) as ManifestObject[];
    const daemonSet = misspelled.find((o) => o.kind === "DaemonSet")!;
    const spec = podSpec(daemonSet) as unknown as Record<string, unknown>;
    spec.nodeSelektor = spec.nodeSelector;
    delete spec.nodeSelector;
    const failed = await typeCheck(dir, misspelled);
    assert.notEqual(failed.code, 0);
    assert.match(failed.stderrLines.join("\n"), /'"nodeSelektor"' does not exist in type 'PodSpec'/);
  });
});

Deno.test("the join service's container: its parser's flags, inputs mounted inside its permissions, the NodePort", () => {
  const daemonSet = findObject(objects, "DaemonSet", "join-service");
  assert.equal(daemonSet.metadata.namespace, KUBE_SYSTEM_NAMESPACE);
  const container = onlyContainer(daemonSet);
  assert.deepEqual(container.command, ["/usr/bin/join-service"]);
  assert.ok(COMPONENTS.some((c) => c.name === "join-service"), "dist/join-service is an artifact");
  const flags = parseJoinServiceFlags(container.args ?? []);
  assert.notEqual(flags, "help");
  if (flags === "help") return;
  assert.ok(knownVariants().includes(flags.attestationVariant), flags.attestationVariant);
  assert.equal(podSpec(daemonSet).nodeSelector?.["node-role.kubernetes.io/control-plane"], "");

  // /var/config: the join-config (and internal-config) ConfigMaps, as init writes them.
  const configVolume = volumeAt(daemonSet, flags.configDir);
  assert.equal(configVolume.mount.readOnly, true);
  assert.deepEqual(
    configVolume.volume.projected?.sources?.map((s) => s.configMap?.name),
    [JOIN_CONFIG_NAME, INTERNAL_CONFIG_NAME],
  );
  // /etc/kubernetes: the node's, read-only.
  const kubernetesVolume = volumeAt(daemonSet, flags.kubernetesDir);
  assert.equal(kubernetesVolume.mount.readOnly, true);
  assert.equal(kubernetesVolume.volume.hostPath?.path, "/etc/kubernetes");
  // Both, and the service account's token, lie inside the join service's read permissions.
  const readable = config.permissions["join-service"].read as string[];
  for (
    const path of [flags.configDir, flags.kubernetesDir, "/var/run/secrets/kubernetes.io/serviceaccount"]
  ) {
    assert.ok(inside(path, readable), `${path} is outside the join-service permission set's reads`);
  }
  assert.equal(podSpec(daemonSet).serviceAccountName, "join-service");

  // Ports: join.API behind the NodePort nodes dial, metrics for the probes.
  const port = (name: string) => container.ports?.find((p) => p.name === name)?.containerPort;
  assert.equal(port("join"), flags.port);
  assert.equal(port("metrics"), flags.metricsPort);
  assert.equal(container.readinessProbe?.httpGet?.path, "/healthz");
  assert.equal(container.readinessProbe?.httpGet?.port, "metrics");
  const service = findObject(objects, "Service", "join-service") as unknown as {
    spec: {
      type: string;
      selector: Record<string, string>;
      ports: { targetPort: number; nodePort: number }[];
    };
  };
  assert.equal(service.spec.type, "NodePort");
  assert.deepEqual(service.spec.ports.map((p) => [p.targetPort, p.nodePort]), [[
    flags.port,
    JOIN_SERVICE_NODE_PORT,
  ]]);
  assert.deepEqual(
    service.spec.selector,
    (daemonSet as unknown as { spec: { selector: { matchLabels: unknown } } }).spec.selector.matchLabels,
  );

  // The key service it calls is the key-service Service.
  const keyService = findObject(objects, "Service", "key-service") as unknown as {
    metadata: { name: string; namespace: string };
    spec: { type: string; ports: { port: number }[] };
  };
  assert.equal(keyService.spec.type, "ClusterIP");
  assert.equal(
    flags.keyServiceEndpoint,
    `${keyService.metadata.name}.${keyService.metadata.namespace}:${keyService.spec.ports[0].port}`,
  );
});

Deno.test("the key service's container: its parser's flags, the master secret mounted inside its permissions", () => {
  const daemonSet = findObject(objects, "DaemonSet", "key-service");
  assert.equal(daemonSet.metadata.namespace, KUBE_SYSTEM_NAMESPACE);
  const container = onlyContainer(daemonSet);
  assert.deepEqual(container.command, ["/usr/bin/key-service"]);
  assert.ok(COMPONENTS.some((c) => c.name === "key-service"), "dist/key-service is an artifact");
  const flags = parseKeyServiceFlags(container.args ?? []);
  assert.notEqual(flags, "help");
  if (flags === "help") return;
  assert.equal(podSpec(daemonSet).nodeSelector?.["node-role.kubernetes.io/control-plane"], "");
  assert.equal(podSpec(daemonSet).automountServiceAccountToken, false, "it needs no API access");

  // The secret and salt files are the Secret init writes, mounted read-only, inside the read permissions.
  const mountPath = flags.masterSecretPath.slice(0, flags.masterSecretPath.lastIndexOf("/"));
  const { mount, volume } = volumeAt(daemonSet, mountPath);
  assert.equal(mount.readOnly, true);
  assert.equal(volume.secret?.secretName, MASTER_SECRET_NAME);
  assert.deepEqual(
    volume.secret?.items?.map((item) => `${mountPath}/${item.path}`).sort(),
    [flags.masterSecretPath, flags.saltPath].sort(),
  );
  assert.deepEqual(volume.secret?.items?.map((item) => item.key), ["mastersecret", "salt"]);
  assert.ok(inside(mountPath, config.permissions["key-service"].read), `${mountPath} is outside its reads`);

  const service = findObject(objects, "Service", "key-service") as unknown as {
    spec: { ports: { port: number; targetPort: number }[] };
  };
  assert.equal(container.ports?.[0].containerPort, flags.port);
  assert.deepEqual(service.spec.ports.map((p) => [p.port, p.targetPort]), [[flags.port, flags.port]]);
});

Deno.test("both services keep Deno's code cache on a writable volume that outlives the container", async (t) => {
  for (const name of ["join-service", "key-service"]) {
    await t.step(name, () => {
      const daemonSet = findObject(objects, "DaemonSet", name);
      const container = onlyContainer(daemonSet);
      assert.equal(container.securityContext?.readOnlyRootFilesystem, true);
      const denoDir = container.env?.find((variable) => variable.name === "DENO_DIR")?.value;
      assert.ok(denoDir, `${name}: no DENO_DIR`);
      const { mount, volume } = volumeAt(daemonSet, denoDir);
      assert.notEqual(mount.readOnly, true);
      assert.ok(volume.emptyDir, `${name}: the cache is not an emptyDir`);
    });
  }
});

Deno.test("both services run with the services' environment: no root certificate store", async (t) => {
  for (const name of ["join-service", "key-service"]) {
    await t.step(name, () => {
      const env = onlyContainer(findObject(objects, "DaemonSet", name)).env ?? [];
      for (const [variable, value] of Object.entries(SERVICE_ENV)) {
        assert.deepEqual(env.filter((v) => v.name === variable).map((v) => v.value), [value], variable);
      }
    });
  }
});

Deno.test("the join service's Role and ClusterRole grant exactly JOIN_SERVICE_API_ACCESS", () => {
  /** One line per verb: "namespace group/resource verb [names]"; namespace "*" is cluster-wide. */
  const expand = (
    namespace: string | undefined,
    groups: readonly string[],
    resources: readonly string[],
    verbs: readonly string[],
    names: readonly string[] | undefined,
  ) =>
    groups.flatMap((group) =>
      resources.flatMap((resource) =>
        verbs.map((verb) => `${namespace ?? "*"} ${group}/${resource} ${verb} [${(names ?? []).join(",")}]`)
      )
    );
  const granted = grantsOf(objects, KUBE_SYSTEM_NAMESPACE, "join-service").flatMap(({ namespace, rule }) =>
    expand(namespace, rule.apiGroups ?? [], rule.resources ?? [], rule.verbs, rule.resourceNames)
  );
  const used = JOIN_SERVICE_API_ACCESS.flatMap((access) =>
    expand(access.namespace, [access.apiGroup], [access.resource], access.verbs, access.resourceNames)
  );
  assert.deepEqual(granted.sort(), used.sort());
  assert.deepEqual(
    grantsOf(objects, KUBE_SYSTEM_NAMESPACE, "key-service"),
    [],
    "the key service has no grants",
  );
});
