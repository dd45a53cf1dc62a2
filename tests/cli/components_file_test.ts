/**
 * The Kubernetes components file of `cli init --kubernetes-components`:
 * valid files parse to the components sent to the node; every kind of
 * mistake is one CliError "input" naming the file, the element and the
 * field, without repeating a URL.
 */
import assert from "node:assert/strict";
import { parseComponentsFile, readComponentsFile } from "../../src/cli/components_file.ts";
import { CliError } from "../../src/cli/errors.ts";
import { parseCliArgs } from "../../src/cli/flags.ts";
import { UsageError } from "../../src/flags/flags.ts";
import type { KubernetesComponent } from "../../src/joinservice/components.ts";

const PATH = "/ops/components.json";
const HASH = "sha256:" + "ab".repeat(32);
const CNI: KubernetesComponent = {
  url: "https://example.com/cni-plugins.tgz",
  hash: HASH,
  installPath: "/opt/cni/bin",
  extract: true,
};

/** A file of one component: CNI with `changes` (undefined removes a field). */
function oneComponent(changes: Record<string, unknown>): string {
  return JSON.stringify([{ ...CNI, ...changes }]);
}

Deno.test("components file: valid files parse to the components", async (t) => {
  const rows: { name: string; text: string; want: KubernetesComponent[] }[] = [
    { name: "an https archive", text: JSON.stringify([CNI]), want: [CNI] },
    {
      name: "an https archive and a data: URL binary, in order",
      text: JSON.stringify([CNI, {
        url: "data:application/octet-stream;base64,AAAA",
        hash: HASH,
        installPath: "/run/state/bin/crictl",
        extract: false,
      }]),
      want: [CNI, {
        url: "data:application/octet-stream;base64,AAAA",
        hash: HASH,
        installPath: "/run/state/bin/crictl",
        extract: false,
      }],
    },
    { name: "an empty array: no components", text: "[]\n", want: [] },
  ];
  for (const row of rows) {
    await t.step(row.name, () => assert.deepEqual(parseComponentsFile(row.text, PATH), row.want));
  }
});

Deno.test("components file: mistakes name the file, the element and the field", async (t) => {
  const rows: { name: string; text: string; want: string }[] = [
    { name: "empty file", text: "", want: "not valid JSON (Unexpected end of JSON input)" },
    { name: "not JSON", text: "[{", want: "not valid JSON (" },
    { name: "an object, not an array", text: JSON.stringify(CNI), want: "want a JSON array [" },
    { name: "null", text: "null", want: "want a JSON array [{" },
    { name: "an element that is a string", text: `["x"]`, want: "element 0: want a JSON object {" },
    { name: "an element that is null", text: `[null]`, want: "element 0: want a JSON object" },
    {
      name: "an unknown field",
      text: oneComponent({ comment: "x" }),
      want: `element 0: unknown field "comment" (known: url, hash, installPath, extract)`,
    },
    {
      name: "an unknown field with an escape sequence: escaped",
      text: oneComponent({ "\x1b[2J\x9b2J": "x" }),
      want: `element 0: unknown field "\\u001b[2J\\u009b2J" (known: url, hash, installPath, extract)`,
    },
    {
      name: "a long unknown field: cut",
      text: oneComponent({ ["f".repeat(10_000)]: "x" }),
      want: `element 0: unknown field "${"f".repeat(63)}… (known: url, hash, installPath, extract)`,
    },
    {
      name: "url given twice in one element (JSON.parse would keep the last)",
      text: `[{"url": "https://example.com/a", "url": "https://example.com/b", "hash": "${HASH}", ` +
        `"installPath": "/opt/cni/bin", "extract": true}]`,
      want: `key "url" is given twice in [0]: give each key once`,
    },
    {
      name: "a key given twice in the second element, once escaped",
      text: `[${JSON.stringify(CNI)}, {"hash": "${HASH}", "h\\u0061sh": "${HASH}"}]`,
      want: `key "hash" is given twice in [1]: give each key once`,
    },
    {
      name: "Go's key spelling is not this file's",
      text: JSON.stringify([{ URL: CNI.url, Hash: HASH, InstallPath: "/opt/cni/bin", Extract: true }]),
      want: `element 0: unknown field "URL"`,
    },
    { name: "url missing", text: oneComponent({ url: undefined }), want: `element 0: "url" is missing` },
    { name: "hash missing", text: oneComponent({ hash: undefined }), want: `element 0: "hash" is missing` },
    {
      name: "installPath missing",
      text: oneComponent({ installPath: undefined }),
      want: `element 0: "installPath" is missing`,
    },
    {
      name: "extract missing",
      text: oneComponent({ extract: undefined }),
      want: `element 0: "extract" is missing`,
    },
    {
      name: "extract as a string",
      text: oneComponent({ extract: "true" }),
      want: `element 0: "extract" must be a boolean, got string`,
    },
    {
      name: "url as null",
      text: oneComponent({ url: null }),
      want: `element 0: "url" must be a string, got null`,
    },
    {
      name: "installPath as an array",
      text: oneComponent({ installPath: ["/opt"] }),
      want: `element 0: "installPath" must be a string, got array`,
    },
    {
      name: "an http URL",
      text: oneComponent({ url: "http://example.com/x" }),
      want: `element 0: "url" must be an https: or data: URL, got a http: URL`,
    },
    {
      name: "an upper-case scheme (the node takes lower case only)",
      text: oneComponent({ url: "HTTPS://example.com/x" }),
      want: `element 0: "url" must be an https: or data: URL, got a HTTPS: URL`,
    },
    {
      name: "a URL without a scheme",
      text: oneComponent({ url: "example.com/x" }),
      want: `element 0: "url" must be an https: or data: URL (--kubernetes-components)`,
    },
    {
      name: "an https URL without a host",
      text: oneComponent({ url: "https://" }),
      want: `element 0: "url" is not a valid URL`,
    },
    {
      name: "an md5 hash",
      text: oneComponent({ hash: "md5:abc" }),
      want: `element 0: "hash" must be sha256:<64 lower-case hex digits>, got "md5:abc"`,
    },
    {
      name: "an upper-case hex hash",
      text: oneComponent({ hash: "sha256:" + "AB".repeat(32) }),
      want: `element 0: "hash" must be sha256:<64 lower-case hex digits>`,
    },
    {
      name: "a hash one digit short",
      text: oneComponent({ hash: HASH.slice(0, -1) }),
      want: `element 0: "hash" must be sha256:<64 lower-case hex digits>`,
    },
    {
      name: "a relative installPath",
      text: oneComponent({ installPath: "opt/cni" }),
      want:
        `element 0: "installPath" must be an absolute path other than "/", without "..", control characters or a name over 255 bytes, got "opt/cni"`,
    },
    {
      name: "a NUL in installPath (the node's copy would fail after its lock)",
      text: oneComponent({ installPath: "/opt/cni/\u0000x" }),
      want:
        `element 0: "installPath" must be an absolute path other than "/", without "..", control characters or a name over 255 bytes, got "/opt/cni/\\u0000x"`,
    },
    {
      name: "installPath /",
      text: oneComponent({ installPath: "/" }),
      want: `element 0: "installPath" must be an absolute path`,
    },
    {
      name: `an installPath with ".."`,
      text: oneComponent({ installPath: "/opt/../etc" }),
      want: `element 0: "installPath" must be an absolute path`,
    },
    {
      name: "the second element's mistake names index 1",
      text: JSON.stringify([CNI, { ...CNI, hash: "nope" }]),
      want: `element 1: "hash" must be sha256:<64 lower-case hex digits>, got "nope"`,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.throws(() => parseComponentsFile(row.text, PATH), (error) => {
        assert.ok(error instanceof CliError, String(error));
        assert.equal(error.reason, "input");
        assert.ok(
          error.message.startsWith(`kubernetes components file ${PATH}: ${row.want}`),
          error.message,
        );
        assert.match(error.message, /\(--kubernetes-components\)$/);
        assert.ok(!error.message.includes("\n"), "one line");
        return true;
      });
    });
  }
});

