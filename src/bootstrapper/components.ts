/**
 * Kubernetes component installation (reference §6.1, with the quirks of
 * §12 items 11 and 14 fixed): for each component, in order,
 *
 *  1. **download** to a temporary file in `tmpDir` (mode 0600), hashing
 *     while writing, at most `maxDownloadBytes`; a failure (network error,
 *     status other than 200, short body) is retried with exponential backoff
 *     (1 s, 2 s, 4 s, ... capped at 30 s), never in a hot loop, until the
 *     caller's signal ends it (the init's or join's deadline; the original
 *     retried as long as its caller's context lived) or `attempts` ran out;
 *  2. **verify** `sha256:<lower-case hex>` before anything is installed; a
 *     mismatch is not retried;
 *  3. **install**: `extract == false` copies the file to `install_path`
 *     (under the node root) with mode 0544 through a temporary file in the
 *     destination directory and a rename; `extract == true` unpacks the
 *     `.tar.gz` under `install_path` after checking the **whole** archive
 *     first, so a refused archive installs nothing. Refused: absolute names,
 *     any `..` element, empty names, symlinks whose target is absolute or
 *     leaves the prefix, hard links to anything but an earlier file of the
 *     archive, entries below a symlink of the archive, devices, FIFOs and
 *     other types; sizes and entry counts are bounded. Directories get the
 *     recorded mode `& 0755`, files the recorded mode `& 0755` (no
 *     set-id bits, no group/other write), each file written to a temporary
 *     file and renamed into place (so an existing symlink is replaced, never
 *     followed);
 *  4. remove the temporary files, on every path.
 *
 * Errors are {@linkcode ComponentError}s naming the component's URL
 * (without its query) and the reason.
 *
 * @module
 */
import { dirname } from "node:path";
import { errorMessage } from "../error_message.ts";
import { createHash } from "node:crypto";
import type { Component } from "../gen/components/components_pb.ts";
import {
  COMPONENT_INSTALL_PATH_RULE,
  isComponentHash,
  isComponentInstallPath,
  isComponentUrl,
  MAX_PATH_BYTES,
} from "../joinservice/components.ts";
import type { Logger } from "../log/logger.ts";
import { ReasonError } from "../reason_error.ts";
import { errorFields, systemTimers, type Timers } from "./retry.ts";
import { type TarEntry, TarError, tarGzEntries, type TarLimits } from "./tar.ts";

/** Why a component was not installed. */
export type ComponentFailure =
  | "invalid-component" // bad hash format, URL scheme or install path
  | "download-failed" // every attempt failed
  | "too-large" // the download or the archive exceeds its bound
  | "hash-mismatch" // the download is not what the hash names
  | "unsafe-archive" // an entry would leave the prefix or is of a refused type
  | "malformed-archive" // not a tar.gz
  | "install-failed"; // writing the files failed

/** A component was not installed. */
export class ComponentError extends ReasonError<ComponentFailure> {}

/** Mode of installed (not extracted) files, as the original. */
export const COPIED_FILE_MODE = 0o544;

/** What the installer needs. */
export interface ComponentInstallerDependencies {
  /** Default the global `fetch`. */
  fetch?: typeof fetch;
  /** Backoff between download attempts; default real time. */
  timers?: Timers;
  /** Structured log; never receives a secret. */
  logger: Logger;
}

/** Where and how much. */
export interface ComponentInstallerOptions {
  /** The node's filesystem root; install paths are placed under it. Default "/". */
  root?: string;
  /** Directory of the temporary downloads (e.g. `<root>/tmp`). */
  tmpDir: string;
  /** Download attempts per component; default unlimited: until the caller's signal aborts. */
  attempts?: number;
  /** First backoff; default 1 s (doubling, capped at `maxBackoffMs`). */
  initialBackoffMs?: number;
  /** Longest backoff; default 30 s. */
  maxBackoffMs?: number;
  /** Largest download; default 512 MiB. */
  maxDownloadBytes?: number;
  /**
   * An attempt that receives nothing (no answer, no byte of the body) for
   * this long is given up and retried; default 60 s.
   */
  idleTimeoutMs?: number;
  /** Archive bounds. */
  archiveLimits?: TarLimits;
  /**
   * The `ln` binary that creates the archives' symlinks; default "ln".
   * (Deno's `Deno.symlink` needs unscoped read and write permissions, which
   * the bootstrapper does not have.)
   */
  lnBinary?: string;
}

