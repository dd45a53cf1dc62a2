/**
 * The attestation config file (`/var/config/attestationConfig`): which
 * variant the cluster uses, the expected measurements, and which TPM
 * attestation keys are trusted.
 *
 * ```json
 * {
 *   "variant": "qemu-vtpm",
 *   "measurements": {"4": {"expected": "<64 hex>", "warnOnly": false}},
 *   "akTrust": {"allowedKeyDigests": ["<64 hex>", "<64 hex>"], "controlPlaneKeyDigests": ["<64 hex>"]}
 * }
 * ```
 *
 * `akTrust` says which attestation keys are trusted: either
 * `allowedKeyDigests` (lower-case or upper-case hex SHA-256 digests of the
 * attestation keys, as the TPM variant defines them) or `"trustAnyKey":
 * true`, the original's unconditional QEMU trust, which must be chosen
 * explicitly and is INSECURE: any software key then passes, so anyone can
 * forge evidence without a TPM (see `tpm/validator.ts`). It is required for
 * `qemu-vtpm`.
 *
 * It also says which keys may join as control planes, which receive the
 * cluster's CA keys: workers and control planes boot the same image, so
 * measurements cannot tell them apart, and the role a node asks for is its
 * own claim. `controlPlaneKeyDigests` lists them (each must also be in
 * `allowedKeyDigests`; with `trustAnyKey` a listed key still binds the role
 * to that TPM, since only it can sign with the key); `"controlPlaneAnyKey":
 * true` lets any key join as a control plane and needs `trustAnyKey`
 * (development only, INSECURE); with neither, no node may join as a control
 * plane. `dummy` evidence has no keys: its config may only opt in with
 * `{"trustAnyKey": true, "controlPlaneAnyKey": true}`, and its `akTrust` is
 * otherwise checked for shape and unused.
 *
 * `measurements` is optional for `dummy`, which never checks them. For
 * `qemu-vtpm` they must be usable, and this parser is the one place that
 * checks it (the validator compares whatever map it is given):
 * - at least one measurement, and at least one of them enforced: an empty or
 *   all-`warnOnly` map would accept any boot chain;
 * - only 32-byte values (SHA-256 PCRs; 48-byte TDX values could never match);
 * - only PCRs 0–15, the PCRs the issuer quotes: any other index is never
 *   reported, so it could never match (enforced, it would reject every node).
 *
 * Each error names the offending key.
 *
 * Parsing is strict: unknown fields, repeated keys, wrong types and
 * malformed values are errors naming the field; a value or name from the
 * file is quoted escaped and cut short (the join service logs the error at
 * start and at every failed reload). The file is read up to
 * {@linkcode ATTESTATION_CONFIG_MAX_BYTES}. The file's variant must equal the variant the
 * service was started with: the variant never changes at runtime.
 *
 * @module
 */
import { errorMessage } from "../error_message.ts";
import { ReasonError } from "../reason_error.ts";
import { readRegularFile } from "../fs/read_regular_file.ts";
import { jsonSyntaxError } from "../json/syntax_error.ts";
import { quoted } from "../json/quoted.ts";
import { repeatedKeyProblem } from "../json/repeated_key.ts";
import type { AkTrust, Measurements } from "./attestation.ts";
import { describeType, isPlainObject, MeasurementsError, parseMeasurements } from "./measurements.ts";
import { knownVariants } from "./registry.ts";
import { DUMMY_VARIANT } from "./dummy.ts";
import { QEMU_VTPM_VARIANT } from "./tpm/validator.ts";
import { QUOTED_PCRS, SHA256_PCR_LENGTH } from "./tpm/document.ts";

/** A parsed attestation config. */
export interface AttestationConfig {
  /** The attestation variant, e.g. "qemu-vtpm". */
  variant: string;
  /** Expected measurements (empty for a `dummy` config without them). */
  measurements: Measurements;
  /** Trusted attestation keys. Always `{ kind: "any" }` for `dummy`, which has no keys. */
  akTrust: AkTrust;
  /**
   * The attestation keys that may join as control planes (and so receive
   * the cluster's CA keys): an allow-list, empty unless the operator names
   * keys, or any trusted key when the operator chose that explicitly.
   */
  controlPlanes: AkTrust;
}

/** Why a config was rejected. */
export type AttestationConfigFailure =
  | "unreadable" // the file cannot be read
  | "invalid-json" // the content is not JSON
  | "invalid-config" // JSON, but not a valid config
  | "variant-mismatch"; // a valid config for another variant than the service's

/** The attestation config is unreadable or invalid. The message names the field. */
export class AttestationConfigError extends ReasonError<AttestationConfigFailure> {}

