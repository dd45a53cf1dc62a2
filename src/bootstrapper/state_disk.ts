/**
 * The node's encrypted state disk (reference §7), through `cryptsetup` on the
 * LUKS2 device or a file-backed LUKS2 header.
 *
 * On first boot the disk-mapper formats the disk with a random passphrase in
 * keyslot 0, stored in the initial passphrase file. When the node takes the
 * node lock, the bootstrapper replaces that passphrase with the disk key the
 * cluster's key service derives for this disk's UUID, then marks LUKS2 token 0
 * initialized so the next boot rejoins instead of reformatting.
 *
 * Secrets never reach argv: the initial passphrase stays in its file (its path
 * goes to cryptsetup), new and tested keys go through stdin as raw bytes
 * (cryptsetup reads a key file `-` to end of input, so any byte is fine).
 * Calls are serialized, like the original's (libcryptsetup is not
 * thread-safe, and two header writers would race).
 *
 * Needs `--allow-run=<cryptsetup>` and read access to the initial passphrase
 * file (to tell a missing file apart).
 *
 * @module
 */
import { measurementSaltTag } from "../kms/keys.ts";
import { ReasonError } from "../reason_error.ts";
import { exitStatus, runTool, stderrExcerpt, ToolError, type ToolOutput } from "../os/run_tool.ts";

/** Token 0's type on a Constellation state disk. */
export const STATE_DISK_TOKEN_TYPE = "constellation-state-disk";

/** The keyslot holding the disk's passphrase. */
export const STATE_DISK_KEYSLOT = 0;

/** Why a state-disk operation failed. */
export type StateDiskFailure =
  /** The initial passphrase file does not exist. */
  | "initial-passphrase-missing"
  /** The initial passphrase file does not open keyslot 0 (already changed, or the wrong file). */
  | "initial-passphrase-wrong"
  /** The device (or header) is missing or not LUKS. */
  | "not-luks"
  /** The device (or header) does not exist, or cryptsetup cannot open it (checked at start). */
  | "device-unavailable"
  /** The "initialized" token could not be written (the passphrase is already changed). */
  | "token-failed"
  /** cryptsetup failed otherwise. */
  | "cryptsetup-failed"
  /** cryptsetup could not run (missing, not permitted). */
  | "cryptsetup-unavailable"
  /** The signal aborted the call. */
  | "aborted";

/** A state-disk operation failed. Messages name the device and cryptsetup's stderr, never a key. */
export class StateDiskError extends ReasonError<StateDiskFailure> {
  /** cryptsetup's exit code, when it ran. */
  readonly exitCode?: number | null;

  /** A failure for `reason`; `exitCode` when cryptsetup ran. */
  constructor(
    reason: StateDiskFailure,
    message: string,
    options?: ErrorOptions & { exitCode?: number | null },
  ) {
    super(reason, message, options);
    if (options && "exitCode" in options) this.exitCode = options.exitCode;
  }
}

/** The key-derivation settings for new keyslots; cryptsetup's defaults (argon2id) when unset. */
export interface LuksPbkdf {
  /** PBKDF algorithm. */
  type: "pbkdf2" | "argon2i" | "argon2id";
  /** Fixed iteration count (skips benchmarking; cheap values only for tests). */
  forceIterations?: number;
  /** Argon2 memory cost in KiB. */
  memoryKiB?: number;
}

/** Options of {@linkcode LuksStateDisk}. */
export interface LuksStateDiskOptions {
  /** The LUKS2 device, or the data device when `header` is set, or a LUKS2 container file. */
  device: string;
  /** cryptsetup binary; default "cryptsetup" (found on PATH by Deno). */
  cryptsetup?: string;
  /** File holding the initial passphrase (raw bytes), e.g. `/run/cryptsetup-keys.d/state.key`. */
  initialPassphraseFile: string;
  /** A detached LUKS2 header file (`--header`). */
  header?: string;
  /** Key derivation for the changed keyslot; cryptsetup's default when unset. */
  pbkdf?: LuksPbkdf;
  /** Environment of cryptsetup (nothing is inherited); default empty. */
  env?: Record<string, string>;
}

/** What an initialized disk's token records about its cluster. */
export interface SaltRecord {
  /** The cluster's measurement salt (public). */
  measurementSalt: Uint8Array;
  /** The cluster's measurement secret: only the salt's tag under it is recorded. */
  measurementSecret: Uint8Array;
}

