/**
 * `scripts/embedded_descriptors.ts` and `src/protobuf/embedded_file.ts`: the
 * descriptor the build writes into a bundle is the one protobuf-es's
 * `fileDesc` builds at start from the embedded base64, for every generated
 * file a bundle of ours holds.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  type DescField,
  type DescFile,
  type DescMessage,
  fromBinary,
  fromJson,
  type JsonObject,
  ScalarType,
  toBinary,
  toJson,
} from "@bufbuild/protobuf";
import { fileDesc } from "@bufbuild/protobuf/codegenv2";
import { nestedTypes } from "@bufbuild/protobuf/reflect";
import * as wkt from "@bufbuild/protobuf/wkt";
import {
  decodeEmbeddedDescriptor,
  inlineEmbeddedDescriptors,
  MessageLiteralWriter,
} from "../../scripts/embedded_descriptors.ts";
import { embeddedFile } from "../../src/protobuf/embedded_file.ts";
import { REPO_ROOT } from "../keyservice/key_service_process.ts";

const WKT_DIR = `${REPO_ROOT}node_modules/@bufbuild/protobuf/dist/esm/wkt/`;

/** A generated module, and what its `fileDesc` calls import. */
interface GeneratedFile {
  path: string;
  imports: DescFile[];
}

/** Ours (every module in src/gen), every well-known type's but descriptor.proto's (booted from an object), Connect's. */
async function generatedFiles(): Promise<GeneratedFile[]> {
  const ours = (await ourFiles()).map(({ path, file }) => ({ path, imports: file.dependencies }));
  const wellKnown = Object.entries(wkt)
    .filter(([name]) =>
      name.startsWith("file_google_protobuf_") && name !== "file_google_protobuf_descriptor"
    )
    .map(([, file]) => file as DescFile)
    .map((file) => ({
      path: WKT_DIR + file.proto.name.replace(/\.proto$/, "_pb.js"),
      imports: file.dependencies,
    }));
  const connectStatus = {
    path: `${REPO_ROOT}node_modules/@connectrpc/connect/dist/esm/protocol-grpc/gen/status_pb.js`,
    imports: [wkt.file_google_protobuf_any],
  };
  return [...ours, ...wellKnown, connectStatus];
}

/** Every module in src/gen and the file descriptor it exports. */
async function ourFiles(): Promise<{ path: string; file: DescFile }[]> {
  const files = [];
  for await (const path of walk(`${REPO_ROOT}src/gen`)) {
    const module: Record<string, unknown> = await import(path);
    const exported = Object.entries(module).filter(([name]) => name.startsWith("file_"));
    assert.equal(exported.length, 1, path);
    files.push({ path, file: exported[0][1] as DescFile });
  }
  return files;
}

/** The `*_pb.ts` files under `dir`. */
async function* walk(dir: string): AsyncGenerator<string> {
  for await (const entry of Deno.readDir(dir)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) yield* walk(path);
    else if (entry.name.endsWith("_pb.ts")) yield path;
  }
}