/** {@linkcode ComponentInstallerOptions.idleTimeoutMs}'s default. */
export const DEFAULT_IDLE_TIMEOUT_MS = 60_000;

/** Downloads, verifies and installs components. */
export class ComponentInstaller {
  readonly #fetch: typeof fetch;
  readonly #timers: Timers;
  readonly #logger: Logger;
  readonly #root: string;
  readonly #options: ComponentInstallerOptions;

  /** An installer over `deps`. */
  constructor(deps: ComponentInstallerDependencies, options: ComponentInstallerOptions) {
    this.#fetch = deps.fetch ?? fetch;
    this.#timers = deps.timers ?? systemTimers;
    this.#logger = deps.logger;
    this.#root = (options.root ?? "/").replace(/\/+$/, "");
    this.#options = options;
  }

  /** Installs `components` in order; stops at the first failure. */
  async install(components: readonly Component[], options: { signal?: AbortSignal } = {}): Promise<void> {
    for (const component of components) await this.installOne(component, options);
  }

  /**
   * Checks `components` as {@linkcode installOne} would before downloading anything (hash, URL, install
   * path, and the path under this installer's root within PATH_MAX), so a caller can refuse them before
   * an irreversible step. Throws {@linkcode ComponentError} "invalid-component".
   */
  check(components: readonly Component[]): void {
    for (const component of components) this.#checked(component, this.#failing(component));
  }

  /** Installs one component. */
  async installOne(component: Component, options: { signal?: AbortSignal } = {}): Promise<void> {
    const url = displayUrl(component.url);
    const fail = this.#failing(component);
    const { expected, target } = this.#checked(component, fail);
    const temp = await this.#download(component.url, url, fail, options.signal);
    try {
      if (temp.sha256 !== expected) {
        fail(
          "hash-mismatch",
          `hash of the download sha256:${temp.sha256} does not match expected hash ${component.hash}`,
        );
      }
      if (component.extract) await this.#extract(temp.path, target, fail, options.signal);
      else await this.#copy(temp.path, target, fail, options.signal);
    } finally {
      await Deno.remove(temp.path).catch(() => {});
    }
    this.#logger.info("installed kubernetes component", { url, installPath: component.installPath });
  }

