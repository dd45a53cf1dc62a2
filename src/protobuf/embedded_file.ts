/**
 * The runtime half of the build's embedded descriptors
 * (`scripts/embedded_descriptors.ts`): a generated file's descriptor from the
 * `FileDescriptorProto` the build decoded, instead of from the base64 that
 * protobuf-es's generated code embeds.
 *
 * Decoding that base64 at start needs protobuf-es's own descriptor of
 * `google/protobuf/descriptor.proto`, and building it took about 10 ms of
 * every service's start (most of the protobuf runtime's share of it).
 *
 * `createFileRegistry` comes from protobuf-es's index, which (through its
 * JSON code) imports the well-known types' modules, of which this module is
 * an import once the build has rewritten them: a cycle, which resolves
 * because those modules load the registry first through their own import of
 * `@bufbuild/protobuf/codegenv2`. The built services' tests run it.
 *
 * @module
 */
import { createFileRegistry, type DescFile } from "@bufbuild/protobuf";
import type { FileDescriptorProto } from "@bufbuild/protobuf/wkt";

/**
 * What protobuf-es's `fileDesc(base64, imports)` returns, given the message
 * it decodes from the base64 (with the JSON names it restores): `proto`'s
 * dependencies are `imports`, in their order, as there. Unlike `fileDesc`, it
 * also checks the file's names (`createFileRegistry`; the registry without
 * that check is not exported), which takes well under a millisecond.
 *
 * @param proto The file's descriptor, as `fromBinary(FileDescriptorProtoSchema, …)` creates it; taken over.
 * @param imports The descriptors of the files it imports.
 */
export function embeddedFile(proto: FileDescriptorProto, imports?: readonly DescFile[]): DescFile {
  proto.dependency = imports?.map((file) => file.proto.name) ?? [];
  const registry = createFileRegistry(proto, (name) => imports?.find((file) => file.proto.name === name));
  const file = registry.getFile(proto.name);
  if (file === undefined) throw new Error(`embedded descriptor ${proto.name}: not in its own registry`);
  return file;
}