/** Options for {@linkcode parseAttestationConfig}. */
export interface ParseAttestationConfigOptions {
  /** The variant the service runs (`--attestation-variant`); the file must name the same one. */
  variant: string;
  /** Where the text came from, for error messages; default "attestation config". */
  source?: string;
}

const TOP_LEVEL_FIELDS = ["variant", "measurements", "akTrust"];
const AK_TRUST_FIELDS = ["allowedKeyDigests", "trustAnyKey", "controlPlaneKeyDigests", "controlPlaneAnyKey"];
const AK_TRUST_HINT =
  'list the trusted attestation key digests ({"akTrust": {"allowedKeyDigests": ["<64 hex>", ...]}}) or set {"akTrust": {"trustAnyKey": true}} explicitly';

/** Parses attestation config JSON text. Throws {@linkcode AttestationConfigError}. */
export function parseAttestationConfig(
  text: string,
  options: ParseAttestationConfigOptions,
): AttestationConfig {
  const source = options.source ?? "attestation config";
  const fail = (
    message: string,
    reason: AttestationConfigFailure = "invalid-config",
    cause?: unknown,
  ): never => {
    throw new AttestationConfigError(reason, `${source}: ${message}`, { cause });
  };

  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    // V8's message carries the position ("at position 7 (line 1 column 8)") where it knows it.
    fail(`invalid JSON: ${jsonSyntaxError(error)}`, "invalid-json", error);
  }
  // JSON.parse keeps the last of two equal keys: which of two measurements counts must not be a guess.
  const repeated = repeatedKeyProblem(text);
  if (repeated !== undefined) fail(repeated);
  if (!isPlainObject(value)) return fail(`want a JSON object, got ${describeType(value)}`);
  for (const field of Object.keys(value)) {
    if (!TOP_LEVEL_FIELDS.includes(field)) {
      fail(`unknown field ${quoted(field)} (known: ${TOP_LEVEL_FIELDS.join(", ")})`);
    }
  }

  if (!("variant" in value)) fail(`variant is missing (known: ${knownVariants().join(", ")})`);
  if (typeof value.variant !== "string") fail(`variant must be a string, got ${describeType(value.variant)}`);
  const variant = value.variant as string;
  if (!knownVariants().includes(variant)) {
    fail(`unknown attestation variant ${quoted(variant)}; known: ${knownVariants().join(", ")}`);
  }
  if (variant !== options.variant) {
    fail(
      `the config is for attestation variant "${variant}" but this service runs "${options.variant}"; the variant is fixed at start and never changes at runtime`,
      "variant-mismatch",
    );
  }

  let measurements: Measurements = new Map();
  if ("measurements" in value) {
    try {
      measurements = parseMeasurements(value.measurements);
    } catch (error) {
      if (!(error instanceof MeasurementsError)) throw error;
      fail(error.message, "invalid-config", error);
    }
  } else if (variant !== DUMMY_VARIANT) {
    fail(`measurements are missing: a ${variant} config must list the expected measurements`);
  }
  if (variant !== DUMMY_VARIANT && measurements.size === 0) {
    fail(`measurements are empty: a ${variant} config must list at least one expected measurement`);
  }
  if (variant === QEMU_VTPM_VARIANT) checkTpmMeasurements(variant, measurements, fail);

  const trust = "akTrust" in value ? parseAkTrust(value.akTrust, variant, fail) : undefined;
  if (variant === DUMMY_VARIANT) {
    // Dummy evidence has no key to trust; only the control-plane choice means something.
    const controlPlanes: AkTrust = trust?.controlPlanes ?? { kind: "allow-list", keyDigests: new Set() };
    return { variant, measurements, akTrust: { kind: "any" }, controlPlanes };
  }
  if (trust === undefined) return fail(`akTrust is missing: ${AK_TRUST_HINT}`);
  return { variant, measurements, ...trust };
}

/** The `qemu-vtpm` rules on measurements (see the module docs). */
function checkTpmMeasurements(
  variant: string,
  measurements: Measurements,
  fail: (message: string) => never,
): void {
  const first = QUOTED_PCRS[0];
  const last = QUOTED_PCRS[QUOTED_PCRS.length - 1];
  for (const [index, measurement] of measurements) {
    if (measurement.expected.length !== SHA256_PCR_LENGTH) {
      fail(
        `measurement "${index}": expected is ${measurement.expected.length} bytes, but ${variant} measurements are SHA-256 PCR values of ${SHA256_PCR_LENGTH} bytes`,
      );
    }
    if (!QUOTED_PCRS.includes(index)) {
      fail(
        `measurement "${index}": ${variant} evidence reports PCRs ${first} to ${last} only, so PCR ${index} could never match`,
      );
    }
  }
  if ([...measurements.values()].every((measurement) => measurement.warnOnly)) {
    const keys = [...measurements.keys()].map((index) => `"${index}"`).join(", ");
    fail(
      `measurements ${keys} are all warnOnly: a ${variant} config must enforce at least one measurement, or any boot chain is accepted`,
    );
  }
}

