/**
 * Bearer tokens for the Kubernetes API: fixed, or read from a file that is
 * re-read periodically, because bound service-account tokens are rotated by
 * the kubelet (client-go re-reads them every minute too).
 *
 * @module
 */
import { type Clock, systemClock } from "../clock.ts";

/** Supplies the bearer token for each request. */
export interface TokenSource {
  /** The token to send now. */
  token(): Promise<string>;
}

/** Reads a text file; injected so callers keep read permissions scoped. */
export type ReadTextFile = (path: string) => Promise<string>;

/** A token source that always returns `token`. */
export function staticToken(token: string): TokenSource {
  return { token: () => Promise.resolve(token) };
}

/** Options for {@linkcode fileTokenSource}. */
export interface FileTokenSourceOptions {
  /** Reads the token file; default `Deno.readTextFile`. */
  readTextFile?: ReadTextFile;
  /** How long a read token is used before the file is read again; default 60 s. */
  refreshMs?: number;
  /** Time source; default the system clock. */
  clock?: Clock;
  /** A token already read from the file at `readAtMs` (e.g. at startup), used until it is due. */
  initial?: { token: string; readAtMs: number };
}

/**
 * A token source reading `path`, re-reading it once `refreshMs` have passed.
 * If a re-read fails (the kubelet swaps the file), the previous token is used
 * until the next attempt; the first read's failure is thrown.
 */
export function fileTokenSource(path: string, options: FileTokenSourceOptions = {}): TokenSource {
  const readTextFile = options.readTextFile ?? Deno.readTextFile;
  const refreshMs = options.refreshMs ?? 60_000;
  const clock = options.clock ?? systemClock;
  let cached = options.initial;
  let pending: Promise<string> | undefined;

  const read = async (): Promise<string> => {
    try {
      const token = (await readTextFile(path)).trim();
      if (token === "") throw new Error(`token file ${path} is empty`);
      cached = { token, readAtMs: clock.now() };
      return token;
    } catch (error) {
      if (cached) {
        // Retry on the next refresh period rather than on every request.
        cached = { token: cached.token, readAtMs: clock.now() };
        return cached.token;
      }
      throw new Error(`reading bearer token file ${path}: ${(error as Error).message}`);
    }
  };

  return {
    token() {
      if (cached && clock.now() - cached.readAtMs < refreshMs) return Promise.resolve(cached.token);
      pending ??= read().finally(() => pending = undefined);
      return pending;
    },
  };
}