Deno.test("components file: a URL's query is never repeated in an error", async (t) => {
  const secret = "X-Amz-Signature=0123456789abcdef";
  const rows: { name: string; text: string }[] = [
    { name: "invalid JSON after the URL", text: `[{"url": "https://example.com/x?${secret}"}}]` },
    { name: "a refused scheme", text: oneComponent({ url: `http://example.com/x?${secret}` }) },
    { name: "a bad hash", text: oneComponent({ url: `https://example.com/x?${secret}`, hash: "x" }) },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.throws(() => parseComponentsFile(row.text, PATH), (error) => {
        assert.ok(error instanceof CliError, String(error));
        assert.ok(!error.message.includes(secret), error.message);
        return true;
      });
    });
  }
});

Deno.test("components file: an unreadable file names the file", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "cli-components-" });
  try {
    await t.step("absent", async () => {
      await assert.rejects(readComponentsFile(`${dir}/absent.json`), (error) => {
        assert.ok(error instanceof CliError, String(error));
        assert.equal(error.reason, "input");
        assert.match(
          error.message,
          /^cannot read kubernetes components file .*absent\.json: no such file or directory \(--kubernetes-components\)$/,
        );
        return true;
      });
    });
    await t.step("a directory", async () => {
      await assert.rejects(readComponentsFile(dir), (error) => {
        assert.ok(error instanceof CliError, String(error));
        assert.match(error.message, /^cannot read kubernetes components file /);
        return true;
      });
    });
    await t.step("a valid file is read", async () => {
      await Deno.writeTextFile(`${dir}/components.json`, JSON.stringify([CNI]));
      assert.deepEqual(await readComponentsFile(`${dir}/components.json`), [CNI]);
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("command line: --kubernetes-components is optional and names a file", async (t) => {
  const init = [
    ...["init", "--node", "10.0.0.5:9000", "--attestation-config", "a.json", "--master-secret", "ms.json"],
    ...["--init-secret-file", "init-secret", "--kubernetes-version", "v1.30.2"],
  ];
  const parsed = (args: string[]) => {
    const command = parseCliArgs(args);
    assert.ok(command !== "help" && command.command === "init");
    return command.init;
  };
  await t.step("absent: no file, no components", () => {
    assert.equal(parsed(init).kubernetesComponentsFile, undefined);
  });
  await t.step("given: the file", () => {
    assert.equal(
      parsed([...init, "--kubernetes-components", "components.json"]).kubernetesComponentsFile,
      "components.json",
    );
  });
  await t.step("empty: a usage error", () => {
    assert.throws(
      () => parseCliArgs([...init, "--kubernetes-components", ""]),
      (e) => e instanceof UsageError && /missing --kubernetes-components/.test(e.message),
    );
  });
});