/** What `akTrust` says: which keys are trusted, and which of them may join as control planes. */
interface ParsedAkTrust {
  akTrust: AkTrust;
  controlPlanes: AkTrust;
}

function parseAkTrust(value: unknown, variant: string, fail: (message: string) => never): ParsedAkTrust {
  if (!isPlainObject(value)) {
    return fail(`akTrust must be an object, got ${describeType(value)}; ${AK_TRUST_HINT}`);
  }
  for (const field of Object.keys(value)) {
    if (!AK_TRUST_FIELDS.includes(field)) {
      fail(`akTrust: unknown field ${quoted(field)} (known: ${AK_TRUST_FIELDS.join(", ")})`);
    }
  }
  const hasList = "allowedKeyDigests" in value;
  const hasAny = "trustAnyKey" in value;
  if (hasList && hasAny) fail("akTrust: set either allowedKeyDigests or trustAnyKey, not both");
  let akTrust: AkTrust;
  if (hasAny) {
    if (value.trustAnyKey !== true) {
      fail(
        `akTrust: trustAnyKey must be true when present, got ${
          quoted(value.trustAnyKey)
        }; to restrict the keys, list them in allowedKeyDigests`,
      );
    }
    akTrust = { kind: "any" };
  } else if (hasList) {
    const keyDigests = parseKeyDigests(value.allowedKeyDigests, "allowedKeyDigests", fail);
    if (keyDigests.size === 0) fail(`akTrust: allowedKeyDigests is empty: ${AK_TRUST_HINT}`);
    akTrust = { kind: "allow-list", keyDigests };
  } else {
    return fail(`akTrust is empty: ${AK_TRUST_HINT}`);
  }
  return { akTrust, controlPlanes: parseControlPlanes(value, akTrust, variant, fail) };
}

/**
 * The keys that may join as control planes (see the module docs): the
 * `controlPlaneKeyDigests` list (each also trusted by `akTrust`), or any key
 * with `controlPlaneAnyKey`, which needs `trustAnyKey`; none when neither is
 * set.
 */
function parseControlPlanes(
  value: Record<string, unknown>,
  akTrust: AkTrust,
  variant: string,
  fail: (message: string) => never,
): AkTrust {
  const hasList = "controlPlaneKeyDigests" in value;
  const hasAny = "controlPlaneAnyKey" in value;
  if (hasList && hasAny) fail("akTrust: set either controlPlaneKeyDigests or controlPlaneAnyKey, not both");
  if (hasAny) {
    if (value.controlPlaneAnyKey !== true) {
      fail(
        `akTrust: controlPlaneAnyKey must be true when present, got ${
          quoted(value.controlPlaneAnyKey)
        }; to choose the control planes, list their keys in controlPlaneKeyDigests`,
      );
    }
    if (akTrust.kind !== "any") {
      fail(
        "akTrust: controlPlaneAnyKey needs trustAnyKey; with allowedKeyDigests, list the control planes' keys in controlPlaneKeyDigests",
      );
    }
    return { kind: "any" };
  }
  if (!hasList) return { kind: "allow-list", keyDigests: new Set() };
  if (variant === DUMMY_VARIANT) {
    fail(
      `akTrust: controlPlaneKeyDigests cannot match ${DUMMY_VARIANT} evidence, which has no attestation key; allow control planes with {"trustAnyKey": true, "controlPlaneAnyKey": true}`,
    );
  }
  const keyDigests = parseKeyDigests(value.controlPlaneKeyDigests, "controlPlaneKeyDigests", fail);
  if (akTrust.kind === "allow-list") {
    let i = 0;
    for (const digest of keyDigests) {
      if (!akTrust.keyDigests.has(digest)) {
        fail(
          `akTrust: controlPlaneKeyDigests[${i}] is not in allowedKeyDigests; a control plane's key must be trusted too`,
        );
      }
      i++;
    }
  }
  return { kind: "allow-list", keyDigests };
}

