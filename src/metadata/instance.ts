/**
 * Instance metadata as the QEMU-style metadata API carries it: the
 * original's Go `metadata.InstanceMetadata`, with its JSON field names
 * (`Name`, `ProviderID`, `Role`, `VPCIP`, `SecondaryIPRange`,
 * `AliasIPRanges`), and a strict decoder whose errors name the field.
 *
 * @module
 */
import { quoted } from "../json/quoted.ts";
import { isIP } from "node:net";
import { ReasonError } from "../reason_error.ts";

/** A node's role; on the wire "ControlPlane" or "Worker". */
export type Role = "ControlPlane" | "Worker";

/** One instance (node) of the cluster. */
export interface InstanceMetadata {
  /** Host name, e.g. "control-plane-0"; not yet normalized into a Kubernetes node name. */
  name: string;
  /** e.g. "qemu:///hostname/control-plane-0". */
  providerId: string;
  /** Whether it is a control-plane node or a worker. */
  role: Role;
  /** The instance's primary address in the cluster network; "" when it has none yet. */
  vpcIp: string;
  /** Cluster-wide pod CIDR (empty on QEMU). */
  secondaryIpRange?: string;
  /** The instance's pod CIDRs (none on QEMU). */
  aliasIpRanges?: string[];
}

/** The JSON object the original's server writes for an instance. */
export interface InstanceMetadataJson {
  /** {@linkcode InstanceMetadata.name}. */
  Name: string;
  /** {@linkcode InstanceMetadata.providerId}. */
  ProviderID: string;
  /** {@linkcode InstanceMetadata.role}. */
  Role: Role;
  /** {@linkcode InstanceMetadata.vpcIp}. */
  VPCIP: string;
  /** {@linkcode InstanceMetadata.secondaryIpRange}; "" when unset. */
  SecondaryIPRange: string;
  /** `null` where Go marshals a nil slice. */
  AliasIPRanges: string[] | null;
}

/** The provider ID the original's QEMU metadata API gives an instance. */
export function qemuProviderId(name: string): string {
  return `qemu:///hostname/${name}`;
}

/** The wire form of `instance`, field for field as Go's encoder writes it. */
export function instanceToJson(instance: InstanceMetadata): InstanceMetadataJson {
  return {
    Name: instance.name,
    ProviderID: instance.providerId,
    Role: instance.role,
    VPCIP: instance.vpcIp,
    SecondaryIPRange: instance.secondaryIpRange ?? "",
    AliasIPRanges: instance.aliasIpRanges?.length ? [...instance.aliasIpRanges] : null,
  };
}

/** A metadata answer that does not have the expected shape. The message names the field. */
export class InstanceDecodeError extends ReasonError<"malformed"> {
  /** The offending field, e.g. "VPCIP" or "[2].Role"; "" for the value as a whole. */
  readonly field: string;

  /** An error for `field` ("" for the whole value); `message` says what is wrong with it. */
  constructor(field: string, message: string) {
    super("malformed", field === "" ? message : `${field}: ${message}`);
    this.field = field;
  }
}

/**
 * Decodes one instance from parsed JSON. Strict where a wrong value would
 * mislead the node (names, roles, addresses); fields it does not know are
 * ignored, as Go's decoder does. `at` prefixes field names in errors (e.g.
 * "[2]." for an entry of a list).
 */
export function instanceFromJson(value: unknown, at = ""): InstanceMetadata {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new InstanceDecodeError(at.replace(/\.$/, ""), `want a JSON object, got ${describe(value)}`);
  }
  const object = value as Record<string, unknown>;
  const name = stringField(object, "Name", at);
  if (name === "") throw new InstanceDecodeError(`${at}Name`, "is empty");
  const providerId = optionalString(object, "ProviderID", at) ?? "";
  const vpcIp = optionalString(object, "VPCIP", at) ?? "";
  if (vpcIp !== "" && isIP(vpcIp) === 0) {
    throw new InstanceDecodeError(`${at}VPCIP`, `${quoted(vpcIp)} is not an IP address`);
  }
  const instance: InstanceMetadata = { name, providerId, role: roleField(object, at), vpcIp };
  const secondaryIpRange = optionalString(object, "SecondaryIPRange", at);
  if (secondaryIpRange) instance.secondaryIpRange = secondaryIpRange;
  const aliases = object.AliasIPRanges;
  if (aliases !== undefined && aliases !== null) {
    if (!Array.isArray(aliases) || aliases.some((entry) => typeof entry !== "string")) {
      throw new InstanceDecodeError(`${at}AliasIPRanges`, `want a list of strings, got ${describe(aliases)}`);
    }
    if (aliases.length > 0) instance.aliasIpRanges = aliases;
  }
  return instance;
}

/** Decodes a list of instances (`null`, what Go writes for no instances, is the empty list). */
export function instancesFromJson(value: unknown): InstanceMetadata[] {
  if (value === null) return [];
  if (!Array.isArray(value)) {
    throw new InstanceDecodeError("", `want a JSON list of instances, got ${describe(value)}`);
  }
  return value.map((entry, index) => instanceFromJson(entry, `[${index}].`));
}

/**
 * Go's role parsing (case-insensitive, "control-plane" too), except that
 * anything else is an error instead of the silent "Unknown" a node could
 * only fail on later.
 */
function roleField(object: Record<string, unknown>, at: string): Role {
  const text = stringField(object, "Role", at);
  switch (text.toLowerCase()) {
    case "controlplane":
    case "control-plane":
      return "ControlPlane";
    case "worker":
      return "Worker";
  }
  throw new InstanceDecodeError(
    `${at}Role`,
    `${quoted(text)} is not a role (want "ControlPlane" or "Worker")`,
  );
}

function stringField(object: Record<string, unknown>, field: string, at: string): string {
  const value = object[field];
  if (value === undefined) throw new InstanceDecodeError(`${at}${field}`, "is missing");
  if (typeof value !== "string") {
    throw new InstanceDecodeError(`${at}${field}`, `want a string, got ${describe(value)}`);
  }
  return value;
}

function optionalString(object: Record<string, unknown>, field: string, at: string): string | undefined {
  return object[field] === undefined ? undefined : stringField(object, field, at);
}

/** A short description of a JSON value for error messages. */
function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "an object";
  return `${typeof value} ${quoted(value, 40)}`;
}
