/**
 * Bearer tokens for the Kubernetes API: fixed, or read from a file that is
 * re-read periodically, because bound service-account tokens are rotated by
 * the kubelet (client-go re-reads them every minute too).
 *
 * @module
 */
import { type Clock, systemClock } from "../clock.ts";
import { ReasonError } from "../reason_error.ts";

/** Supplies the bearer token for each request. */
export interface TokenSource {
  /** The token to send now. */
  token(): Promise<string>;
}

/** Reads a text file; injected so callers keep read permissions scoped. */
export type ReadTextFile = (path: string) => Promise<string>;

/** Why a token file gave no token; named as the kubeconfig's reasons, so loaders pass them on unchanged. */
export type TokenFileErrorReason =
  | "unreadable" // the file could not be read
  | "missing" // the file is empty
  | "malformed"; // the file holds something that is not a bearer token

/** A token file could not be read or holds no usable token. The message never holds the file's content. */
export class TokenFileError extends ReasonError<TokenFileErrorReason> {}

/**
 * Whether `token` can be sent as a bearer token: visible ASCII only (RFC
 * 6750's b64token is a subset). A control character (a newline inside, a
 * token file of two lines) cannot go into a header: Deno's `Headers` throws
 * a TypeError quoting the whole header, token included. Spaces and
 * non-ASCII characters are refused too: no issued token has them, so they
 * mean a damaged value.
 */
export function isWellFormedToken(token: string): boolean {
  return /^[\x21-\x7e]+$/.test(token);
}

/**
 * The token in a token file's `text`, without surrounding white space.
 *
 * @throws {TokenFileError} "missing" if there is none, "malformed" if it is
 * not {@linkcode isWellFormedToken}; the message names `path`, never the content.
 */
export function tokenFromFile(text: string, path: string): string {
  const token = text.trim();
  if (token === "") throw new TokenFileError("missing", `token file ${path} is empty`);
  if (!isWellFormedToken(token)) {
    throw new TokenFileError(
      "malformed",
      `token file ${path} does not hold a bearer token (one line of visible ASCII characters)`,
    );
  }
  return token;
}

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
 * If a re-read fails or finds no usable token (the kubelet swaps the file),
 * the previous token is used until the next attempt; the first read's
 * failure is thrown as a {@linkcode TokenFileError}.
 */
export function fileTokenSource(path: string, options: FileTokenSourceOptions = {}): TokenSource {
  const readTextFile = options.readTextFile ?? Deno.readTextFile;
  const refreshMs = options.refreshMs ?? 60_000;
  const clock = options.clock ?? systemClock;
  let cached = options.initial;
  let pending: Promise<string> | undefined;

  const read = async (): Promise<string> => {
    try {
      const token = tokenFromFile(await readTextFile(path), path);
      cached = { token, readAtMs: clock.now() };
      return token;
    } catch (error) {
      if (cached) {
        // Retry on the next refresh period rather than on every request.
        cached = { token: cached.token, readAtMs: clock.now() };
        return cached.token;
      }
      throw new TokenFileError(
        error instanceof TokenFileError ? error.reason : "unreadable",
        `reading bearer token file ${path}: ${(error as Error).message}`,
      );
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