/** A salt as token 0 recorded it, with its tag ({@linkcode measurementSaltTag}). */
export interface RecordedSalt {
  /** The measurement salt. */
  salt: Uint8Array;
  /** HMAC of the salt under the cluster's measurement secret. */
  tag: Uint8Array;
}

/**
 * Whether `recorded`'s tag is its salt's under `measurementSecret` (and, given `salt`, whether that is the
 * salt recorded): a salt changed in the unencrypted header does not verify.
 */
export async function isRecordedSaltOf(
  recorded: RecordedSalt,
  measurementSecret: Uint8Array,
  salt: Uint8Array = recorded.salt,
): Promise<boolean> {
  const tag = await measurementSaltTag(measurementSecret, recorded.salt);
  return recorded.salt.toHex() === salt.toHex() && tag.toHex() === recorded.tag.toHex();
}

/** Options of every call. */
export interface StateDiskCallOptions {
  /** Aborting kills cryptsetup. A header write already under way may have completed. */
  signal?: AbortSignal;
}

/** cryptsetup's exit code for "no key available with this passphrase". */
const EXIT_WRONG_PASSPHRASE = 2;
/** cryptsetup's exit code for "device does not exist or access denied". */
const EXIT_WRONG_DEVICE = 4;

/** The state disk over cryptsetup. */
export class LuksStateDisk {
  readonly #options: LuksStateDiskOptions;
  readonly #binary: string;
  #queue: Promise<unknown> = Promise.resolve();
  /** The UUID, once read. */
  #uuid: string | undefined;

  /** A state disk at `options.device` (not touched until the first call). */
  constructor(options: LuksStateDiskOptions) {
    this.#options = options;
    this.#binary = options.cryptsetup ?? "cryptsetup";
  }