  /** How `component`'s failures are thrown: a {@linkcode ComponentError} naming its URL. */
  #failing(component: Component): (reason: ComponentFailure, why: string, cause?: unknown) => never {
    const url = displayUrl(component.url);
    return (reason, why, cause) => {
      throw new ComponentError(reason, `installing kubernetes component from URL ${url}: ${why}`, { cause });
    };
  }

  /** The component's expected SHA-256 (hex) and its path under the root, once its fields are checked. */
  #checked(
    component: Component,
    fail: (reason: ComponentFailure, why: string) => never,
  ): { expected: string; target: string } {
    if (!isComponentHash(component.hash)) {
      fail("invalid-component", `hash ${JSON.stringify(component.hash)} is not sha256:<64 lower-case hex>`);
    }
    if (!isComponentUrl(component.url)) {
      fail("invalid-component", "the URL is not https, http or data");
    }
    return {
      expected: component.hash.slice("sha256:".length),
      target: this.#placed(component.installPath, fail),
    };
  }

  /** The install path under the root ({@linkcode isComponentInstallPath}), within PATH_MAX there too. */
  #placed(installPath: string, fail: (reason: ComponentFailure, why: string) => never): string {
    if (!isComponentInstallPath(installPath)) {
      fail(
        "invalid-component",
        `install path ${JSON.stringify(installPath)} is not ${COMPONENT_INSTALL_PATH_RULE}`,
      );
    }
    const target = this.#root + installPath.replace(/\/+$/, "");
    if (new TextEncoder().encode(target).length >= MAX_PATH_BYTES) {
      fail(
        "invalid-component",
        `install path under the node's root ${this.#root} is longer than Linux allows`,
      );
    }
    return target;
  }

  /**
   * Downloads, retried with backoff until `attempts` or the caller's signal ends it; resolves to the
   * temporary file and its hash.
   */
  async #download(
    href: string,
    url: string,
    fail: (reason: ComponentFailure, why: string, cause?: unknown) => never,
    signal: AbortSignal | undefined,
  ): Promise<{ path: string; sha256: string }> {
    const attempts = this.#options.attempts ?? Infinity;
    let backoff = this.#options.initialBackoffMs ?? 1000;
    for (let attempt = 1;; attempt++) {
      signal?.throwIfAborted();
      try {
        return await this.#downloadOnce(href, signal);
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        if (error instanceof ComponentError) fail(error.reason, error.message, error);
        if (attempt >= attempts) {
          fail(
            "download-failed",
            `${attempts} download attempts failed; last: ${errorMessage(error)}`,
            error,
          );
        }
        this.#logger.warn("component download failed; retrying", {
          url,
          attempt,
          retryInMs: backoff,
          ...errorFields(error),
        });
      }
      await this.#timers.sleep(backoff, { signal });
      backoff = Math.min(backoff * 2, this.#options.maxBackoffMs ?? 30_000);
    }
  }

  async #downloadOnce(
    href: string,
    signal: AbortSignal | undefined,
  ): Promise<{ path: string; sha256: string }> {
    // A server that stops sending (a stalled mirror) fails this attempt, which is retried, instead of
    // holding the join or init until its own deadline.
    const idleMs = this.#options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    const stalled = new AbortController();
    let watchdog = new AbortController();
    const arm = () => {
      watchdog.abort();
      watchdog = new AbortController();
      this.#timers.sleep(idleMs, { signal: watchdog.signal }).then(
        () => stalled.abort(new Error(`nothing received for ${idleMs} ms`)),
        () => {},
      );
    };
    arm();
    try {
      return await this.#receive(
        href,
        signal ? AbortSignal.any([signal, stalled.signal]) : stalled.signal,
        arm,
      );
    } finally {
      watchdog.abort();
    }
  }

  /** One download to a temporary file; `received` is called on every chunk. */
  async #receive(
    href: string,
    signal: AbortSignal,
    received: () => void,
  ): Promise<{ path: string; sha256: string }> {
    const maxBytes = this.#options.maxDownloadBytes ?? 512 * 1024 ** 2;
    const response = await this.#fetch(href, { signal, redirect: "follow" });
    received();
    if (response.status !== 200) {
      await response.body?.cancel();
      throw new Error(`the server answered ${response.status}`);
    }
    const announced = response.headers.get("content-length");
    if (announced !== null && Number(announced) > maxBytes) {
      await response.body?.cancel();
      throw new ComponentError(
        "too-large",
        `the download announces ${announced} bytes, more than ${maxBytes}`,
      );
    }
    const path = `${this.#options.tmpDir}/component-${
      crypto.getRandomValues(new Uint8Array(8)).toHex()
    }.download`;
    await Deno.mkdir(this.#options.tmpDir, { recursive: true });
    const file = await Deno.open(path, { write: true, createNew: true, mode: 0o600 });
    const hash = createHash("sha256");
    let size = 0;
    try {
      try {
        for await (const chunk of response.body ?? new ReadableStream<Uint8Array>()) {
          received();
          size += chunk.length;
          if (size > maxBytes) {
            throw new ComponentError("too-large", `the download exceeds ${maxBytes} bytes`);
          }
          hash.update(chunk);
          await writeAll(file, chunk);
        }
      } finally {
        file.close();
      }
      if (announced !== null && Number(announced) !== size) {
        throw new Error(`the download has ${size} bytes, the server announced ${announced}`);
      }
      return { path, sha256: hash.digest("hex") };
    } catch (error) {
      await Deno.remove(path).catch(() => {});
      throw error;
    }
  }

  /** Copies the download to `target` (mode 0544) through a temporary file beside it. */
  async #copy(
    source: string,
    target: string,
    fail: (reason: ComponentFailure, why: string, cause?: unknown) => never,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    try {
      await Deno.mkdir(dirname(target), { recursive: true, mode: 0o755 });
      const input = await Deno.open(source, { read: true });
      await writeBeside(target, COPIED_FILE_MODE, async (write) => {
        try {
          for await (const chunk of input.readable) {
            signal?.throwIfAborted();
            await write(chunk);
          }
        } finally {
          // The readable closes the file at its end; closing twice throws.
          try {
            input.close();
          } catch { /* already closed */ }
        }
      });
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      fail("install-failed", `copying to ${target}: ${errorMessage(error)}`, error);
    }
  }

  /** Checks the whole archive, then extracts it under `prefix`. */
  async #extract(
    archive: string,
    prefix: string,
    fail: (reason: ComponentFailure, why: string, cause?: unknown) => never,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const limits = this.#options.archiveLimits;
    const entries = async function* () {
      const file = await Deno.open(archive, { read: true });
      yield* tarGzEntries(file.readable, limits);
    };
    const plan = new ExtractionPlan();
    try {
      for await (const entry of entries()) {
        // Reading a large archive takes a while; an abort (a deadline) must not wait for its end.
        signal?.throwIfAborted();
        plan.check(entry);
      }
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      if (error instanceof UnsafeEntryError) fail("unsafe-archive", error.message, error);
      if (error instanceof TarError) {
        fail(error.reason === "too-large" ? "too-large" : "malformed-archive", error.message, error);
      }
      throw error;
    }
    try {
      await Deno.mkdir(prefix, { recursive: true, mode: 0o755 });
      const realPrefix = await Deno.realPath(prefix);
      const symlink = (target: string, path: string) =>
        runLn(this.#options.lnBinary ?? "ln", target, path, signal);
      for await (const entry of entries()) {
        signal?.throwIfAborted();
        await extractEntry(entry, prefix, realPrefix, symlink);
      }
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      if (error instanceof UnsafeEntryError) fail("unsafe-archive", error.message, error);
      fail("install-failed", `extracting under ${prefix}: ${errorMessage(error)}`, error);
    }
  }
}