/** The one base64 descriptor a generated module embeds. */
async function embeddedBase64(path: string): Promise<string> {
  const calls = [...(await Deno.readTextFile(path)).matchAll(/\bfileDesc\("([^"]*)"/g)];
  assert.equal(calls.length, 1, path);
  return calls[0][1];
}

/** Evaluates what the writer wrote for `value`, with its declarations. */
function evaluate(writer: MessageLiteralWriter, expression: string): unknown {
  return new Function(`${writer.declarations.join("\n")}\nreturn ${expression};`)();
}

/** Asserts `actual` is `expected` down to each message's own properties and its prototype's defaults. */
function assertSameMessage(actual: unknown, expected: unknown, path: string): void {
  if (typeof expected !== "object" || expected === null || expected instanceof Uint8Array) {
    assert.deepEqual(actual, expected, path);
    return;
  }
  assert.equal(typeof actual, "object", path);
  assert.equal(Array.isArray(actual), Array.isArray(expected), path);
  const actualPrototype = Object.getPrototypeOf(actual);
  const expectedPrototype = Object.getPrototypeOf(expected);
  if (expectedPrototype === Object.prototype || expectedPrototype === Array.prototype) {
    assert.equal(actualPrototype, expectedPrototype, `${path}: prototype`);
  } else {
    assert.deepEqual({ ...actualPrototype }, { ...expectedPrototype }, `${path}: prototype's defaults`);
  }
  assert.deepEqual(
    Reflect.ownKeys(actual as object).sort(),
    Reflect.ownKeys(expected).sort(),
    `${path}: keys`,
  );
  for (const key of Reflect.ownKeys(expected) as string[]) {
    assertSameMessage(
      (actual as Record<string, unknown>)[key],
      (expected as Record<string, unknown>)[key],
      `${path}.${key}`,
    );
  }
}

/** Every message type of `file`, nested ones too. */
function allMessages(file: DescFile): DescMessage[] {
  return [...nestedTypes(file)].filter((type) => type.kind === "message");
}

/** What a message type's schema says about each field, as the runtime uses it. */
function fieldsOf(message: DescMessage): unknown[] {
  return message.fields.map((field) => [
    field.name,
    field.number,
    field.jsonName,
    field.localName,
    field.fieldKind,
    field.presence,
    field.oneof?.name,
    "scalar" in field ? field.scalar : undefined,
    "message" in field ? field.message?.typeName : undefined,
    "enum" in field ? field.enum?.typeName : undefined,
  ]);
}

Deno.test("each generated file's inlined descriptor is the one fileDesc builds from its base64", async (t) => {
  const files = await generatedFiles();
  assert.ok(files.filter((file) => file.path.includes("/src/gen/")).length >= 5, "our generated files");
  assert.ok(files.length >= 20, `${files.length} generated files`);
  for (const { path, imports } of files) {
    await t.step(path.slice(REPO_ROOT.length), async () => {
      const base64 = await embeddedBase64(path);
      const expected = fileDesc(base64, [...imports]);
      const writer = new MessageLiteralWriter();
      const proto = evaluate(
        writer,
        writer.write(decodeEmbeddedDescriptor(base64)),
      ) as wkt.FileDescriptorProto;
      const actual = embeddedFile(proto, imports);

      assertSameMessage(actual.proto, expected.proto, expected.proto.name);
      assert.deepEqual(
        toBinary(wkt.FileDescriptorProtoSchema, actual.proto),
        toBinary(wkt.FileDescriptorProtoSchema, expected.proto),
      );
      assert.deepEqual(
        actual.dependencies.map((file) => file.name),
        expected.dependencies.map((file) => file.name),
      );
      assert.deepEqual(actual.messages.map((m) => m.typeName), expected.messages.map((m) => m.typeName));
      assert.deepEqual(allMessages(actual).map(fieldsOf), allMessages(expected).map(fieldsOf));
      assert.deepEqual(
        actual.enums.map((e) => e.values.map((v) => [v.name, v.number])),
        expected.enums.map((e) => e.values.map((v) => [v.name, v.number])),
      );
      assert.deepEqual(
        actual.services.map((s) =>
          s.methods.map((m) => [m.name, m.methodKind, m.input.typeName, m.output.typeName])
        ),
        expected.services.map((s) =>
          s.methods.map((m) => [m.name, m.methodKind, m.input.typeName, m.output.typeName])
        ),
      );
    });
  }
});

/** JSON for a `message` with every field set (message fields down to `depth`). */
function sampleJson(message: DescMessage, depth: number): Record<string, unknown> {
  const scalar = (type: ScalarType): unknown => {
    switch (type) {
      case ScalarType.STRING:
        return "text";
      case ScalarType.BYTES:
        return "AQID";
      case ScalarType.BOOL:
        return true;
      case ScalarType.DOUBLE:
      case ScalarType.FLOAT:
        return 1.5;
      case ScalarType.INT64:
      case ScalarType.UINT64:
      case ScalarType.SINT64:
      case ScalarType.FIXED64:
      case ScalarType.SFIXED64:
        return "9007199254740993";
      default:
        return 7;
    }
  };
  const value = (field: DescField): unknown => {
    switch (field.fieldKind) {
      case "scalar":
        return scalar(field.scalar);
      case "enum":
        return field.enum.values.at(-1)!.name;
      case "message":
        return depth > 0 ? sampleJson(field.message, depth - 1) : {};
      case "list":
        return [
          field.listKind === "scalar"
            ? scalar(field.scalar)
            : field.listKind === "enum"
            ? field.enum.values.at(-1)!.name
            : depth > 0
            ? sampleJson(field.message, depth - 1)
            : {},
        ];
      case "map":
        return {
          "1": field.mapKind === "scalar"
            ? scalar(field.scalar)
            : field.mapKind === "enum"
            ? field.enum.values.at(-1)!.name
            : {},
        };
    }
  };
  const json: Record<string, unknown> = {};
  const oneofsSet = new Set<string>();
  for (const field of message.fields) {
    if (field.oneof) {
      if (oneofsSet.has(field.oneof.name)) continue;
      oneofsSet.add(field.oneof.name);
    }
    json[field.jsonName] = value(field);
  }
  return json;
}

Deno.test("our messages read and write the same with the inlined descriptors as with fileDesc's", async (t) => {
  for (const { path, file } of await ourFiles()) {
    const writer = new MessageLiteralWriter();
    const base64 = await embeddedBase64(path);
    const inlined = embeddedFile(
      evaluate(writer, writer.write(decodeEmbeddedDescriptor(base64))) as wkt.FileDescriptorProto,
      file.dependencies,
    );
    for (const [index, schema] of file.messages.entries()) {
      await t.step(schema.typeName, () => {
        const json = sampleJson(schema, 2);
        const message = fromJson(schema, json as JsonObject);
        const wire = toBinary(schema, message);
        assert.ok(wire.length > 0 || schema.fields.length === 0, "the sample sets fields");
        const read = fromBinary(inlined.messages[index], wire);
        assert.deepEqual(toJson(inlined.messages[index], read), toJson(schema, message));
        assert.deepEqual(
          toBinary(inlined.messages[index], fromJson(inlined.messages[index], json as JsonObject)),
          wire,
        );
      });
    }
  }
});

Deno.test("a module without an embedded descriptor is left as it is", () => {
  assert.equal(inlineEmbeddedDescriptors(`export const x = 1;\n`), undefined);
});

Deno.test("a generated module's fileDesc calls become embeddedFile calls, its other code untouched", async () => {
  const source = await Deno.readTextFile(`${REPO_ROOT}src/gen/join/join_pb.ts`);
  const inlined = inlineEmbeddedDescriptors(source)!;
  assert.doesNotMatch(inlined, /\bfileDesc\("/);
  assert.match(
    inlined,
    /export const file_join_join: GenFile = \/\*@__PURE__\*\/\s+\$embeddedFile\(\/\*@__PURE__\*\/\$message\d+\(/,
  );
  assert.match(inlined, /, \[file_atls_v1_atls, file_components_components\]\);/);
  const untouched = (text: string) => text.slice(text.indexOf("export const IssueJoinTicketRequestSchema"));
  assert.equal(untouched(inlined), untouched(source));
});

Deno.test("a module's other fileDesc calls: a method is left alone, a call written otherwise fails", async (t) => {
  const base64 = await embeddedBase64(`${WKT_DIR}google/protobuf/any_pb.js`);
  await t.step("someone else's fileDesc method", () => {
    const source = `export const a = fileDesc("${base64}");\nexport const b = other.fileDesc("${base64}");\n`;
    const inlined = inlineEmbeddedDescriptors(source)!;
    assert.match(inlined, /export const a = \$embeddedFile\(/);
    assert.ok(inlined.endsWith(`export const b = other.fileDesc("${base64}");\n`), inlined);
  });
  await t.step("a call split over lines", () => {
    const source = `export const a = fileDesc("${base64}");\nexport const b = fileDesc(\n  "${base64}");\n`;
    assert.throws(
      () => inlineEmbeddedDescriptors(source),
      /a fileDesc call that is not fileDesc\("<base64>"/,
    );
  });
  await t.step("a hashbang stays first", () => {
    const inlined = inlineEmbeddedDescriptors(
      `#!/usr/bin/env -S deno run\nexport const a = fileDesc("${base64}");\n`,
    )!;
    assert.match(inlined, /^#!\/usr\/bin\/env -S deno run\nimport \{ embeddedFile as \$embeddedFile \}/);
  });
});

Deno.test("the literal writer refuses what it would not recreate exactly", async (t) => {
  const rows: { name: string; value: unknown; message: RegExp }[] = [
    { name: "NaN", value: { n: NaN }, message: /cannot write the number NaN/ },
    { name: "-0", value: { n: -0 }, message: /cannot write the number 0/ },
    { name: "a function", value: { f: () => 1 }, message: /cannot write a function/ },
    { name: "a symbol key", value: { [Symbol("s")]: 1 }, message: /cannot write the property Symbol\(s\)/ },
    {
      name: "a prototype with a prototype",
      value: Object.create(Object.create({ inherited: 1 })),
      message: /not as protobuf-es creates it/,
    },
    {
      name: "a message without a type name",
      value: Object.assign(Object.create({ name: "" }), { name: "x" }),
      message: /not as protobuf-es creates it/,
    },
  ];
  for (const row of rows) {
    await t.step(row.name, () => {
      assert.throws(() => new MessageLiteralWriter().write(row.value), row.message);
    });
  }
});
