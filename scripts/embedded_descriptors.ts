/**
 * The build's embedded descriptors: an esbuild plugin that decodes, at build
 * time, the base64 `FileDescriptorProto` every protobuf-es generated file
 * embeds (ours in `src/gen/`, the well-known types', Connect's `status.proto`)
 * and writes the decoded message into the bundle as a literal, passed to
 * `src/protobuf/embedded_file.ts` instead of `fileDesc(base64, …)`.
 *
 * Why: decoding the base64 at start needs protobuf-es's descriptor of
 * `google/protobuf/descriptor.proto` itself, which it builds from a large
 * object when that module is evaluated: with no `fileDesc` call left in a
 * bundle, nothing uses it and esbuild drops it. About 10 ms of each service's
 * start (key service: from its first statement to "listening" 18–31 → 10–16
 * ms, warm).
 *
 * The literal recreates the message exactly as `fromBinary` creates it: the
 * fields it sets as own properties, the defaults of proto2's optional fields
 * on a prototype shared by the messages of a type (one per module here, one
 * per type in protobuf-es), and the JSON names `fileDesc` restores. `tests/build/embedded_descriptors_test.ts` compares the result
 * with `fileDesc`'s for every generated file we bundle.
 *
 * @module
 */
import type { Plugin } from "esbuild";
import { fromBinary } from "@bufbuild/protobuf";
import { protoCamelCase } from "@bufbuild/protobuf/reflect";
import { base64Decode } from "@bufbuild/protobuf/wire";
import {
  type DescriptorProto,
  type FileDescriptorProto,
  FileDescriptorProtoSchema,
} from "@bufbuild/protobuf/wkt";

/** The module `embeddedFile` comes from, by absolute path (the generated files are anywhere). */
const EMBEDDED_FILE_MODULE = decodeURIComponent(
  new URL("../src/protobuf/embedded_file.ts", import.meta.url).pathname,
);