/** A list of key digests (64 hex digits each, no duplicates), lower-cased. */
function parseKeyDigests(list: unknown, field: string, fail: (message: string) => never): Set<string> {
  if (!Array.isArray(list)) return fail(`akTrust: ${field} must be an array, got ${describeType(list)}`);
  const keyDigests = new Set<string>();
  list.forEach((digest: unknown, i) => {
    if (typeof digest !== "string" || !/^[0-9a-fA-F]{64}$/.test(digest)) {
      fail(
        `akTrust: ${field}[${i}] must be 64 hex digits (a SHA-256 digest), got ${
          typeof digest === "string" ? `${digest.length} characters` : describeType(digest)
        }`,
      );
    }
    const normalized = (digest as string).toLowerCase();
    if (keyDigests.has(normalized)) fail(`akTrust: ${field}[${i}] is listed twice`);
    keyDigests.add(normalized);
  });
  return keyDigests;
}

/**
 * Parses an operator's copy of the config (the CLI's `--attestation-config`,
 * or a config loaded into the browser console), whose variant is the one the
 * text names: no running service fixes it. Throws
 * {@linkcode AttestationConfigError}.
 */
export function parseOperatorAttestationConfig(
  text: string,
  options: { source?: string } = {},
): AttestationConfig {
  let named: unknown;
  try {
    const value: unknown = JSON.parse(text);
    named = isPlainObject(value) ? value.variant : undefined;
  } catch {
    // parseAttestationConfig reports the invalid JSON with its position.
  }
  return parseAttestationConfig(text, {
    variant: typeof named === "string" ? named : "",
    source: options.source,
  });
}

/**
 * Largest attestation config file read: 1 MiB, a ConfigMap's limit. A real
 * config is a few KiB; a larger file is refused before it is read, and no
 * error quotes more than a cut excerpt of it.
 */
export const ATTESTATION_CONFIG_MAX_BYTES = 1024 * 1024;

/**
 * Reads the config file at `path` as UTF-8 text, following symlinks (as a
 * ConfigMap volume needs). Throws {@linkcode AttestationConfigError}
 * ("unreadable", "invalid-config" for a file larger than
 * {@linkcode ATTESTATION_CONFIG_MAX_BYTES}, or "invalid-json" for bytes that
 * are not UTF-8).
 */
export async function readConfigText(path: string, signal?: AbortSignal): Promise<string> {
  let bytes: Uint8Array | undefined;
  let size: number;
  try {
    // The size first, so a huge file is not read whole (a file that grows after it is checked again).
    size = (await Deno.stat(path)).size;
    if (size <= ATTESTATION_CONFIG_MAX_BYTES) {
      bytes = await readRegularFile(path, { signal });
      size = bytes.length;
    }
  } catch (error) {
    if (signal?.aborted) throw error;
    throw new AttestationConfigError(
      "unreadable",
      `cannot read attestation config ${path}: ${errorMessage(error)}`,
      {
        cause: error,
      },
    );
  }
  if (bytes === undefined || size > ATTESTATION_CONFIG_MAX_BYTES) {
    throw new AttestationConfigError(
      "invalid-config",
      `attestation config ${path}: ${size} bytes, larger than the ${ATTESTATION_CONFIG_MAX_BYTES} bytes an attestation config may have`,
    );
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch (error) {
    throw new AttestationConfigError("invalid-json", `attestation config ${path}: not UTF-8 text`, {
      cause: error,
    });
  }
}

/** How the trusted attestation keys changed between two configs (for reload logs). */
export interface AkTrustDiff {
  /** Trust mode before and after: "allow-list" or "any". */
  from: AkTrust["kind"];
  /** The trust mode after the change. */
  to: AkTrust["kind"];
  /** Key digests trusted now but not before (when both are allow-lists; empty otherwise). */
  addedKeys: string[];
  /** Key digests trusted before but not now (when both are allow-lists; empty otherwise). */
  removedKeys: string[];
}

/** Describes the AK trust change from `before` to `after`, or undefined if there is none. */
export function diffAkTrust(before: AkTrust, after: AkTrust): AkTrustDiff | undefined {
  if (before.kind !== "allow-list" || after.kind !== "allow-list") {
    return before.kind === after.kind
      ? undefined
      : { from: before.kind, to: after.kind, addedKeys: [], removedKeys: [] };
  }
  const addedKeys = [...after.keyDigests].filter((k) => !before.keyDigests.has(k)).sort();
  const removedKeys = [...before.keyDigests].filter((k) => !after.keyDigests.has(k)).sort();
  if (addedKeys.length === 0 && removedKeys.length === 0) return undefined;
  return { from: before.kind, to: after.kind, addedKeys, removedKeys };
}