/** An archive entry that extraction refuses. */
class UnsafeEntryError extends Error {}

/**
 * The first pass: every entry's name, type and link checked before anything is written, so that the second
 * pass neither writes outside the prefix nor stops halfway on entries that cannot coexist.
 */
class ExtractionPlan {
  /** The kind of the latest entry of each file, symlink or hard link name. */
  readonly #leaves = new Map<string, "file" | "symlink">();
  /**
   * Names that must stay directories: directory entries, every entry's parents, and the directories an archive
   * symlink's target passes through (resolved lexically, which holds only while they are real directories).
   */
  readonly #directories = new Set<string>();

  check(entry: TarEntry): void {
    if (namesPrefixItself(entry)) return;
    const name = safeName(entry.name);
    const shown = JSON.stringify(entry.name.slice(0, 200));
    const parts = name.split("/");
    for (let i = 1; i < parts.length; i++) {
      const leaf = this.#leaves.get(parts.slice(0, i).join("/"));
      // Extraction would follow the symlink, or fail to make a directory over the file ("File exists").
      if (leaf !== undefined) {
        throw new UnsafeEntryError(`tar entry ${shown} lies below a ${leaf} of the archive`);
      }
    }
    if (entry.type !== "directory" && this.#directories.has(name)) {
      throw new UnsafeEntryError(`tar entry ${shown} is named like a directory of the archive`);
    }
    if (entry.type === "directory" && this.#leaves.has(name)) {
      throw new UnsafeEntryError(
        `directory ${shown} is named like a ${this.#leaves.get(name)} of the archive`,
      );
    }
    let passesThrough: string[] = [];
    switch (entry.type) {
      case "file":
        this.#leaves.set(name, "file");
        break;
      case "directory":
        this.#directories.add(name);
        break;
      case "symlink": {
        const target = entry.linkName;
        if (target === "" || target.startsWith("/")) {
          throw new UnsafeEntryError(`symlink ${shown} has an absolute or empty target`);
        }
        const resolved = resolveWithin(parts.slice(0, -1), target);
        if (resolved === undefined) {
          throw new UnsafeEntryError(`symlink ${shown} points outside the install prefix`);
        }
        // The lexical resolution is the real one only if no directory on the way is a symlink: through
        // `d/l -> ..`, "d/l/../.." is two levels above where it seems to be.
        if (resolved.some((path) => this.#leaves.get(path) === "symlink")) {
          throw new UnsafeEntryError(`symlink ${shown} has a target through a symlink of the archive`);
        }
        passesThrough = resolved;
        this.#leaves.set(name, "symlink");
        break;
      }
      case "hardlink": {
        const target = safeName(entry.linkName);
        if (this.#leaves.get(target) !== "file") {
          throw new UnsafeEntryError(`hard link ${shown} does not point to an earlier file of the archive`);
        }
        this.#leaves.set(name, "file");
        break;
      }
      default:
        throw new UnsafeEntryError(
          `tar entry ${shown} has a refused type (${entry.type}, flag ${entry.typeFlag})`,
        );
    }
    for (let i = 1; i < parts.length; i++) this.#directories.add(parts.slice(0, i).join("/"));
    for (const path of passesThrough) this.#directories.add(path);
  }
}

/**
 * Whether `entry` is the directory entry of the archive's root (`./`, `.`): `tar -C dir -czf x.tgz .` writes
 * one first, as the CNI plugins' release archives have it. It names the install prefix itself.
 */
function namesPrefixItself(entry: TarEntry): boolean {
  return entry.type === "directory" && !entry.name.startsWith("/") &&
    entry.name.split("/").every((part) => part === "" || part === ".");
}

/** An entry name as a relative path without "." elements; refuses absolute, empty and ".." names. */
function safeName(raw: string): string {
  const shown = JSON.stringify(raw.slice(0, 200));
  if (raw.startsWith("/")) throw new UnsafeEntryError(`tar entry ${shown} is an absolute path`);
  if (raw.includes("\0") || raw.includes("\\")) {
    throw new UnsafeEntryError(`tar entry ${shown} has a refused character`);
  }
  const parts = raw.split("/").filter((part) => part !== "" && part !== ".");
  if (parts.includes("..")) throw new UnsafeEntryError(`tar entry ${shown} has a ".." element`);
  if (parts.length === 0) throw new UnsafeEntryError(`tar entry ${shown} has an empty name`);
  return parts.join("/");
}

/**
 * The directories (below the prefix, not the prefix itself) that `target`, resolved lexically from the
 * directory `dir` (elements below the prefix), is looked up through; undefined when it leaves the prefix.
 */
function resolveWithin(dir: string[], target: string): string[] | undefined {
  const out = [...dir];
  const passesThrough: string[] = [];
  const parts = target.split("/").filter((part) => part !== "" && part !== ".");
  for (const [i, part] of parts.entries()) {
    // Every element reached before the last one is a directory the lookup goes on from.
    if (i > 0 && out.length > 0) passesThrough.push(out.join("/"));
    if (part === "..") {
      if (out.length === 0) return undefined;
      out.pop();
    } else out.push(part);
  }
  return passesThrough;
}

/** The second pass: writes one (already checked) entry. */
async function extractEntry(
  entry: TarEntry,
  prefix: string,
  realPrefix: string,
  symlink: (target: string, path: string) => Promise<void>,
): Promise<void> {
  if (namesPrefixItself(entry)) return; // made with the prefix, with the install's own mode
  const name = safeName(entry.name);
  const path = `${prefix}/${name}`;
  const mode = entry.mode & 0o755;
  if (entry.type === "directory") {
    await Deno.mkdir(path, { recursive: true, mode });
    await assertWithin(path, realPrefix);
    await Deno.chmod(path, mode);
    return;
  }
  await Deno.mkdir(dirname(path), { recursive: true, mode: 0o755 });
  await assertWithin(dirname(path), realPrefix);
  if (entry.type === "file") {
    await writeBeside(path, mode, (write) => entry.body(write));
    return;
  }
  await removeNonDirectory(path);
  if (entry.type === "symlink") await symlink(entry.linkName, path);
  else await Deno.link(`${prefix}/${safeName(entry.linkName)}`, path);
}

/** `ln -s -T -- target path`, with a cleared environment. */
async function runLn(
  binary: string,
  target: string,
  path: string,
  signal: AbortSignal | undefined,
): Promise<void> {
  const { code, stderr } = await new Deno.Command(binary, {
    args: ["-s", "-T", "--", target, path],
    env: {},
    clearEnv: true,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
    signal,
  }).output();
  if (code !== 0) {
    const excerpt = new TextDecoder().decode(stderr).trim().slice(0, 200);
    throw new Error(`${binary} -s exited with status ${code}: ${excerpt}`);
  }
}

/** Refuses a directory that resolves (through symlinks already on disk) outside the prefix. */
async function assertWithin(directory: string, realPrefix: string): Promise<void> {
  const real = await Deno.realPath(directory);
  if (real !== realPrefix && !real.startsWith(realPrefix + "/")) {
    throw new UnsafeEntryError(`${directory} resolves to ${real}, outside the install prefix`);
  }
}

async function removeNonDirectory(path: string): Promise<void> {
  try {
    const info = await Deno.lstat(path);
    if (info.isDirectory) throw new Error(`${path} is a directory`);
    await Deno.remove(path);
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
}

/**
 * Writes `target` through a temporary file in its directory: created
 * exclusively, filled by `fill`, synced, given `mode`, renamed over the
 * target (replacing a file or symlink, never following it). The temporary
 * file is removed on failure.
 */
async function writeBeside(
  target: string,
  mode: number,
  fill: (write: (chunk: Uint8Array) => Promise<void>) => Promise<void>,
): Promise<void> {
  const temp = `${dirname(target)}/.${basename(target)}.${
    crypto.getRandomValues(new Uint8Array(8)).toHex()
  }.tmp`;
  const file = await Deno.open(temp, { write: true, createNew: true, mode: 0o600 });
  try {
    try {
      await fill((chunk) => writeAll(file, chunk));
      await file.sync();
    } finally {
      file.close();
    }
    await Deno.chmod(temp, mode);
    await Deno.rename(temp, target);
  } catch (error) {
    await Deno.remove(temp).catch(() => {});
    throw error;
  }
}

async function writeAll(file: Deno.FsFile, bytes: Uint8Array): Promise<void> {
  for (let written = 0; written < bytes.length;) written += await file.write(bytes.subarray(written));
}

/** The URL without query or fragment (which may carry credentials), shortened for messages. */
function displayUrl(href: string): string {
  if (href.startsWith("data:")) return `data:… (${href.length} characters)`;
  try {
    const url = new URL(href);
    return `${url.origin}${url.pathname}`;
  } catch {
    return JSON.stringify(href.slice(0, 100));
  }
}

function basename(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}