/** protobuf-es's generated call, `fileDesc("<base64>"`, with its imports (if any) after; not a method's. */
const FILE_DESC_CALL = /(?<![\w$.])fileDesc\("([A-Za-z0-9+/]*={0,2})"/g;

/** Any call of `fileDesc` (what must not be left in a rewritten module). */
const ANY_FILE_DESC_CALL = /(?<![\w$.])fileDesc\s*\(/;

/** The name the rewritten module imports `embeddedFile` under (generated code uses no `$`-prefixed names). */
const EMBEDDED_FILE = "$embeddedFile";

/**
 * The file descriptor `fileDesc` builds before registering it: decoded, with
 * every field's JSON name set (protoc-gen-es leaves out the ones that follow
 * from the field's name; protobuf-es's `restoreJsonNames`).
 */
export function decodeEmbeddedDescriptor(base64: string): FileDescriptorProto {
  const proto = fromBinary(FileDescriptorProtoSchema, base64Decode(base64));
  const restoreJsonNames = (message: DescriptorProto): void => {
    for (const field of message.field) {
      if (!Object.hasOwn(field, "jsonName") || field.jsonName === undefined) {
        field.jsonName = protoCamelCase(field.name);
      }
    }
    message.nestedType.forEach(restoreJsonNames);
  };
  proto.messageType.forEach(restoreJsonNames);
  return proto;
}

/** A JavaScript identifier: a property name that needs no quotes, or a name a module can export. */
export const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

/**
 * JavaScript source that recreates messages as protobuf-es creates them. A
 * message with a prototype (proto2's field defaults, one per message type) is
 * made by a function of its type, written once into {@linkcode declarations}:
 * `(fields) => Object.assign(Object.create(prototype), { $typeName }, fields)`.
 */
export class MessageLiteralWriter {
  readonly #types = new Map<object, { factory: string; typeName: unknown }>();
  /** `const` statements of the prototypes and functions the written expressions use. */
  readonly declarations: string[] = [];

  /** An expression for `value`, a message or one of its field values. */
  write(value: unknown): string {
    switch (typeof value) {
      case "undefined":
        return "void 0";
      case "bigint":
        return `${value}n`;
      case "number":
        // JSON would write NaN and the infinities as null, and -0 as 0.
        if (!Number.isFinite(value) || Object.is(value, -0)) {
          throw new Error(`cannot write the number ${value} into a descriptor literal`);
        }
        return JSON.stringify(value);
      case "string":
      case "boolean":
        return JSON.stringify(value);
      case "object":
        break;
      default:
        throw new Error(`cannot write a ${typeof value} into a descriptor literal`);
    }
    if (value === null) return "null";
    if (value instanceof Uint8Array) return `new Uint8Array([${value.join(",")}])`;
    if (Array.isArray(value)) return `[${value.map((item) => this.write(item)).join(",")}]`;
    const prototype = Object.getPrototypeOf(value);
    if (prototype === Object.prototype) return this.#objectLiteral(value);
    const { $typeName, ...fields } = value as Record<string, unknown>;
    // Pure, as protobuf-es's own `fileDesc` calls are: a module left unused (e.g. inside a lazily
    // imported part of a bundle) keeps none of its descriptor.
    return `/*@__PURE__*/${this.#factory(prototype, $typeName)}(${this.#objectLiteral(fields)})`;
  }

  /** The function that makes messages with `prototype`, all of type `typeName`. */
  #factory(prototype: object, typeName: unknown): string {
    const known = this.#types.get(prototype);
    if (known !== undefined) {
      if (known.typeName !== typeName) throw new Error(`two message types share a prototype: ${typeName}`);
      return known.factory;
    }
    if (typeof typeName !== "string" || Object.getPrototypeOf(prototype) !== Object.prototype) {
      throw new Error("cannot write a message that is not as protobuf-es creates it");
    }
    const factory = `$message${this.#types.size}`;
    this.#types.set(prototype, { factory, typeName });
    this.declarations.push(
      `const ${factory}Prototype=${this.#objectLiteral(prototype)};`,
      `const ${factory}=(fields)=>Object.assign(Object.create(${factory}Prototype),{$typeName:${
        JSON.stringify(typeName)
      }},fields);`,
    );
    return factory;
  }

  #objectLiteral(value: object): string {
    const keys = Reflect.ownKeys(value);
    const entries = keys.map((key) => {
      if (typeof key !== "string" || !Object.getOwnPropertyDescriptor(value, key)?.enumerable) {
        throw new Error(`cannot write the property ${String(key)} into a descriptor literal`);
      }
      const name = IDENTIFIER.test(key) ? key : JSON.stringify(key);
      return `${name}:${this.write((value as Record<string, unknown>)[key])}`;
    });
    return `{${entries.join(",")}}`;
  }
}

/**
 * `source` (a protobuf-es generated module) with every `fileDesc("<base64>", …)`
 * replaced by `embeddedFile(<the decoded descriptor>, …)`; undefined when it
 * has none.
 */
export function inlineEmbeddedDescriptors(source: string): string | undefined {
  const writer = new MessageLiteralWriter();
  let found = false;
  const rewritten = source.replace(FILE_DESC_CALL, (_call, base64: string) => {
    found = true;
    return `${EMBEDDED_FILE}(${writer.write(decodeEmbeddedDescriptor(base64))}`;
  });
  if (!found) return undefined;
  // One left behind (written another way) would still need descriptor.proto's descriptor at start.
  if (ANY_FILE_DESC_CALL.test(rewritten)) throw new Error('a fileDesc call that is not fileDesc("<base64>"');
  const hashbang = /^#!.*\n/.exec(rewritten)?.[0] ?? "";
  return `${hashbang}import { embeddedFile as ${EMBEDDED_FILE} } from ${JSON.stringify(EMBEDDED_FILE_MODULE)};
${writer.declarations.join("\n")}
${rewritten.slice(hashbang.length)}`;
}

/** The esbuild plugin: every generated module (`*_pb.ts`, `*_pb.js`) bundled gets its descriptors inlined. */
export function embeddedDescriptorsPlugin(): Plugin {
  return {
    name: "embedded-descriptors",
    setup(build) {
      build.onLoad({ filter: /_pb\.[jt]s$/ }, async ({ path }) => {
        const contents = inlineEmbeddedDescriptors(await Deno.readTextFile(path));
        if (contents === undefined) return undefined;
        return { contents, loader: path.endsWith(".ts") ? "ts" : "js" };
      });
    },
  };
}