  /**
   * Throws {@linkcode StateDiskError} ("device-unavailable") unless the device (and the header, when
   * set) exists and cryptsetup can open it; whether it holds LUKS is left to the calls that read it,
   * once the node serves. Asked of cryptsetup, which reads the disk anyway, not of Deno: Deno 2.9.6
   * refuses every path under /dev (a real state disk's) without `--allow-all`, whatever `--allow-read`
   * says.
   */
  checkPresent(options: StateDiskCallOptions = {}): Promise<void> {
    return this.#serialized(async () => {
      const output = await this.#cryptsetup(["isLuks", ...this.#target()], {}, options);
      if (output.code !== EXIT_WRONG_DEVICE) return;
      throw new StateDiskError(
        "device-unavailable",
        `${this.#name()}: does not exist or cannot be opened (${exitStatus(output)}): ${
          stderrExcerpt(output.stderr)
        }`,
        { exitCode: output.code },
      );
    });
  }

  /**
   * The LUKS UUID, lower-case (the key service derives the disk key from `key-<uuid>`), read from
   * the disk once and then remembered.
   *
   * @throws {StateDiskError}
   */
  uuid(options: StateDiskCallOptions = {}): Promise<string> {
    // Read once: the join client reads it at start, Init and the rejoin need it again, and nothing here
    // changes a disk's UUID; each cryptsetup run costs a process start.
    if (this.#uuid !== undefined) return Promise.resolve(this.#uuid);
    return this.#serialized(async () => {
      const output = await this.#cryptsetup(["luksUUID", ...this.#target()], {}, options);
      if (!output.success) throw await this.#failure("reading the LUKS UUID", output, options);
      const uuid = output.stdout.trim().toLowerCase();
      if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(uuid)) {
        throw new StateDiskError("cryptsetup-failed", `${this.#name()}: cryptsetup printed no UUID`);
      }
      return this.#uuid = uuid;
    });
  }

  /**
   * Whether LUKS2 token 0 says `{"type":"constellation-state-disk","diskIsInitialized":true}`.
   *
   * @throws {StateDiskError}
   */
  async isInitialized(options: StateDiskCallOptions = {}): Promise<boolean> {
    return (await this.#token(options))?.diskIsInitialized === true;
  }

  /**
   * The cluster's measurement salt that token 0 records (fields `measurementSalt` and
   * `measurementSaltTag`, base64), or undefined when it records none (a disk initialized by an older
   * bootstrapper) or a malformed one. Public, like the cluster's `join-config`, but written where
   * anyone with the disk can change it: check the tag ({@linkcode measurementSaltTag}) before use.
   * A recovery needs it while the disk is still closed.
   *
   * @throws {StateDiskError}
   */
  async measurementSalt(options: StateDiskCallOptions = {}): Promise<RecordedSalt | undefined> {
    const token = await this.#token(options);
    try {
      if (typeof token?.measurementSalt !== "string" || typeof token.measurementSaltTag !== "string") {
        return undefined;
      }
      return {
        salt: Uint8Array.fromBase64(token.measurementSalt),
        tag: Uint8Array.fromBase64(token.measurementSaltTag),
      };
    } catch {
      return undefined;
    }
  }

  /**
   * Replaces keyslot 0's initial passphrase (from the initial passphrase
   * file) by `newKey` (raw bytes), then writes token 0 as initialized,
   * recording the cluster's `measurementSalt` and its tag under the
   * `measurementSecret` (see {@linkcode LuksStateDisk.measurementSalt}). The initial passphrase file
   * itself is left as it is (the disk-mapper rewrites it on the next boot).
   *
   * When the initial passphrase is missing or wrong the disk is unchanged.
   * When the token write fails (reason "token-failed") the passphrase is
   * already `newKey`.
   *
   * @throws {StateDiskError}
   */
  changePassphrase(
    newKey: Uint8Array,
    record: SaltRecord,
    options: StateDiskCallOptions = {},
  ): Promise<void> {
    if (newKey.length === 0) return Promise.reject(new RangeError("the new disk key must not be empty"));
    return this.#serialized(async () => {
      const keyFile = this.#options.initialPassphraseFile;
      await assertFileExists(keyFile);
      const changed = await this.#cryptsetup(
        [
          "luksChangeKey",
          "--batch-mode",
          "--key-slot",
          String(STATE_DISK_KEYSLOT),
          "--key-file",
          keyFile,
          ...this.#pbkdfArgs(),
          ...this.#target(),
          // The new key file "-": read from stdin to its end.
          "-",
        ],
        { stdin: newKey },
        options,
      );
      if (!changed.success) {
        if (changed.code === EXIT_WRONG_PASSPHRASE) {
          throw new StateDiskError(
            "initial-passphrase-wrong",
            `${this.#name()}: the initial passphrase file ${keyFile} does not open keyslot ${STATE_DISK_KEYSLOT} ` +
              "(was the passphrase already changed?)",
            { exitCode: changed.code },
          );
        }
        throw await this.#failure("changing the passphrase", changed, options);
      }
      const imported = await this.#importToken(record, options);
      if (!imported.success) {
        throw new StateDiskError(
          "token-failed",
          `${this.#name()}: the passphrase was changed, but marking the disk initialized failed ` +
            `(${exitStatus(imported)}): ${stderrExcerpt(imported.stderr)}`,
          { exitCode: imported.code },
        );
      }
    });
  }

  /**
   * Records the cluster's salt and its tag in the token of a disk initialized before tokens held them
   * (the rejoin does, once a join service's ticket proved them), so that the node can be recovered.
   *
   * @throws {StateDiskError} ("token-failed")
   */
  recordSalt(record: SaltRecord, options: StateDiskCallOptions = {}): Promise<void> {
    return this.#serialized(async () => {
      const imported = await this.#importToken(record, options);
      if (!imported.success) {
        throw new StateDiskError(
          "token-failed",
          `${this.#name()}: recording the measurement salt failed (${exitStatus(imported)}): ${
            stderrExcerpt(imported.stderr)
          }`,
          { exitCode: imported.code },
        );
      }
    });
  }

  /**
   * Whether `key` (raw bytes) opens a keyslot (`cryptsetup open --test-passphrase`, no mapping).
   *
   * @throws {StateDiskError} when cryptsetup fails for another reason than a wrong key
   */
  testPassphrase(key: Uint8Array, options: StateDiskCallOptions = {}): Promise<boolean> {
    return this.#serialized(async () => {
      const output = await this.#cryptsetup(
        ["open", "--test-passphrase", "--key-file=-", ...this.#target()],
        { stdin: key },
        options,
      );
      if (output.success) return true;
      if (output.code === EXIT_WRONG_PASSPHRASE) return false;
      throw await this.#failure("testing a passphrase", output, options);
    });
  }

  /** Writes token 0 as initialized, with `record`'s salt and its tag. */
  async #importToken(record: SaltRecord, options: StateDiskCallOptions): Promise<ToolOutput> {
    const tag = await measurementSaltTag(record.measurementSecret, record.measurementSalt);
    const token = JSON.stringify({
      type: STATE_DISK_TOKEN_TYPE,
      keyslots: [],
      diskIsInitialized: true,
      measurementSalt: record.measurementSalt.toBase64(),
      measurementSaltTag: tag.toBase64(),
    });
    return await this.#cryptsetup(
      ["token", "import", "--token-replace", "--token-id", "0", ...this.#target()],
      { stdin: new TextEncoder().encode(token) },
      options,
    );
  }

  /** Token 0's fields when it is a state-disk token; undefined otherwise. */
  #token(options: StateDiskCallOptions): Promise<Record<string, unknown> | undefined> {
    return this.#serialized(async () => {
      const output = await this.#cryptsetup(
        ["luksDump", "--dump-json-metadata", ...this.#target()],
        {},
        options,
      );
      if (!output.success) throw await this.#failure("reading the LUKS2 metadata", output, options);
      let token: unknown;
      try {
        token = (JSON.parse(output.stdout) as { tokens?: Record<string, unknown> }).tokens?.["0"];
      } catch {
        throw new StateDiskError(
          "cryptsetup-failed",
          `${this.#name()}: cryptsetup printed malformed metadata`,
        );
      }
      if (typeof token !== "object" || token === null) return undefined;
      const fields = token as Record<string, unknown>;
      return fields.type === STATE_DISK_TOKEN_TYPE ? fields : undefined;
    });
  }

  #target(): string[] {
    const { header, device } = this.#options;
    return header === undefined ? [device] : ["--header", header, device];
  }

  #pbkdfArgs(): string[] {
    const pbkdf = this.#options.pbkdf;
    if (!pbkdf) return [];
    const args = ["--pbkdf", pbkdf.type];
    if (pbkdf.forceIterations !== undefined) {
      args.push("--pbkdf-force-iterations", String(pbkdf.forceIterations));
    }
    if (pbkdf.memoryKiB !== undefined) args.push("--pbkdf-memory", String(pbkdf.memoryKiB));
    return args;
  }

  #name(): string {
    const { header, device } = this.#options;
    return header === undefined ? `state disk ${device}` : `state disk ${device} (header ${header})`;
  }

  /** An error for a failed run; a device without a LUKS header is told apart (`cryptsetup isLuks`). */
  async #failure(what: string, output: ToolOutput, options: StateDiskCallOptions): Promise<StateDiskError> {
    // luksUUID fails with a bare exit code 1 and no message on a device that is not LUKS: ask.
    const notLuks = output.code === EXIT_WRONG_DEVICE ||
      (output.code === 1 && !(await this.#cryptsetup(["isLuks", ...this.#target()], {}, options)).success);
    return new StateDiskError(
      notLuks ? "not-luks" : "cryptsetup-failed",
      `${this.#name()}: ${what} failed (${exitStatus(output)})${notLuks ? ": not a LUKS device" : ""}: ${
        stderrExcerpt(output.stderr)
      }`,
      { exitCode: output.code },
    );
  }

  async #cryptsetup(
    args: string[],
    io: { stdin?: Uint8Array },
    options: StateDiskCallOptions,
  ): Promise<ToolOutput> {
    try {
      return await runTool(this.#binary, args, {
        env: this.#options.env ?? {},
        stdin: io.stdin,
        signal: options.signal,
      });
    } catch (error) {
      if (error instanceof ToolError) {
        throw new StateDiskError(
          error.reason === "aborted" ? "aborted" : "cryptsetup-unavailable",
          `${this.#name()}: ${error.message}`,
          { cause: error },
        );
      }
      throw error;
    }
  }

  #serialized<T>(task: () => Promise<T>): Promise<T> {
    const result = this.#queue.then(task, task);
    this.#queue = result.catch(() => {});
    return result;
  }
}

async function assertFileExists(path: string): Promise<void> {
  try {
    const info = await Deno.stat(path);
    if (!info.isFile) {
      throw new StateDiskError(
        "initial-passphrase-missing",
        `initial passphrase ${path} is not a regular file`,
      );
    }
  } catch (error) {
    if (error instanceof StateDiskError) throw error;
    if (error instanceof Deno.errors.NotFound) {
      throw new StateDiskError(
        "initial-passphrase-missing",
        `reading first boot encryption passphrase: ${path} does not exist`,
      );
    }
    throw new StateDiskError(
      "initial-passphrase-missing",
      `reading first boot encryption passphrase: ${path} cannot be checked: ${(error as Error).message}`,
      { cause: error },
    );
  }
}
